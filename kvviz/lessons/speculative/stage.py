"""The Speculative decoding lesson as the stage draws it (kvviz.ui.stage): every pass, built once.

    data = stage_data(lesson, step=3, presenter=False)

Each forward pass of the engine with drafts: the request's cached tokens and block table, the
drafts with their positions, how many the model accepted, the cache slots of the rejected ones
(rolled back) and the blocks the rollback emptied, the run's numbers so far and one sentence.
All of it is read from the lesson's records; a pass's data does not change once it ran, so it
is built once and kept on the lesson (`lesson.stage_steps`).
"""

from __future__ import annotations

from kvviz.engine.records import StepRecord


def stage_data(lesson, step: int, presenter: bool = False) -> dict:
    """The stage's data for every pass the run with drafts has so far."""
    cache = lesson.stage_steps
    rows = lesson.draft_steps()
    while len(cache) < len(lesson.records):
        cache.append(_step(lesson, len(cache), rows[len(cache)], cache[-1]["summary"] if cache else None))
    steps = cache[:len(lesson.records)]
    token_ids = lesson.prompt_token_ids + lesson.output(len(lesson.records) - 1)
    return {"tokens": [lesson.decode([t]) for t in token_ids], "prompt_tokens": len(lesson.prompt_token_ids),
            "block_size": lesson.settings["block_size"], "step_word": "Pass", "count_from": 1,
            "presenter": presenter, "step": min(step, len(steps) - 1), "steps": steps}


def held_blocks(record: StepRecord) -> tuple[list[int], bool]:
    """The request's block table after the pass, and whether it finished in it (a finished
    request's table is empty: then the blocks it held until then, from its finish event)."""
    state = record.requests[0]
    if state.status != "finished":
        return list(state.block_table), False
    return next((list(e.block_ids) for e in record.events if e.kind == "finish"), []), True


def _summary(lesson, step: int, row, previous: dict | None) -> dict:
    """lesson.summary(step)'s numbers, added to the previous pass's: one pass's work, not all of them so far
    (a 4,096-pass file took 59 s when each pass summed every pass before it)."""
    last = previous or dict.fromkeys(SUMMARY_KEYS, 0)
    plain = lesson.plain_records
    tokens = last["tokens"] + len(lesson.records[step].sampled)
    return {"passes": step + 1, "plain_passes": min(step + 1, len(plain)), "tokens": tokens,
            "plain_tokens": last["plain_tokens"] + (len(plain[step].sampled) if step < len(plain) else 0),
            "tokens_per_pass": tokens / (step + 1), "proposed": last["proposed"] + len(row.draft_token_ids),
            "accepted": last["accepted"] + row.num_accepted,
            "rolled_back_slots": last["rolled_back_slots"] + len(row.rolled_back_slots),
            "freed_blocks": last["freed_blocks"] + len(row.freed_block_ids)}


SUMMARY_KEYS = ("tokens", "passes", "tokens_per_pass", "proposed", "accepted", "rolled_back_slots", "freed_blocks",
                "plain_tokens", "plain_passes")


def _step(lesson, step: int, row, previous: dict | None) -> dict:
    record = lesson.records[step]
    before = lesson.records[step - 1].requests[0].num_computed_tokens if step else 0
    num_tokens = record.requests[0].num_computed_tokens
    block_table, finished = held_blocks(record)
    block_size = lesson.settings["block_size"]
    drafts = None
    chunk = next((c for c in record.chunks if c.num_drafts), None)  # a file's passes are checked to have one
    if row.draft_token_ids and chunk is not None:
        first = chunk.start + chunk.num_tokens - chunk.num_drafts  # the drafts run after the request's last token
        rejected = range(row.num_accepted, len(row.draft_token_ids))
        drafts = {"tokens": [lesson.decode([t]) for t in row.draft_token_ids],
                  "positions": [first + i for i in range(len(row.draft_token_ids))], "accepted": row.num_accepted,
                  "rolled_back": [{"draft": i, "block": slot // block_size, "offset": slot % block_size,
                                   "text": lesson.decode([row.draft_token_ids[i]])}
                                  for i, slot in zip(rejected, row.rolled_back_slots)],
                  "freed_blocks": list(row.freed_block_ids)}
    summary = _summary(lesson, step, row, previous)
    return {"num_tokens": num_tokens, "new": list(range(before, num_tokens)), "sampled": True,
            "block_table": block_table, "drafts": drafts, "sentence": sentence(row, num_tokens, block_table),
            "summary": summary,
            "note": ("The request finished in this pass: its blocks went back to the pool; they are drawn as it "
                     "held them until then.") if finished else None}


def sentence(row, num_tokens: int, block_table: list[int]) -> str:
    """What one forward pass did, in words."""
    if row.step == 0:
        return (f"The prefill: all {num_tokens} prompt tokens ran in one forward pass and filled "
                f"{len(block_table)} blocks; the model chose the first token. Drafts start at the next pass.")
    if not row.draft_token_ids:
        return ("The last tokens never appeared earlier in the text, so there was nothing to copy: no drafts, "
                "a plain decode of one token.")
    proposed, accepted = len(row.draft_token_ids), row.num_accepted
    drafts = f"{proposed} draft{'s' if proposed != 1 else ''}"
    text = (f"The last token and {drafts} copied from earlier in the text ran in one pass; the model "
            + _verdict(accepted, proposed)
            + f", so the pass kept {len(row.added_token_ids)} token{'s' if len(row.added_token_ids) != 1 else ''}.")
    if row.rolled_back_slots:
        freed = row.freed_block_ids
        slots = len(row.rolled_back_slots)
        text += (" The rejected draft's cache slot was rolled back" if slots == 1 else
                 f" The {slots} rejected drafts' cache slots were rolled back")
        text += (f", and block{'s' if len(freed) > 1 else ''} {', '.join(map(str, freed))}, left empty, went back "
                 "to the pool." if freed else ".")
    return text


def _verdict(accepted: int, proposed: int) -> str:
    if accepted == 0:
        return "rejected it" if proposed == 1 else "rejected the first"
    if accepted == proposed:
        return {1: "agreed with it", 2: "agreed with both"}.get(proposed, f"agreed with all {proposed}")
    return "agreed with the first only" if accepted == 1 else f"agreed with the first {accepted}"
