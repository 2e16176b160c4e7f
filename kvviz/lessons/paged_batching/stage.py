"""The Paged cache and batching lesson as the stage draws it (kvviz.ui.stage): every step, built once.

    data = stage_data(lesson, step=3, presenter=False)

Each step holds the requests' block tables, the pool's held and cached blocks with their
reference counts (rebuilt from the records' events, as the pool figure below the stage is), the
blocks taken, found in the prefix cache and given back, and one sentence saying what happened.
A step's data does not change once it ran, so it is built once and kept on the lesson
(`lesson.stage_steps`).
"""

from __future__ import annotations

from kvviz.engine.records import StepRecord
from kvviz.ui.colors import request_color


def stage_data(lesson, step: int, presenter: bool = False) -> dict:
    """The stage's data for every step the run has so far."""
    cache = lesson.stage_steps
    while len(cache) < len(lesson.records):
        cache.append(_step(lesson, len(cache)))
    steps = cache[:len(lesson.records)]
    return {"block_size": lesson.block_size, "num_blocks": lesson.num_blocks, "presenter": presenter,
            "requests": [{"id": rid, "label": lesson.label(rid), "color": request_color(rid)}
                         for rid in sorted(lesson.request_ids.values())],
            "step": min(step, len(steps) - 1), "steps": steps}


def _step(lesson, step: int) -> dict:
    record = lesson.records[step]
    before = lesson.records[step - 1] if step else None
    requests = [_request(record, before, state) for state in record.requests]
    filled: dict[int, int] = {}  # physical block -> slots holding a token (the fullest of its owners)
    for state in record.requests:
        for logical, block_id in enumerate(state.block_table):
            in_block = min(lesson.block_size, max(0, state.num_computed_tokens - logical * lesson.block_size))
            filled[block_id] = max(filled.get(block_id, 0), in_block)
    pool = [{"block": b.block_id, "ref_count": b.ref_cnt, "owners": b.owners, "cached": b.cached,
             "filled": filled.get(b.block_id, lesson.block_size if b.cached else 0)}
            for b in lesson.pool_blocks(step) if not b.free or b.cached]
    return {"requests": requests, "pool": pool, "num_preemptions": lesson.num_preemptions(step),
            "sentence": sentence(record, before, lesson.label)}


def _blocks(record: StepRecord, request_id: int, *kinds: str) -> list[int]:
    return [b for e in record.events if e.request_id == request_id and e.kind in kinds for b in e.block_ids]


def _request(record: StepRecord, before: StepRecord | None, state) -> dict:
    earlier = before.request(state.request_id) if before else None
    returned = (state.status == "running" and earlier is not None and earlier.status == "waiting"
                and earlier.num_preemptions > 0)
    return {"id": state.request_id, "status": state.status, "num_tokens": state.num_computed_tokens,
            "num_preemptions": state.num_preemptions, "block_table": list(state.block_table),
            "new_blocks": _blocks(record, state.request_id, "allocate"),
            "hit_blocks": _blocks(record, state.request_id, "prefix_hit"),
            "gave_back": _blocks(record, state.request_id, "preempt", "finish"), "returned": returned}


def _ids(block_ids: list[int]) -> str:
    return ("block " if len(block_ids) == 1 else "blocks ") + ", ".join(map(str, block_ids))


def _names(labels: list[str]) -> str:
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]


def sentence(record: StepRecord, before: StepRecord | None, label) -> str:
    """What the step did to the pool, in words: arrivals and prefix hits, returns after a
    preemption, blocks taken, preemptions, finishes, evictions, and else the decodes."""
    clauses = []
    for chunk in record.chunks:
        if chunk.kind != "prefill":
            continue
        rid, name = chunk.request_id, label(chunk.request_id)
        earlier = before.request(rid) if before else None
        hits, taken = _blocks(record, rid, "prefix_hit"), _blocks(record, rid, "allocate")
        found = f", found {chunk.start} tokens in the prefix cache ({_ids(hits)})" if hits else ""
        took = f" and took {_ids(taken)}" if taken else ""
        if earlier is None:
            clauses.append(f"{name} arrived{found}; {chunk.num_tokens} prompt tokens ran in one pass{took}")
        elif earlier.status == "waiting" and earlier.num_preemptions:
            clauses.append(f"{name} came back after its preemption{found}; {chunk.num_tokens} tokens ran again{took}")
        elif earlier.status == "waiting":
            clauses.append(f"{name} got room in the pool{found}; {chunk.num_tokens} prompt tokens ran{took}")
        else:
            clauses.append(f"{name} ran {chunk.num_tokens} more prompt tokens{took}")
    running = {c.request_id for c in record.chunks}
    clauses += [f"{label(r.request_id)} arrived and waits for room in the pool" for r in record.requests
                if r.request_id not in running and r.status == "waiting" and before is not None
                and before.request(r.request_id) is None]
    prefilled = {c.request_id for c in record.chunks if c.kind == "prefill"}
    taken = {b for e in record.events if e.kind == "allocate" for b in e.block_ids}
    in_use = {b for r in record.requests for b in r.block_table} - taken  # held by others all along
    evicted = []
    for event in record.events:
        name = label(event.request_id) if event.request_id is not None else ""
        if event.kind == "allocate" and event.request_id not in prefilled:
            clauses.append(f"{name}'s last block was full, so it took {_ids(event.block_ids)}")
        elif event.kind == "preempt":
            shared = [b for b in event.block_ids if b in in_use]
            stay = (f" ({_names([str(b) for b in shared])} {'stays' if len(shared) == 1 else 'stay'}: "
                    f"other requests share {'it' if len(shared) == 1 else 'them'})") if shared else ""
            clauses.append(f"the pool ran out, so {name} was preempted: it gave back {_ids(event.block_ids)}{stay} "
                           "and will be computed again later")
        elif event.kind == "finish":
            clauses.append(f"{name} took its last token and finished: it gave back its {len(event.block_ids)} "
                           "blocks, the full ones keeping their cached prefix")
        elif event.kind == "evict":
            evicted += event.block_ids
    if evicted:
        clauses.append(f"{_ids(evicted)} still held a cached prefix nobody used, so "
                       f"{'it was' if len(evicted) == 1 else 'they were'} evicted and reused")
    finished = {r.request_id for r in record.requests if r.status == "finished"}
    decoded = [label(c.request_id) for c in record.chunks if c.kind == "decode" and c.request_id not in finished]
    each = " each" if len(decoded) > 1 else ""
    if decoded and not clauses:
        clauses.append(f"{_names(decoded)} decoded one token{each} into the free slots of "
                       f"{'their' if len(decoded) > 1 else 'its'} last block; no block changed hands")
    elif decoded:
        clauses.append(f"{_names(decoded)} decoded one token{each}")
    if not clauses:
        return "Nothing ran in this step: every request that arrived is waiting for room in the pool."
    text = "; ".join(clauses) + "."
    return text[0].upper() + text[1:]
