// One request's blocks with a token in each slot, and the step's speculative drafts (the
// Speculative decoding lesson). The drafts row shows the pass: each draft, accepted (green) or
// rejected (struck red), then the model's own token. In the blocks the accepted drafts' slots fill
// green and stay; the rejected drafts' slots fill red and empty again (rolled back), and a block
// the rollback emptied fades back to the pool. Early blocks fold into small boxes when there are
// many, so the end where the drafts land stays large. Hovering a token or a block lights it.

function drawBlocks(ctx) {
  const { d, step, root } = ctx;
  const drafts = step.drafts;
  const accepted = new Set(drafts ? drafts.positions.slice(0, drafts.accepted) : []);
  const rolled = new Map((drafts ? drafts.rolled_back : []).map((r) => [`${r.block}:${r.offset}`, r]));

  // ---- the pass: drafts and verdicts ---------------------------------------------------------------
  const row = html("div", { class: "chips drafts", "data-testid": "stage-drafts" }, root);
  if (drafts && drafts.tokens.length) {
    html("span", { class: "label" }, row, "drafts");
    drafts.tokens.forEach((text, i) => {
      const ok = i < drafts.accepted;
      const attrs = ok ? { "data-token": String(drafts.positions[i]) } : { "data-draft": String(i) };
      const chip = html("span", { class: `chip draft ${ok ? "accepted" : "rejected"}`, ...attrs,
                                  title: ok ? "draft accepted: the model chose the same token"
                                            : "draft rejected: its K and V were rolled back" }, row, shown(text));
      hoverable(chip, ctx, ok ? { token: drafts.positions[i] } : { draft: i });
    });
    html("span", { class: "label" }, row, "then the model's own");
  } else {
    html("span", { class: "label" }, row, step.num_tokens === d.prompt_tokens ? "the prompt ran; the model's own" : "no drafts; the model's own");
  }
  const own = html("span", { class: "chip sampled", "data-token": String(step.num_tokens),
                             title: "the model's own token: its K and V enter the cache at the next pass" },
                   row, shown(d.tokens[step.num_tokens] ?? ""));
  hoverable(own, ctx, { token: step.num_tokens });

  // ---- the blocks --------------------------------------------------------------------------------------
  const blocks = step.block_table.map((block, logical) => ({ block, logical, freed: false }));
  (drafts ? drafts.freed_blocks : []).forEach((block, i) => blocks.push({ block, logical: step.block_table.length + i, freed: true }));
  const font = d.presenter ? 16 : 12;
  const slotWidth = 4 * font + 4;
  const width = Math.max(root.clientWidth || 900, 480);
  const perRow = Math.max(1, Math.floor(width / (d.block_size * slotWidth + 14)));
  const large = Math.max(perRow * 3, 2); // the last blocks, drawn with their tokens
  const firstLarge = Math.max(0, blocks.length - large);
  html("div", { class: "title" }, root,
       `The cache: ${plural(step.block_table.length, "block")} of ${d.block_size} slots, in block-table order `
       + `(physical block id above each)${firstLarge ? `; the first ${firstLarge} folded small` : ""}`);
  const strip = html("div", { class: "tblocks", "data-testid": "stage-blocks" }, root);
  blocks.forEach(({ block, logical, freed }, index) => {
    const small = index < firstLarge;
    const box = html("div", { class: `tblock${small ? " small" : ""}${freed ? " freed" : ""}`, "data-block": String(block),
                              title: freed ? `block ${block}: the rollback emptied it; it went back to the pool`
                                           : `logical block ${logical} lives in physical block ${block}` }, strip);
    html("div", { class: "id" }, box, freed ? `${block} → pool` : String(block));
    const slots = html("div", { class: "tslots" }, box);
    for (let s = 0; s < d.block_size; s++) {
      const position = logical * d.block_size + s;
      const draft = rolled.get(`${block}:${s}`);
      let kind = "empty";
      let attrs = {};
      let text = "";
      if (!freed && position < step.num_tokens) {
        kind = position < d.prompt_tokens ? "prompt" : accepted.has(position) ? "accepted" : "generated";
        if (step.new.includes(position) && kind !== "accepted") kind += " new";
        attrs = { "data-token": String(position) };
        text = shown(d.tokens[position]);
      } else if (draft) {
        kind = "rolled";
        attrs = { "data-draft": String(draft.draft) };
        text = shown(draft.text);
      }
      const slot = html("span", { class: `tslot ${kind}`, ...attrs }, slots, small ? null : clipped(text, 5));
      if (attrs["data-token"]) hoverable(slot, ctx, { token: position });
      else if (draft) hoverable(slot, ctx, { draft: draft.draft });
    }
    box.querySelector(".id").onmouseenter = () => ctx.hover({ block });
    box.querySelector(".id").onmouseleave = () => ctx.hover(null);
  });

  // ---- the passes in numbers ------------------------------------------------------------------------------
  const sum = step.summary;
  const line = html("div", { class: "bill", "data-testid": "stage-summary" }, root);
  html("span", { class: "formula" }, line,
       `${plural(sum.tokens, "token")} from ${plural(sum.passes, "forward pass", "forward passes")}`
       + ` (${sum.tokens_per_pass.toFixed(2)} a pass)`);
  html("span", {}, line, `${sum.accepted} of ${plural(sum.proposed, "draft")} accepted`);
  html("span", {}, line, `${plural(sum.rolled_back_slots, "slot")} rolled back, ${plural(sum.freed_blocks, "block")} freed`);
  html("span", {}, line, `plain decoding: ${plural(sum.plain_tokens, "token")} from ${plural(sum.plain_passes, "pass", "passes")}`);
  ctx.readoutIn(line);
  if (step.note) html("div", { class: "note" }, line, step.note);

  return {
    idle: "hover a token, a draft or a block",
    explain(target) {
      if (target.block !== undefined) {
        const entry = blocks.find((b) => b.block === target.block);
        if (!entry) return null;
        const first = entry.logical * d.block_size;
        const held = Math.max(0, Math.min(d.block_size, step.num_tokens - first));
        return { lit: [`[data-block="${target.block}"]`],
                 text: entry.freed ? `block ${target.block}: emptied by the rollback, back in the pool`
                   : `block ${target.block}: logical block ${entry.logical}, positions ${first}-${first + d.block_size - 1}, `
                     + `${held} of ${d.block_size} slots filled` };
      }
      if (target.draft !== undefined) {
        const i = target.draft;
        if (!drafts || i >= drafts.tokens.length) return null;
        const slot = drafts.rolled_back.find((r) => r.draft === i);
        const where = slot ? `were written to slot ${slot.offset} of block ${slot.block}, then rolled back` : "were not kept";
        return { lit: [`[data-draft="${i}"]`], text: `draft “${shown(drafts.tokens[i])}” was rejected: its K and V ${where}` };
      }
      const t = target.token;
      if (t === undefined || t > step.num_tokens) return null;
      if (t === step.num_tokens) {
        return { lit: [`[data-token="${t}"]`],
                 text: `“${shown(d.tokens[t] ?? "")}” is the model's own token: its K and V enter the cache at the next pass` };
      }
      const block = step.block_table[Math.floor(t / d.block_size)];
      const how = accepted.has(t) ? ", a draft the model accepted in this pass" : t < d.prompt_tokens ? ", from the prompt" : "";
      return { lit: [`[data-token="${t}"]`, `.tblock[data-block="${block}"] > .id`],
               text: `“${shown(d.tokens[t])}” (position ${t}): slot ${t % d.block_size} of block ${block}${how}` };
    },
  };
}
