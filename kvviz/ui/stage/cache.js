// One request's cache, layer by layer (the Prefill and decode lesson): its tokens as chips, each
// layer's K and V columns with the newest token's attention over them, the block table, the pool
// and the bill. Hovering a token lights its chip, its column in every layer, its slot and block.

// the newest token's attention over the cached positions, in layer `layer` (-1: mean of layers)
// and head `head` (-1: mean of heads); weights were sent as integers 0-255
function attentionOf(step, layer, head) {
  const layers = layer < 0 ? step.attention.map((_, i) => i) : [layer];
  const out = new Array(step.num_tokens).fill(0);
  let count = 0;
  for (const l of layers) {
    const heads = head < 0 ? step.attention[l].map((_, i) => i) : [head];
    for (const h of heads) {
      const row = step.attention[l][h];
      for (let t = 0; t < row.length; t++) out[t] += row[t] / 255;
      count++;
    }
  }
  return out.map((w) => w / Math.max(count, 1));
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
  for (let h = 0; h < d.heads; h++) html("option", { value: String(h) }, headPick, `head ${h}`);
  headPick.value = String(state.head);
  headPick.onchange = () => { state.head = Number(headPick.value); ctx.redraw(); };
}

function drawCache(ctx) {
  const { d, step, root, state, grew } = ctx;

  // ---- the tokens --------------------------------------------------------------------------------
  const chips = html("div", { class: "chips" }, root);
  const visible = step.num_tokens + (step.sampled ? 1 : 0);
  for (let t = 0; t < visible; t++) {
    const kind = t >= step.num_tokens ? "sampled" : t < d.prompt_tokens ? "prompt" : "generated";
    const chip = html("span", { class: `chip ${kind}${step.new.includes(t) ? " new" : ""}`, "data-token": String(t),
                                title: kind === "sampled" ? "just sampled: its K and V enter the cache at the next step"
                                                          : `position ${t}` }, chips, shown(d.tokens[t]));
    hoverable(chip, ctx, { token: t });
  }

  // ---- the cache, the block table and the pool ----------------------------------------------------
  const weights = attentionOf(step, state.layer, state.head);
  const scale = d.presenter ? 1.35 : 1;
  const width = Math.max(root.clientWidth || 900, 640);
  const poolWidth = Math.min(330 * scale, width * 0.34);
  const gridWidth = width - poolWidth - 24;
  const labelWidth = 70 * scale;
  const maxTokens = d.steps[d.steps.length - 1].num_tokens;
  const column = Math.max(3, Math.min(26 * scale, (gridWidth - labelWidth - 8) / Math.max(maxTokens, 1)));
  const row = Math.max(6, Math.min(11, 110 / d.layers)); // K and V rows of a layer; its label spans both
  const headerHeight = 16 * scale + 8;
  const attentionHeight = 2 * (d.presenter ? 16 : 12) + 4;
  const labelsHeight = column >= 11 ? 40 * scale : 0; // token texts under their columns, where they fit
  const gridHeight = headerHeight + attentionHeight + d.layers * (2 * row + 4) + 8 + labelsHeight;
  const wrap = html("div", { class: "stagebox" }, root);
  const svg = el("svg", { width: gridWidth, height: gridHeight, class: "cache", "data-testid": "stage-cache" });
  wrap.appendChild(svg);
  const titleText = el("text", { x: 0, y: 14 * scale, class: "title" }, svg, "Each layer's cache: ");
  el("tspan", { class: "k-word" }, titleText, "K");
  titleText.appendChild(document.createTextNode(" over "));
  el("tspan", { class: "v-word" }, titleText, "V");
  titleText.appendChild(document.createTextNode(" for every cached position"));
  const top = headerHeight;
  // the newest token's attention, as bars above its columns
  const labelSize = d.presenter ? 16 : 12;
  el("text", { x: 0, y: top + labelSize - 2, class: "label" }, svg, "attention");
  el("text", { x: 0, y: top + 2 * labelSize - 1, class: "label" }, svg, `max ${(100 * strongestOf(weights)).toFixed(0)}%`);
  const newest = step.num_tokens - 1;
  const strongest = Math.max(strongestOf(weights), 1e-9);
  for (let t = 0; t < step.num_tokens; t++) {
    const x = labelWidth + t * column;
    const h = Math.max(1, (weights[t] / strongest) * (attentionHeight - 6)); // the strongest fills the row
    el("rect", { x: x + 0.5, y: top + attentionHeight - h, width: Math.max(column - 1, 1), height: h,
                 class: `att${t === newest ? " query" : ""}`, "data-token": String(t) }, svg)
      .appendChild(el("title", {}, null, `${shown(d.tokens[t])}: ${(100 * weights[t]).toFixed(1)}% of the newest token's attention`));
  }
  for (let l = 0; l < d.layers; l++) {
    const y = top + attentionHeight + 4 + l * (2 * row + 4);
    el("text", { x: 0, y: y + row, class: "label", "dominant-baseline": "middle" }, svg, `layer ${l}`);
    if (l === 0) el("title", {}, svg.lastChild, "Each layer holds a row of keys (K) over a row of values (V)");
    const layerWeights = attentionOf(step, l, state.head);
    for (let t = 0; t < step.num_tokens; t++) {
      const x = labelWidth + t * column;
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
    const base = top + attentionHeight + 4 + d.layers * (2 * row + 4) + 6;
    for (let t = 0; t < step.num_tokens; t++) {
      const x = labelWidth + t * column + column / 2;
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
  step.block_table.forEach((block, logical) => {
    const entry = html("span", { class: "entry", "data-block": String(block) }, table, `${logical}→${block}`);
    entry.title = `logical block ${logical} (positions ${logical * d.block_size}-${(logical + 1) * d.block_size - 1}) lives in physical block ${block}`;
  });
  if (!step.block_table.length) html("span", { class: "entry empty" }, table, "none held");
  html("div", { class: "title" }, side, `The pool: ${d.num_blocks} physical blocks`);
  const pool = html("div", { class: "pool", "data-testid": "stage-pool" }, side);
  const owner = new Map(step.block_table.map((block, logical) => [block, logical]));
  for (let b = 0; b < d.num_blocks; b++) {
    const box = html("div", { class: `block${owner.has(b) ? " held" : ""}`, "data-block": String(b) }, pool);
    html("div", { class: "id" }, box, String(b));
    const slots = html("div", { class: "slots" }, box);
    for (let s = 0; s < d.block_size; s++) {
      const position = owner.has(b) ? owner.get(b) * d.block_size + s : -1;
      const filled = position >= 0 && position < step.num_tokens;
      html("span", { class: `slot${filled ? " filled" : ""}${filled && step.new.includes(position) ? " fresh" : ""}`,
                     "data-token": filled ? String(position) : "" }, slots);
    }
  }

  // ---- the bill -------------------------------------------------------------------------------------
  const bill = html("div", { class: "bill", "data-testid": "stage-bill" }, root);
  const b = step.bill;
  html("span", { class: "formula" }, bill,
       `${step.num_tokens} tokens × ${d.per_token_formula} = ${formatBytes(b.formula_bytes)}`);
  html("span", {}, bill, `measured ${formatBytes(b.token_bytes)}`);
  html("span", {}, bill, `${plural(b.blocks, "block")} held, ${formatBytes(b.block_bytes)}`);
  html("span", {}, bill, `slack ${formatBytes(b.slack_bytes)}`);
  ctx.readoutIn(bill);
  if (b.note) html("div", { class: "note" }, bill, b.note);

  return {
    idle: "hover a token",
    explain(target) {
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
}
