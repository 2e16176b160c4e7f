// One request's cache, layer by layer (the Prefill and decode lesson): its tokens as chips, each
// layer's K and V columns with the newest token's attention over them, the block table, the pool
// and the bill. Hovering a token lights its chip, its column in every layer, its slot and block.

// the newest token's attention over the cached positions, in layer `layer` (-1: mean of layers)
// over the query heads `heads` (a list; all heads when empty); weights were sent as integers 0-255
function attentionOf(step, layer, heads) {
  const layers = layer < 0 ? step.attention.map((_, i) => i) : [layer];
  const out = new Array(step.num_tokens).fill(0);
  let count = 0;
  for (const l of layers) {
    for (const h of heads.length ? heads : step.attention[l].map((_, i) => i)) {
      const row = step.attention[l][h];
      for (let t = 0; t < row.length; t++) out[t] += row[t] / 255;
      count++;
    }
  }
  return out.map((w) => w / Math.max(count, 1));
}

// the query heads the picks average: one head, one KV head's group, or all (an empty list)
function pickedHeads(d, state) {
  if (state.head >= 0) return [state.head];
  if (state.group >= 0 && d.head_groups) return d.head_groups[state.group];
  return [];
}

// layers drawn whole: all of a small model's; a band of d.band_layers around the chosen layer otherwise
function bandOf(d, state) {
  const size = d.band_layers || d.layers;
  if (d.layers <= size) return { first: 0, count: d.layers };
  if (state.band === undefined || state.band === null) state.band = 0;
  if (state.layer >= 0 && (state.layer < state.band || state.layer >= state.band + size)) {
    state.band = state.layer - Math.floor(size / 2);
  }
  state.band = Math.max(0, Math.min(d.layers - size, state.band));
  return { first: state.band, count: size };
}

function strongestOf(weights) {
  return weights.reduce((a, b) => Math.max(a, b), 0);
}

// the layer and head pickers of the bar: they redraw in the browser
function attentionPicks(ctx, bar) {
  const { d, state } = ctx;
  const layerPick = html("select", { "aria-label": "Attention of layer", class: "pick" }, bar);
  html("option", { value: "-1" }, layerPick, "attention: mean of layers");
  for (let l = 0; l < d.layers; l++) html("option", { value: String(l) }, layerPick, `attention: layer ${l}`);
  layerPick.value = String(state.layer);
  layerPick.onchange = () => { state.layer = Number(layerPick.value); ctx.redraw(); };
  const headPick = html("select", { "aria-label": "Attention of head", class: "pick" }, bar);
  html("option", { value: "-1" }, headPick, "mean of heads");
  const groups = d.head_groups || [[...Array(d.heads).keys()]];
  const grouped = groups.length > 1 && groups.length < d.heads; // GQA: query heads under the KV head they share
  groups.forEach((group, g) => {
    const parent = grouped ? html("optgroup", { label: `KV head ${g} ← Q heads ${group.join(",")}` }, headPick) : headPick;
    if (grouped) html("option", { value: `g${g}` }, parent, `KV ${g}: its Q heads`);
    for (const h of group) html("option", { value: String(h) }, parent, `head ${h}`);
  });
  headPick.value = state.head >= 0 ? String(state.head) : state.group >= 0 && grouped ? `g${state.group}` : "-1";
  headPick.onchange = () => {
    const value = headPick.value;
    state.group = value.startsWith("g") ? Number(value.slice(1)) : -1;
    state.head = value.startsWith("g") ? -1 : Number(value);
    ctx.redraw();
  };
  if ((d.special || []).length) { // a chat template's tokens: say what their chips are
    const legend = html("span", { class: "legend", "data-testid": "stage-legend" }, bar);
    html("span", { class: "chip prompt special", title: "a special token of the chat template (the tokenizer's own, "
                   + "not text): it marks where a turn starts and ends" }, html("span", { class: "key" }, legend), "special token");
  }
}

// the query heads grouped under the KV head they share, as a row of buttons: a Q head or a KV head picks
function headGroups(ctx, parent) {
  const { d, state } = ctx;
  const groups = d.head_groups || [];
  if (groups.length < 2 || groups.length >= d.heads) return; // MHA (a KV head each) or MQA: nothing shared to show
  const row = html("div", { class: "hgroups", "data-testid": "stage-head-groups" }, parent);
  html("span", { class: "hlabel" }, row, `${d.heads} query heads share ${groups.length} KV heads:`);
  groups.forEach((group, g) => {
    const box = html("span", { class: `hgroup${state.group === g && state.head < 0 ? " on" : ""}`, "data-kv-head": String(g) }, row);
    const kv = html("button", { class: "kvhead", title: `the mean attention of the query heads that read KV head ${g}` }, box, `KV ${g} ←`);
    kv.onclick = () => { state.head = -1; state.group = state.group === g ? -1 : g; ctx.redraw(); };
    for (const h of group) {
      const q = html("button", { class: `qhead${state.head === h ? " on" : ""}`, "data-head": String(h),
                                 title: `query head ${h} reads KV head ${g}'s K and V` }, box, `Q${h}`);
      q.onclick = () => { state.group = -1; state.head = state.head === h ? -1 : h; ctx.redraw(); };
    }
  });
}

// the layers not drawn whole, as a compact strip: a layer's cell is shaded by its attention to the
// newest token's strongest position; a click brings that layer into the band (and picks it)
function layerStrip(ctx, parent, band, heads) {
  const { d, step, state } = ctx;
  const strip = html("div", { class: "lstrip", "data-testid": "stage-layer-strip" }, parent);
  html("span", { class: "hlabel", title: `${band.count} of the ${d.layers} layers are drawn whole; click one to draw it` },
       strip, `${d.layers} layers:`);
  const means = [];
  for (let l = 0; l < d.layers; l++) means.push(strongestOf(attentionOf(step, l, heads)));
  const top = Math.max(...means, 1e-9);
  for (let l = 0; l < d.layers; l++) {
    const inBand = l >= band.first && l < band.first + band.count;
    const cell = html("button", { class: `lcell${inBand ? " band" : ""}${state.layer === l ? " on" : ""}`, "data-layer": String(l),
                                  title: `layer ${l}: strongest attention ${(100 * means[l]).toFixed(0)}%; click to draw it` }, strip, String(l));
    cell.style.setProperty("--strength", (0.15 + 0.85 * means[l] / top).toFixed(2));
    cell.onclick = () => { state.layer = state.layer === l ? -1 : l; if (state.layer < 0) state.band = l - Math.floor(band.count / 2); ctx.redraw(); };
  }
}

const MIN_COLUMN = 6; // px: a position's K and V cells, narrowest
const NARROW_PX = 600; // px: below this the stage is a phone's, one column
const MOST_ENTRIES = 12; // block-table entries drawn: the newest; a count stands for the rest (half in presenter type)
const MOST_BLOCKS = 6; // pool blocks drawn: those around the newest held block (half in presenter type)

function drawCache(ctx) {
  const { d, step, root, state, grew } = ctx;

  // ---- the tokens --------------------------------------------------------------------------------
  // a band of at most three rows (two in presenter mode), scrolled to the newest token: a long lesson keeps its diagram on the first screen
  const chips = html("div", { class: "chips band", "data-testid": "stage-chips" }, root);
  if (d.presenter) chips.style.maxHeight = "3.9em"; // two rows of the presenter's larger chips
  const visible = step.num_tokens + (step.sampled ? 1 : 0);
  const special = new Set(d.special || []);
  for (let t = 0; t < visible; t++) {
    const kind = t >= step.num_tokens ? "sampled" : t < d.prompt_tokens ? "prompt" : "generated";
    const extra = special.has(t) ? " special" : "";
    const chip = html("span", { class: `chip ${kind}${extra}${step.new.includes(t) ? " new" : ""}`, "data-token": String(t),
                                title: (kind === "sampled" ? "just sampled: its K and V enter the cache at the next step"
                                                           : `position ${t}`) + (extra ? "; a special token of the chat template" : "") },
                       chips, shown(d.tokens[t]));
    hoverable(chip, ctx, { token: t });
  }

  const picks = html("div", { class: "picks" }, root);
  headGroups(ctx, picks);
  const heads = pickedHeads(d, state);
  const band = bandOf(d, state);
  if (band.count < d.layers) layerStrip(ctx, picks, band, heads);
  if (!picks.childNodes.length) picks.remove();

  // ---- the cache, the block table and the pool ----------------------------------------------------
  const weights = attentionOf(step, state.layer, heads);
  const scale = d.presenter ? 1.35 : 1;
  // a phone (a box under 600 px): the cache band takes the whole width and the block table, pool and bill go
  // under it; its columns are windowed to the newest positions that fit, as on a wide screen
  const narrow = (root.clientWidth || 900) < NARROW_PX;
  const width = narrow ? Math.max(root.clientWidth, 260) : Math.max(root.clientWidth || 900, 640);
  const poolWidth = narrow ? width : Math.min(330 * scale, width * 0.34);
  const gridWidth = narrow ? width : width - poolWidth - 24;
  const labelWidth = 70 * scale;
  const maxTokens = d.steps[d.steps.length - 1].num_tokens;
  // columns stay readable (MIN_COLUMN px): when more positions are cached than fit, the newest that fit are drawn
  const room = gridWidth - labelWidth - 8;
  const column = Math.max(MIN_COLUMN, Math.min(26 * scale, room / Math.max(maxTokens, 1)));
  const first = Math.max(0, step.num_tokens - Math.floor(room / column)); // the window's oldest position
  const xOf = (t) => labelWidth + (t - first) * column;
  const row = Math.max(6, Math.min(11, 110 / band.count)); // K and V rows of a layer; its label spans both
  const headerHeight = 16 * scale + 8;
  const attentionHeight = 2 * (d.presenter ? 16 : 12) + 4;
  const labelsHeight = column >= 11 ? 40 * scale : 0; // token texts under their columns, where they fit
  const gridHeight = headerHeight + attentionHeight + band.count * (2 * row + 4) + 8 + labelsHeight;
  const wrap = html("div", { class: `stagebox${narrow ? " narrow" : ""}` }, root);
  const svg = el("svg", { width: gridWidth, height: gridHeight, class: "cache", "data-testid": "stage-cache" });
  wrap.appendChild(svg);
  requestAnimationFrame(() => { chips.scrollTop = chips.scrollHeight; }); // laid out now: show the newest tokens
  const folded = band.count < d.layers;
  const titleText = el("text", { x: 0, y: 14 * scale, class: "title" }, svg,
                       folded ? `Layers ${band.first}-${band.first + band.count - 1} of ${d.layers}: ` : "Each layer's cache: ");
  el("tspan", { class: "k-word" }, titleText, "K");
  titleText.appendChild(document.createTextNode(" over "));
  el("tspan", { class: "v-word" }, titleText, "V");
  titleText.appendChild(document.createTextNode(first ? (narrow ? `, ${first}-${step.num_tokens - 1}` // a phone: the short form
                                                               : ` for positions ${first}-${step.num_tokens - 1} of ${step.num_tokens}`)
                                                : narrow ? "" : folded ? " per cached position" : " for every cached position"));
  if (first) el("title", {}, titleText, `The ${first} older positions are cached too; their chips are above`);
  const slides = (d.windows || []).filter((w) => w).length; // sliding layers, and how much of the context they hold
  if (slides) {
    const window = Math.max(...d.windows.filter((w) => w));
    root.insertBefore(html("div", { class: "slides", "data-testid": "stage-slides" }, null,
      `${slides} of ${d.layers} layers slide (⇤): each holds the last ${Math.min(window, step.num_tokens).toLocaleString("en-US")} `
      + `of the ${step.num_tokens.toLocaleString("en-US")} positions; the other ${d.layers - slides} hold every one`), wrap);
  }
  const top = headerHeight;
  // the newest token's attention, as bars above its columns
  const labelSize = d.presenter ? 16 : 12;
  el("text", { x: 0, y: top + labelSize - 2, class: "label" }, svg, "attention");
  el("text", { x: 0, y: top + 2 * labelSize - 1, class: "label" }, svg, `max ${(100 * strongestOf(weights)).toFixed(0)}%`);
  const newest = step.num_tokens - 1;
  const strongest = Math.max(strongestOf(weights), 1e-9);
  for (let t = first; t < step.num_tokens; t++) {
    const x = xOf(t);
    const h = Math.max(1, (weights[t] / strongest) * (attentionHeight - 6)); // the strongest fills the row
    el("rect", { x: x + 0.5, y: top + attentionHeight - h, width: Math.max(column - 1, 1), height: h,
                 class: `att${t === newest ? " query" : ""}`, "data-token": String(t) }, svg)
      .appendChild(el("title", {}, null, `${shown(d.tokens[t])}: ${(100 * weights[t]).toFixed(1)}% of the newest token's attention`));
  }
  for (let l = band.first; l < band.first + band.count; l++) {
    const y = top + attentionHeight + 4 + (l - band.first) * (2 * row + 4);
    // a sliding layer keeps its last `window` positions: the older ones are given back, drawn empty
    const window = d.windows ? d.windows[l] : null;
    const kept = window ? Math.max(0, step.num_tokens - window) : 0; // the oldest position it still holds
    el("text", { x: 0, y: y + row, class: `label${state.layer === l ? " on" : ""}${window ? " sliding" : ""}`,
                 "dominant-baseline": "middle", "data-window": window ? String(window) : "" }, svg,
       window ? `layer ${l} ⇤` : `layer ${l}`);
    el("title", {}, svg.lastChild, window ? `Layer ${l} slides: it keeps only the last ${window} positions; older ones are given back`
                                          : `Layer ${l} keeps every position: a row of keys (K) over a row of values (V)`);
    const layerWeights = attentionOf(step, l, heads);
    for (let t = first; t < step.num_tokens; t++) {
      const x = xOf(t);
      if (t < kept) { // outside the window: given back
        el("rect", { x: x + 0.5, y: y + 0.5, width: Math.max(column - 1, 1), height: 2 * row - 1, class: "cell gone",
                     "data-token": String(t), "data-layer": String(l) }, svg);
        continue;
      }
      const fresh = step.new.includes(t);
      const strength = 0.25 + 0.75 * Math.min(1, layerWeights[t] * 4);
      for (const [part, dy] of [["k", 0], ["v", row]]) {
        const cell = el("rect", { x: x + 0.5, y: y + dy + 0.5, width: Math.max(column - 1, 1), height: row - 1,
                                  class: `cell ${part}${fresh ? " fresh" : ""}${fresh && grew ? " slide" : ""}`,
                                  "data-token": String(t), "data-layer": String(l), "fill-opacity": strength.toFixed(2) }, svg);
        cell.onmouseenter = () => ctx.hover({ token: t });
        cell.onmouseleave = () => ctx.hover(null);
      }
    }
  }

  if (labelsHeight) {
    const base = top + attentionHeight + 4 + band.count * (2 * row + 4) + 6;
    for (let t = first; t < step.num_tokens; t++) {
      const x = xOf(t) + column / 2;
      el("text", { x, y: base, class: `tok${step.new.includes(t) ? " fresh" : ""}`, "data-token": String(t),
                   transform: `rotate(-55 ${x} ${base})`, "text-anchor": "end", dy: "0.9em" }, svg,
         clipped(shown(d.tokens[t]), 6));
    }
  }

  // the pool and this request's block table
  const side = html("div", { class: "side" }, wrap);
  side.style.width = `${poolWidth}px`;
  html("div", { class: "title" }, side, `Block table: ${plural(step.block_table.length, "block")} of ${d.block_size} tokens`);
  const table = html("div", { class: "table", "data-testid": "stage-block-table" }, side);
  // a long prompt's table and pool: the newest entries and blocks, with a count of the rest, so the bill
  // under them stays on the first screen (98 entries once pushed it 1,800 px down)
  const mostEntries = d.presenter ? MOST_ENTRIES / 2 : MOST_ENTRIES, mostBlocks = d.presenter ? MOST_BLOCKS / 2 : MOST_BLOCKS;
  const firstShown = Math.max(0, step.block_table.length - mostEntries);
  if (firstShown) html("span", { class: "entry more", title: "the older entries are in the table too" }, table, `+${firstShown} earlier`);
  step.block_table.forEach((block, logical) => {
    if (logical < firstShown) return;
    const entry = html("span", { class: "entry", "data-block": String(block) }, table, `${logical}→${block}`);
    entry.title = `logical block ${logical} (positions ${logical * d.block_size}-${(logical + 1) * d.block_size - 1}) lives in physical block ${block}`;
    hoverable(entry, ctx, { block });
  });
  if (!step.block_table.length) html("span", { class: "entry empty" }, table, "none held");
  html("div", { class: "title" }, side, `The pool: ${d.num_blocks} physical blocks`);
  const pool = html("div", { class: "pool", "data-testid": "stage-pool" }, side);
  const owner = new Map(step.block_table.map((block, logical) => [block, logical]));
  // the pool's blocks around the newest held ones (the highest ids: the pool hands them out in order)
  const newestHeld = step.block_table.length ? Math.max(...step.block_table.slice(firstShown)) : 0;
  const windowed = d.num_blocks > 2 * mostBlocks; // a lesson's usual pool (6 blocks) is drawn whole
  const lastBlock = windowed ? Math.min(d.num_blocks, Math.max(newestHeld + 1 + 2, mostBlocks)) : d.num_blocks;
  const firstBlock = windowed ? Math.max(0, lastBlock - mostBlocks) : 0;
  if (firstBlock) html("div", { class: "block more", title: "the pool's other blocks" }, pool, `+${firstBlock}`);
  for (let b = firstBlock; b < lastBlock; b++) {
    const box = html("div", { class: `block${owner.has(b) ? " held" : ""}`, "data-block": String(b) }, pool);
    html("div", { class: "id" }, box, String(b));
    hoverable(box, ctx, { block: b });
    const slots = html("div", { class: "slots" }, box);
    for (let s = 0; s < d.block_size; s++) {
      const position = owner.has(b) ? owner.get(b) * d.block_size + s : -1;
      const filled = position >= 0 && position < step.num_tokens;
      html("span", { class: `slot${filled ? " filled" : ""}${filled && step.new.includes(position) ? " fresh" : ""}`,
                     "data-token": filled ? String(position) : "" }, slots);
    }
  }
  if (lastBlock < d.num_blocks) html("div", { class: "block more", title: "the pool's other blocks" }, pool, `+${d.num_blocks - lastBlock}`);

  // ---- the bill, under the pool it counts: beside the diagram, so the first screen holds it ---------
  const bill = html("div", { class: "bill", "data-testid": "stage-bill" }, side);
  const b = step.bill;  // the short figures first: in presenter type the formula wraps onto several lines
  // a model with sliding layers holds two tables: the full layers' (drawn above) and the sliding layers'
  const split = b.group_blocks && b.group_blocks.length > 1 ? ` (${b.group_blocks[0]} full-layer, ${b.group_blocks[1]} sliding)` : "";
  html("span", { "data-testid": "stage-bill-blocks" }, bill, `${plural(b.blocks, "block")}${split} held, ${formatBytes(b.block_bytes)}`);
  html("span", { "data-testid": "stage-bill-slack" }, bill, `slack ${formatBytes(b.slack_bytes)}`);
  html("span", {}, bill, `measured ${formatBytes(b.token_bytes)}`);
  if (b.formula.length > 1) { // layers of two kinds (full and sliding): a line for each, as the bill splits them
    for (const line of b.formula) html("span", { class: "formula" }, bill, line.replace(/ = ([\d,]+) bytes \((.*)\)$/, " = $2"));
  } else {
    html("span", { class: "formula" }, bill, `${step.num_tokens} tokens × ${d.per_token_formula} = ${formatBytes(b.formula_bytes)}`);
  }
  ctx.readoutIn(bill);
  if (b.note) html("div", { class: "note" }, bill, b.note);

  return {
    idle: "hover a token or a block",
    explain(target) {
      if (target.block !== undefined) return explainBlock(target.block);
      const t = target.token;
      if (t === undefined || t >= visible) return null;
      if (t >= step.num_tokens) {
        return { lit: [`[data-token="${t}"]`],
                 text: `“${shown(d.tokens[t])}” was just sampled: its K and V enter the cache at the next step` };
      }
      const block = step.block_table[Math.floor(t / d.block_size)];
      return { lit: [`[data-token="${t}"]`, `[data-block="${block}"]`],
               text: `“${shown(d.tokens[t])}” (position ${t}): ${formatBytes(d.bytes_per_token)} in `
                 + `${d.layers} layers, slot ${t % d.block_size} of block ${block}, `
                 + `${(100 * weights[t]).toFixed(1)}% of the newest token's attention` };
    },
  };

  // a block of the pool or the table: lit with the tokens it holds, wherever they are drawn
  function explainBlock(block) {
    if (block >= d.num_blocks) return null;
    if (!owner.has(block)) return { lit: [`[data-block="${block}"]`], text: `block ${block}: free, no request holds it` };
    const logical = owner.get(block);
    const first = logical * d.block_size;
    const end = Math.min(first + d.block_size, step.num_tokens);
    const tokens = [];
    for (let t = first; t < end; t++) tokens.push(`[data-token="${t}"]`);
    return { lit: [`[data-block="${block}"]`, ...tokens],
             text: `block ${block} holds logical block ${logical}: positions ${first}-${end - 1}, `
               + `${end - first} of ${d.block_size} slots filled, ${formatBytes((end - first) * d.bytes_per_token)}` };
  }
}
