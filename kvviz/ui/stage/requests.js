// Several requests' block tables into one pool (the Paged cache and batching lesson). A row per
// request: its chip in the request's colour, its state, and its block table (logical block i ->
// physical block, a bar for the slots filled, ×n where n requests share the block). Beside it
// the pool: every physical block, coloured by its owner, purple when shared, green when free but
// still holding a cached prefix. Blocks a preemption or a finish gave back fade out of the row
// and back into the pool; a block taken this step is outlined; a copy made before writing into a
// shared block (copy-on-write) splits off it, marked ←shared. Hovering a request lights its
// blocks everywhere; hovering a block lights it in the pool and in every table that points at it.

const SHARED = "#7C3AED";

// a request's state in a word or two: the running ones by their tokens in the cache
function requestState(r) {
  if (r.status === "running") return plural(r.num_tokens, "token");
  if (r.status === "finished") return "finished";
  return r.num_preemptions ? "preempted" : "waiting";
}

function drawRequests(ctx) {
  const { d, step, root } = ctx;
  const meta = new Map(d.requests.map((r) => [r.id, r]));
  const label = (id) => (meta.get(id) || { label: `#${id}` }).label;
  const pool = new Map(step.pool.map((b) => [b.block, b]));
  const wrap = html("div", { class: "stagebox paged" }, root);

  // ---- the requests and their block tables ------------------------------------------------------
  const left = html("div", { class: "requests", "data-testid": "stage-requests" }, wrap);
  html("div", { class: "title" }, left, "Block tables: logical block → physical block");
  if (!step.requests.length) html("div", { class: "rstate" }, left, "No request has arrived yet.");
  for (const r of step.requests) {
    const color = meta.get(r.id).color;
    const row = html("div", { class: `rrow ${r.status}${r.returned ? " returned" : ""}`, "data-request": String(r.id) }, left);
    const chip = html("span", { class: "rchip", "data-request": String(r.id), title: requestState(r) }, row, label(r.id));
    chip.style.background = color;
    hoverable(chip, ctx, { request: r.id });
    html("span", { class: "rstate" }, row, requestState(r));
    const table = html("span", { class: "rtable", "data-testid": "stage-request-table" }, row);
    r.block_table.forEach((block, logical) => {
      const filled = Math.max(0, Math.min(d.block_size, r.num_tokens - logical * d.block_size));
      const refs = (pool.get(block) || { ref_count: 1 }).ref_count;
      const fresh = r.new_blocks.includes(block);
      const copy = r.copied.find(([, own]) => own === block);
      const entry = html("span", { class: `rentry${refs > 1 ? " shared" : ""}${fresh ? " fresh" : ""}${copy ? " copied" : ""}`,
                                   "data-block": String(block), "data-request": String(r.id) }, table);
      html("span", { class: "num" }, entry, String(block));
      if (refs > 1) html("span", { class: "refs" }, entry, `×${refs}`);
      if (copy) html("span", { class: "from" }, entry, `←${copy[0]}`);
      const share = (100 * filled) / d.block_size;
      entry.style.borderColor = refs > 1 ? SHARED : color;
      entry.style.background = `linear-gradient(to right, ${color} ${share}%, transparent ${share}%) bottom / 100% 4px no-repeat, white`;
      entry.title = `${label(r.id)}'s logical block ${logical} lives in physical block ${block}: `
        + `${filled} of ${d.block_size} slots filled` + (refs > 1 ? `, shared by ${refs} requests` : "")
        + (r.hit_blocks.includes(block) ? " (found in the prefix cache this step)" : "")
        + (copy ? ` (its own copy of shared block ${copy[0]}, made before writing into it: copy-on-write)` : "");
      hoverable(entry, ctx, { block });
    });
    for (const block of r.gave_back) { // what it held until this step, on its way back to the pool
      const ghost = html("span", { class: "rentry gone", "data-block": String(block), "data-request": String(r.id),
                                   title: `block ${block} went back to the pool` }, table);
      html("span", { class: "num" }, ghost, String(block));
      hoverable(ghost, ctx, { block });
    }
  }

  // ---- the pool ---------------------------------------------------------------------------------------
  const right = html("div", { class: "ppool-side" }, wrap);
  html("div", { class: "title" }, right, `The pool: ${plural(d.num_blocks, "physical block")} of ${d.block_size} slots`);
  const legend = html("div", { class: "legend" }, right);
  for (const [name, text] of [["shared", "shared (×refs)"], ["cached", "free, prefix cached"], ["free", "free"]]) {
    const item = html("span", { class: "key" }, legend);
    html("span", { class: `swatch ${name}` }, item);
    item.appendChild(document.createTextNode(text));
  }
  const grid = html("div", { class: "ppool", "data-testid": "stage-pool" }, right);
  const gaveBack = new Map(step.requests.flatMap((r) => r.gave_back.map((b) => [b, meta.get(r.id).color])));
  const taken = new Set(step.requests.flatMap((r) => r.new_blocks));
  const copies = new Set(step.requests.flatMap((r) => r.copied.map(([, own]) => own)));
  const columns = Math.min(d.block_size, 8);
  for (let b = 0; b < d.num_blocks; b++) {
    const info = pool.get(b);
    const held = info && info.ref_count > 0;
    const color = !held ? null : info.ref_count > 1 ? SHARED : meta.get(info.owners[0]).color;
    const kind = held ? (info.ref_count > 1 ? "held shared" : "held") : info && info.cached ? "cached" : "free";
    const box = html("div", { class: `pblock ${kind}${taken.has(b) ? " fresh" : ""}${gaveBack.has(b) && !held ? " gone" : ""}`
                                + (copies.has(b) ? " copied" : ""),
                              "data-block": String(b), "data-owners": held ? ` ${info.owners.join(" ")} ` : "" }, grid);
    if (color) box.style.borderColor = color;
    if (gaveBack.has(b)) box.style.setProperty("--was", gaveBack.get(b));
    const head = html("div", { class: "id" }, box, String(b));
    if (held && info.ref_count > 1) html("span", { class: "refs" }, head, `×${info.ref_count}`);
    const slots = html("div", { class: "pslots" }, box);
    slots.style.gridTemplateColumns = `repeat(${columns}, 1fr)`;
    for (let s = 0; s < d.block_size; s++) {
      const slot = html("span", { class: "pslot" }, slots);
      if (held && s < info.filled) slot.style.background = color;
    }
    hoverable(box, ctx, { block: b });
  }

  // ---- the pool in numbers ------------------------------------------------------------------------------
  const held = step.pool.filter((b) => b.ref_count > 0);
  const shared = held.filter((b) => b.ref_count > 1);
  const cachedFree = step.pool.filter((b) => b.ref_count === 0 && b.cached);
  const summary = html("div", { class: "bill", "data-testid": "stage-summary" }, root);
  html("span", { class: "formula" }, summary, `${held.length} of ${plural(d.num_blocks, "block")} held`);
  html("span", {}, summary, `${plural(shared.length, "block")} shared`);
  html("span", {}, summary, `${d.num_blocks - held.length} free, ${cachedFree.length} of them with a cached prefix`);
  html("span", {}, summary, `${plural(step.num_preemptions, "preemption")} so far`);
  ctx.readoutIn(summary);

  return {
    idle: "hover a request or a block",
    explain(target) {
      if (target.request !== undefined) {
        const r = step.requests.find((each) => each.id === target.request);
        if (!r) return null;
        const sharedWith = new Set();
        for (const block of r.block_table) {
          for (const owner of (pool.get(block) || { owners: [] }).owners) if (owner !== r.id) sharedWith.add(label(owner));
        }
        const blocks = r.block_table.length
          ? `holds ${plural(r.block_table.length, "block")} (${r.block_table.join(", ")})` : "holds no block";
        const others = sharedWith.size ? `, sharing some with ${[...sharedWith].join(", ")}` : "";
        const back = r.gave_back.length ? `; gave back ${listed(r.gave_back)} this step` : "";
        const copied = r.copied.map(([shared, own]) => `; copied shared block ${shared} into block ${own} `
                                            + "before writing (copy-on-write)").join("");
        return { lit: [`[data-request="${r.id}"]`, `.pblock[data-owners~="${r.id}"]`],
                 text: `${label(r.id)} (${r.status === "running" ? `running, ${requestState(r)}` : requestState(r)}): `
                   + `${blocks}${others}${back}${copied}` };
      }
      const b = target.block;
      if (b === undefined || b >= d.num_blocks) return null;
      const info = pool.get(b);
      const owners = info ? info.owners : [];
      let text = `block ${b}: free`;
      if (owners.length > 1) {
        text = `block ${b}: shared by ${owners.map(label).join(", ")} (reference count ${info.ref_count}), `
          + `${info.filled} of ${d.block_size} slots filled`;
      } else if (owners.length === 1) {
        text = `block ${b}: held by ${label(owners[0])}, ${info.filled} of ${d.block_size} slots filled`;
      } else if (info && info.cached) {
        text = `block ${b}: free, but its prefix is still cached: a request with the same tokens can take it back`;
      }
      if (info && info.cached && owners.length) text += ", its prefix cached";
      return { lit: [`[data-block="${b}"]`, ...owners.map((o) => `.rchip[data-request="${o}"]`)], text };
    },
  };
}
