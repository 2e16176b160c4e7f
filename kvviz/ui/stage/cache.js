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
  if (!groups.length || groups.length >= d.heads) return; // MHA (a KV head each): nothing shared to show
  const row = html("div", { class: "hgroups", "data-testid": "stage-head-groups" }, parent);
  // MQA (one KV head for every query head) is the saving at its largest: said as plainly as GQA's groups
  html("span", { class: "hlabel" }, row, `${d.heads} query heads share ${plural(groups.length, "KV head")}${groups.length === 1 ? " (MQA)" : ""}:`);
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
const OLDER_PX = 36; // px: the strip that stands for the positions older than the columns drawn
const NARROW_PX = 600; // px: below this the stage is a phone's, one column
const MOST_ENTRIES = 12; // block-table entries drawn: the newest; a count stands for the rest (half in presenter type)
const MOST_BLOCKS = 6; // pool blocks drawn: those around the newest held block (half in presenter type)

function drawCache(ctx) {
  const { d, step, root, state, grew } = ctx;

  // Two columns under the bar, so that a projector's 720 px hold it all at every step: the tokens, the heads,
  // the layers and the cache on the left; the block table, the pool and the bill beside them. A phone (a box
  // under 600 px) stacks them: the cache band takes the whole width, the rest under it.
  const narrow = (root.clientWidth || 900) < NARROW_PX;
  const wrap = html("div", { class: `stagebox${narrow ? " narrow" : ""}` }, root);
  const main = html("div", { class: "stagemain" }, wrap);

  // ---- the tokens --------------------------------------------------------------------------------
  // a band of whole rows (three, two in presenter mode), scrolled to the newest token: a long lesson keeps its
  // diagram on the first screen; the keyboard can scroll it (it is a stop of the tab order)
  const chips = html("div", { class: `chips band rows-${d.presenter ? 2 : 3}`, "data-testid": "stage-chips", tabindex: "0",
                              role: "region", "aria-label": "The tokens so far (the newest last)" }, main);
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

  const picks = html("div", { class: "picks" }, main);
  headGroups(ctx, picks);
  const heads = pickedHeads(d, state);
  const band = bandOf(d, state);
  if (band.count < d.layers) layerStrip(ctx, picks, band, heads);
  if (!picks.childNodes.length) picks.remove();

  // ---- the cache, the block table and the pool ----------------------------------------------------
  const weights = attentionOf(step, state.layer, heads);
  const scale = d.presenter ? 1.35 : 1;
  // a phone's columns are windowed to the newest positions that fit, as on a wide screen
  const width = narrow ? Math.max(root.clientWidth, 260) : Math.max(root.clientWidth || 900, 640);
  // two tables and two pools (a model with sliding layers) take a wider column, so that each fits in few rows
  const grouped = step.groups && step.groups.length > 1;
  const poolWidth = narrow ? width : grouped ? Math.min(340 * scale, width * 0.40) : Math.min(330 * scale, width * 0.34);
  const gridWidth = narrow ? width : width - poolWidth - 24;
  main.style.width = narrow ? "100%" : `${gridWidth}px`;
  const labelWidth = 70 * scale;
  const maxTokens = d.steps[d.steps.length - 1].num_tokens;
  // columns stay readable (MIN_COLUMN px): when more positions are cached than fit, the newest that fit are drawn
  const room = gridWidth - labelWidth - 8;
  const column = Math.max(MIN_COLUMN, Math.min(26 * scale, room / Math.max(maxTokens, 1)));
  // when they do not all fit, a strip at the left stands for the older positions: cached in a full layer, and in a
  // sliding layer given back where its window has passed them (the part of the story a window of the newest hides)
  const older = Math.floor(room / column) >= step.num_tokens ? 0 : OLDER_PX;
  const first = Math.max(0, step.num_tokens - Math.floor((room - older) / column)); // the window's oldest position
  const xOf = (t) => labelWidth + older + (t - first) * column;
  const row = Math.max(6, Math.min(d.presenter ? 9 : 11, 110 / band.count)); // K and V rows of a layer; its label spans both
  const headerHeight = 16 * scale + 8;
  const attentionHeight = 2 * (d.presenter ? 16 : 12) + 4;
  // token texts under their columns, where they fit; not in presenter type for a deep model, whose strip of
  // layers and row of heads take that height on a projector's screen (the chips above name the tokens)
  const labelsHeight = column >= 11 && !(d.presenter && band.count < d.layers) ? 40 * scale : 0;
  const gridHeight = headerHeight + attentionHeight + band.count * (2 * row + 4) + 8 + labelsHeight;
  const svg = el("svg", { width: gridWidth, height: gridHeight, class: "cache", "data-testid": "stage-cache" });
  main.appendChild(svg);
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
  const givenBack = (step.groups || []).find((group) => group.window)?.given_back; // from the engine's table
  const slides = (d.windows || []).filter((w) => w).length; // sliding layers, and how much of the context they hold
  if (slides) {
    const window = Math.max(...d.windows.filter((w) => w));
    const holds = step.num_tokens - (givenBack ?? Math.max(0, step.num_tokens - window));
    main.insertBefore(html("div", { class: "slides", "data-testid": "stage-slides" }, null,
      `${slides} of ${d.layers} layers slide (⇤ window ${window.toLocaleString("en-US")}): they hold the last ${holds.toLocaleString("en-US")} `
      + `of ${step.num_tokens.toLocaleString("en-US")}; ${d.layers - slides} hold all`), svg);
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
    // the oldest position it still holds: whole blocks go back, in the step after the window passed them all
    const kept = window ? (givenBack ?? Math.max(0, step.num_tokens - window)) : 0;
    el("text", { x: 0, y: y + row, class: `label${state.layer === l ? " on" : ""}${window ? " sliding" : ""}`,
                 "dominant-baseline": "middle", "data-window": window ? String(window) : "" }, svg,
       window ? `layer ${l} ⇤` : `layer ${l}`);
    el("title", {}, svg.lastChild, window ? `Layer ${l} slides: it keeps only the last ${window} positions; older ones are given back`
                                          : `Layer ${l} keeps every position: a row of keys (K) over a row of values (V)`);
    if (first) olderStrip(svg, l, y, row, labelWidth, first, kept);
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

  // the pool and this request's block table: one of each for every group of layers that shares a table (a model
  // with sliding layers keeps the full layers' and the sliding layers' apart, each in its own pool)
  const side = html("div", { class: "side" }, wrap);
  side.style.width = `${poolWidth}px`;
  const groups = step.groups && step.groups.length > 1 ? step.groups : null;
  // two groups: their tables one under the other, then their two pools side by side in one row (small blocks)
  const tables = groups ? groups.map(() => html("div", { class: "grouptable" }, side)) : [side];
  const pools = groups ? html("div", { class: "grouppools" }, side) : side;
  const owners = groups
    ? groups.map((group, g) => tableAndPool(ctx, tables[g], group.table, group.pool, g, group, pools))
    : [tableAndPool(ctx, side, step.block_table, d.num_blocks, undefined, null, side)];

  // ---- the bill, under the pool it counts: beside the diagram, so the first screen holds it ---------
  const bill = html("div", { class: "bill", "data-testid": "stage-bill" }, side);
  const b = step.bill;  // the short figures first: in presenter type the formula wraps onto several lines
  // a model with sliding layers holds two tables: the full layers' (drawn above) and the sliding layers'
  // two groups: their block counts head their tables above; the bill's first line says only what they hold
  const split = b.group_blocks && b.group_blocks.length > 1;
  html("span", { "data-testid": "stage-bill-blocks", title: split ? `${b.group_blocks[0]} full-layer and ${b.group_blocks[1]} sliding blocks` : "" },
       bill, split ? `held ${formatBytes(b.block_bytes)}` : `${plural(b.blocks, "block")} held, ${formatBytes(b.block_bytes)}`);
  html("span", { "data-testid": "stage-bill-slack" }, bill, `slack ${formatBytes(b.slack_bytes)}`);
  html("span", {}, bill, `measured ${formatBytes(b.token_bytes)}`);
  if (b.formula.length > 1) { // layers of two kinds (full and sliding): a line for each, as the bill splits them
    // the stage bills one request: its "× 1 request" factor goes, so that each line wraps less
    for (const line of b.formula) html("span", { class: "formula" }, bill, line.replace(/ = ([\d,]+) bytes \((.*)\)$/, " = $2").replace(" × 1 request", ""));
  } else {
    html("span", { class: "formula" }, bill, `${step.num_tokens} tokens × ${d.per_token_formula} = ${formatBytes(b.formula_bytes)}`);
  }
  // what a hover explains, and the step's note: under the bill in the column beside the cache, which has room to
  // spare with one table and one pool (below the cache, a band that wraps its heads and layers at 1366 px pushed
  // them off a 768 px screen); under the cache with two tables and two pools, whose column is the taller; on a
  // phone, under the bill
  const under = narrow ? bill : html("div", { class: "bill under", "data-testid": "stage-under" }, grouped ? main : side);
  ctx.readoutIn(under);
  if (b.note) html("div", { class: "note" }, under, b.note);

  return {
    idle: "hover a token or a block",
    explain(target) {
      if (target.block !== undefined) return explainBlock(target.block, target.group);
      const t = target.token;
      if (t === undefined || t >= visible) return null;
      if (t >= step.num_tokens) {
        return { lit: [`[data-token="${t}"]`],
                 text: `“${shown(d.tokens[t])}” was just sampled: its K and V enter the cache at the next step` };
      }
      const logical = Math.floor(t / d.block_size);
      const tables = groups ? groups.map((group) => group.table) : [step.block_table];
      const blocks = tables.map((table, g) => table[logical] === null || table[logical] === undefined ? null
                                 : `[data-block="${table[logical]}"]${groups ? `[data-group="${g}"]` : ""}`).filter(Boolean);
      const block = step.block_table[logical];
      const outside = groups && tables.some((table) => table[logical] === null) ? "; the sliding layers gave it back" : "";
      return { lit: [`[data-token="${t}"]`, ...blocks],
               text: `“${shown(d.tokens[t])}” (position ${t}): ${formatBytes(d.bytes_per_token)} in `
                 + `${d.layers} layers, slot ${t % d.block_size} of block ${block}, `
                 + `${(100 * weights[t]).toFixed(1)}% of the newest token's attention${outside}` };
    },
  };

  // a block of the pool or the table: lit with the tokens it holds, wherever they are drawn
  function explainBlock(block, group) {
    const its = owners[group || 0];
    const size = groups ? groups[group || 0].pool : d.num_blocks;
    if (!its || block >= size) return null;
    const selector = `[data-block="${block}"]${group === undefined ? "" : `[data-group="${group}"]`}`;
    const whose = groups ? `the ${groups[group].name} layers' block ${block}` : `block ${block}`;
    if (!its.has(block)) return { lit: [selector], text: `${whose}: free, no request holds it` };
    const logical = its.get(block);
    const first = logical * d.block_size;
    const end = Math.min(first + d.block_size, step.num_tokens);
    const tokens = [];
    for (let t = first; t < end; t++) tokens.push(`[data-token="${t}"]`);
    return { lit: [selector, ...tokens],
             text: `${whose} holds logical block ${logical}: positions ${first}-${end - 1}, `
               + `${end - first} of ${d.block_size} slots filled, ${formatBytes((end - first) * d.bytes_per_token)}` };
  }
}

// One block table and its pool, drawn into `side`; the map of the pool's held blocks to their logical block back.
// `group` (with `info`: name, layers, window, slid) when the model keeps a table per group of layers: a sliding
// group's entries that its window gave back are drawn struck through (and outlined in the step that gave them back).
function tableAndPool(ctx, side, blockTable, numBlocks, group, info, poolParent) {
  const { d, step } = ctx;
  const grouped = group !== undefined;
  const tag = grouped ? { "data-group": String(group) } : {};
  const held = blockTable.filter((block) => block !== null && block !== undefined);
  const slid = new Set(info ? info.slid : []);
  const name = info ? `${info.name[0].toUpperCase()}${info.name.slice(1)} (${plural(info.layers, "layer")})` : "Block table";
  html("div", { class: "title" }, side, grouped
    ? `${name}: ${held.length} of ${plural(numBlocks, "block")}`
    : `Block table: ${plural(blockTable.length, "block")} of ${d.block_size} tokens`);
  const table = html("div", { class: "table", "data-testid": grouped ? `stage-block-table-${group}` : "stage-block-table", ...tag }, side);
  // a long prompt's table and pool: the newest entries and blocks, with a count of the rest, so the bill
  // under them stays on the first screen (98 entries once pushed it 1,800 px down)
  const fewer = d.presenter || grouped; // presenter type, or two tables and two pools in one column: half as many
  const mostEntries = grouped ? MOST_ENTRIES / 4 : fewer ? MOST_ENTRIES / 2 : MOST_ENTRIES;
  const mostBlocks = grouped ? MOST_BLOCKS / 3 : fewer ? MOST_BLOCKS / 2 : MOST_BLOCKS; // two pools share a row
  const firstShown = Math.max(0, blockTable.length - mostEntries);
  const givenBack = blockTable.slice(0, firstShown).filter((block) => block === null).length;
  if (firstShown) {
    html("span", { class: "entry more", title: "the older entries are in the table too" }, table,
         givenBack ? `+${firstShown}, ${givenBack} given back` : `+${firstShown} earlier`);
  }
  blockTable.forEach((block, logical) => {
    if (logical < firstShown) return;
    const positions = `positions ${logical * d.block_size}-${(logical + 1) * d.block_size - 1}`;
    if (block === null || block === undefined) { // outside a sliding window: the block went back to its pool
      html("span", { class: "entry gone", title: `logical block ${logical} (${positions}) is outside the window: given back` },
           table, `${logical}→✕`);
      return;
    }
    const entry = html("span", { class: "entry", "data-block": String(block), ...tag }, table, `${logical}→${block}`);
    entry.title = `logical block ${logical} (${positions}) lives in physical block ${block}`;
    hoverable(entry, ctx, grouped ? { block, group } : { block });
  });
  if (slid.size) {
    html("span", { class: "entry slid", "data-testid": "stage-slid", title: "the window moved past these blocks in this step" },
         table, `gave back ${[...slid].join(", ")}`);
  }
  if (!blockTable.length) html("span", { class: "entry empty" }, table, "none held");
  if (!grouped) html("div", { class: "title" }, side, `The pool: ${numBlocks} physical blocks`);
  const poolBox = grouped ? html("div", { class: "grouppool" }, poolParent) : side;
  if (grouped) html("div", { class: "hlabel" }, poolBox, `${info.name} layers' pool`);
  const pool = html("div", { class: `pool${grouped ? " small" : ""}`, "data-testid": grouped ? `stage-pool-${group}` : "stage-pool", ...tag }, poolBox);
  const owner = new Map(blockTable.map((block, logical) => [block, logical]).filter(([block]) => block !== null && block !== undefined));
  // the pool's blocks around the newest held ones (the highest ids: the pool hands them out in order)
  const newestHeld = held.length ? Math.max(...held) : 0;
  // a lesson's usual pool (6 blocks) is drawn whole; in presenter type one row of blocks: the newest held and after
  const windowed = numBlocks > (fewer ? mostBlocks + 1 : 2 * mostBlocks);
  const freeAfter = Math.min(2, mostBlocks - 1); // free blocks drawn after the newest held one
  const lastBlock = windowed ? Math.min(numBlocks, Math.max(newestHeld + 1 + freeAfter, mostBlocks)) : numBlocks;
  const firstBlock = windowed ? Math.max(0, lastBlock - mostBlocks) : 0;
  if (firstBlock) html("div", { class: "block more", title: "the pool's other blocks" }, pool, `+${firstBlock}`);
  for (let b = firstBlock; b < lastBlock; b++) {
    const box = html("div", { class: `block${owner.has(b) ? " held" : ""}${slid.has(b) ? " slid" : ""}`, "data-block": String(b), ...tag }, pool);
    html("div", { class: "id" }, box, String(b));
    hoverable(box, ctx, grouped ? { block: b, group } : { block: b });
    const slots = html("div", { class: "slots" }, box);
    for (let s = 0; s < d.block_size; s++) {
      const position = owner.has(b) ? owner.get(b) * d.block_size + s : -1;
      const filled = position >= 0 && position < step.num_tokens;
      html("span", { class: `slot${filled ? " filled" : ""}${filled && step.new.includes(position) ? " fresh" : ""}`,
                     "data-token": filled ? String(position) : "" }, slots);
    }
  }
  if (lastBlock < numBlocks) html("div", { class: "block more", title: "the pool's other blocks" }, pool, `+${numBlocks - lastBlock}`);
  return owner;
}

// The positions before the drawn columns (0 to first - 1), in one strip at a layer's left: cached (a full layer, or
// a sliding layer's part still in its window) or given back (the part its window has passed, drawn empty).
function olderStrip(svg, layer, y, row, x, first, kept) {
  const width = OLDER_PX - 6, gone = Math.min(kept, first);
  const goneWidth = gone >= first ? width : gone ? Math.max(10, width * gone / first) : 0; // a few positions still show
  if (gone) {
    el("rect", { x: x + 0.5, y: y + 0.5, width: Math.max(goneWidth - 1, 1), height: 2 * row - 1, class: "cell gone older",
                 "data-layer": String(layer), "data-older": "gone" }, svg)
      .appendChild(el("title", {}, null, `positions 0-${gone - 1}: outside layer ${layer}'s window, given back`));
  }
  if (gone < first) {
    el("rect", { x: x + goneWidth + 0.5, y: y + 0.5, width: Math.max(width - goneWidth - 1, 1), height: 2 * row - 1,
                 class: "cell held older", "data-layer": String(layer), "data-older": "held" }, svg)
      .appendChild(el("title", {}, null, `positions ${gone}-${first - 1}: cached in layer ${layer} too (their chips are above)`));
  }
}
