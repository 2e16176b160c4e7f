"""The Paged cache and batching lesson as the stage draws it (kvviz.ui.stage): every step, built once.

    data = stage_data(lesson, step=3, presenter=False)      # the page's run of several requests
    data = fork_stage_data(run, step=1, presenter=False)    # the fork tab's n samples of one prompt

Each step holds the requests' block tables, the pool's held and cached blocks with their
reference counts (rebuilt from the records' events, as the pool figure below the stage is), the
blocks taken, found in the prefix cache, copied before a write (copy-on-write) and given back,
and one sentence saying what happened. A step's data does not change once it ran, so it is built
once and kept on the run (`stage_steps`).
"""

from __future__ import annotations

import dataclasses

from kvviz.engine.records import StepRecord, first_pool_size
from kvviz.ui.colors import request_color


def stage_data(lesson, step: int, presenter: bool = False) -> dict:
    """The stage's data for every step the page's run has so far."""
    return _data(lesson, lesson.label, sorted(lesson.request_ids.values()), lesson.num_preemptions, step, presenter)


def fork_stage_data(run, step: int, presenter: bool = False) -> dict:
    """The stage's data for the fork tab's run (kvviz/lessons/paged_batching/fork.py): no preemptions."""
    return _data(run, run.short_labels.get, run.sample_ids, lambda _: 0, step, presenter)


def _data(run, label, request_ids: list[int], num_preemptions, step: int, presenter: bool) -> dict:
    """`run` has records, held_blocks(step), block_size, num_blocks and the stage_steps list."""
    cache = run.stage_steps
    while len(cache) < len(run.records):
        cache.append(_step(run, len(cache), label, num_preemptions))
    steps = cache[:len(run.records)]
    return {"block_size": run.block_size, "num_blocks": first_pool_size(run.records, run.num_blocks),
            "presenter": presenter,
            "requests": [{"id": rid, "label": label(rid), "color": request_color(rid)} for rid in request_ids],
            "step": min(step, len(steps) - 1), "steps": steps}


def _step(run, step: int, label, num_preemptions) -> dict:
    record = _first_group(run.records[step])
    before = _first_group(run.records[step - 1]) if step else None
    requests = [_request(record, before, state) for state in record.requests]
    filled: dict[int, int] = {}  # physical block -> slots holding a token (the fullest of its owners)
    for state in record.requests:
        for logical, block_id in enumerate(state.block_table):
            in_block = min(run.block_size, max(0, state.num_computed_tokens - logical * run.block_size))
            filled[block_id] = max(filled.get(block_id, 0), in_block)
    pool = [{"block": b.block_id, "ref_count": b.ref_cnt, "owners": b.owners, "cached": b.cached,
             "filled": filled.get(b.block_id, run.block_size if b.cached else 0)}
            for b in run.held_blocks(step)]
    return {"requests": requests, "pool": pool, "num_preemptions": num_preemptions(step),
            "sentence": sentence(record, before, label)}


def _first_group(record: StepRecord) -> StepRecord:
    """The stage draws one pool: with sliding-window layers (engine/layer_groups.py), the first
    layer group's, whose table is block_table; the page draws every group's tables beside it."""
    if not record.layer_groups:
        return record
    return dataclasses.replace(record, events=[e for e in record.events if e.group == 0])


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
            "gave_back": _blocks(record, state.request_id, "preempt", "finish"), "returned": returned,
            "copied": [e.block_ids for e in record.events if e.kind == "copy" and e.request_id == state.request_id]}


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
    forked = [e.request_id for e in record.events if e.kind == "fork"]
    if forked:
        parent = record.request(forked[0]).parent_id
        shared = next(e.block_ids for e in record.events if e.kind == "fork")
        clauses.append(f"{_names([label(r) for r in forked])} forked from {label(parent)}: "
                       f"{'they share' if len(forked) > 1 else 'it shares'} its {_ids(shared)} "
                       f"(reference count {len(forked) + 1})")
    running = {c.request_id for c in record.chunks}
    clauses += [f"{label(r.request_id)} arrived and waits for room in the pool" for r in record.requests
                if r.request_id not in running and r.status == "waiting" and before is not None
                and before.request(r.request_id) is None]
    prefilled = {c.request_id for c in record.chunks if c.kind == "prefill"}
    taken = {b for e in record.events if e.kind == "allocate" for b in e.block_ids}
    in_use = {b for r in record.requests for b in r.block_table} - taken  # held by others all along
    copies: dict[int, list[tuple[int, int]]] = {}  # shared block -> (request, its own copy)
    for event in record.events:
        if event.kind == "copy":
            copies.setdefault(event.block_ids[0], []).append((event.request_id, event.block_ids[1]))
    copied = {own for pairs in copies.values() for _, own in pairs}
    evicted, grown, finished = [], [], []
    for event in record.events:
        name = label(event.request_id) if event.request_id is not None else ""
        if event.kind == "allocate" and event.request_id not in prefilled and not copied & set(event.block_ids):
            grown.append((name, event.block_ids))
        elif event.kind == "preempt":
            shared = [b for b in event.block_ids if b in in_use]
            stay = (f" ({_names([str(b) for b in shared])} {'stays' if len(shared) == 1 else 'stay'}: "
                    f"other requests share {'it' if len(shared) == 1 else 'them'})") if shared else ""
            clauses.append(f"the pool ran out, so {name} was preempted: it gave back {_ids(event.block_ids)}{stay} "
                           "and will be computed again later")
        elif event.kind == "finish":
            finished.append((name, event.block_ids))
        elif event.kind == "evict":
            evicted += event.block_ids
    if len(grown) == 1:
        clauses.append(f"{grown[0][0]}'s last block was full, so it took {_ids(grown[0][1])}")
    elif grown:
        clauses.append(f"the last blocks of {_names([name for name, _ in grown])} were full, so they took "
                       f"{_ids([b for _, blocks in grown for b in blocks])}")
    if len(finished) == 1:
        clauses.append(f"{finished[0][0]} took its last token and finished: it gave back its {len(finished[0][1])} "
                       "blocks, the full ones keeping their cached prefix")
    elif finished:
        clauses.append(f"{_names([name for name, _ in finished])} took their last tokens and finished: their blocks "
                       "went back to the pool, the full ones keeping their cached prefix")
    for shared, pairs in copies.items():
        writers = _names([label(rid) for rid, _ in pairs])
        owns = [own for _, own in pairs]
        keep = [label(r.request_id) for r in record.requests if shared in r.block_table]
        clauses.append(f"copy-on-write: {writers} {'were' if len(pairs) > 1 else 'was'} about to write into shared "
                       f"block {shared}, so {'each' if len(pairs) > 1 else 'it'} first got its own copy "
                       f"({_ids(owns)})" + (f" and {_names(keep)} {'keep' if len(keep) > 1 else 'keeps'} block "
                                            f"{shared}" if keep else ""))
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
    if text.startswith(("the ", "copy-on-write", "block")):  # else it starts with a request's label, as written
        text = text[0].upper() + text[1:]
    return text
