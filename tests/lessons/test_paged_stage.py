"""The Paged lesson's stage data (kvviz/lessons/paged_batching/stage.py) against the engine's records:
block tables, reference counts, preemptions as blocks given back, returns, the live pool, and the
fork tab's shared prompt blocks and copy-on-write."""

import pytest

from kvviz.lessons.paged_batching import fork as fork_lesson
from kvviz.lessons.paged_batching.file import export_paged, import_paged
from kvviz.lessons.paged_batching.fork_view import DEFAULT_PROMPT as FORK_PROMPT
from kvviz.lessons.paged_batching.logic import DEFAULT_REQUESTS, PagedLesson, RequestSpec
from kvviz.lessons.paged_batching.stage import fork_stage_data, stage_data
from kvviz.ui.colors import request_color

SPECS = [RequestSpec(*request) for request in DEFAULT_REQUESTS]


@pytest.fixture(scope="module")
def run(bundled):
    """The page's requests on a pool of 12 blocks: R1's prompt blocks shared, and preemptions."""
    lesson = PagedLesson.start(bundled, SPECS, block_size=8, num_blocks=12, enable_prefix_caching=True)
    while lesson.step() is not None:
        pass
    return lesson


def test_every_step_shows_the_records_tables_and_the_pools_reference_counts(run):
    data = stage_data(run, 0)
    assert len(data["steps"]) == len(run.records) and data["step"] == 0
    assert data["requests"] == [{"id": rid, "label": f"R{i + 1}", "color": request_color(rid)}
                                for i, rid in sorted(run.request_ids.items())]
    for step, (record, shown) in enumerate(zip(run.records, data["steps"])):
        assert [(r["id"], r["status"], r["num_tokens"], r["block_table"], r["num_preemptions"])
                for r in shown["requests"]] == [
            (s.request_id, s.status, s.num_computed_tokens, s.block_table, s.num_preemptions) for s in record.requests]
        blocks = run.pool_blocks(step)
        listed = {b["block"]: b for b in shown["pool"]}
        for block in blocks:
            if block.free and not block.cached:
                assert block.block_id not in listed  # not listed: free
                continue
            entry = listed[block.block_id]
            assert (entry["ref_count"], entry["owners"], entry["cached"]) == (block.ref_cnt, block.owners, block.cached)
            holders = [s.request_id for s in record.requests if block.block_id in s.block_table]
            assert entry["ref_count"] == len(holders) and sorted(holders) == entry["owners"]
        assert shown["num_preemptions"] == run.num_preemptions(step)
    shared = [b for step in data["steps"] for b in step["pool"] if b["ref_count"] > 1]
    assert max(b["ref_count"] for b in shared) == 3  # R1's system prompt, found by R2 and R4


def test_a_preemption_gives_back_the_victims_blocks_and_a_return_finds_them_cached(run):
    data = stage_data(run, 0)
    preempted_at = next(r.step for r in run.records if any(e.kind == "preempt" for e in r.events))
    victim = next(e for e in run.records[preempted_at].events if e.kind == "preempt")
    step = data["steps"][preempted_at]
    row = next(r for r in step["requests"] if r["id"] == victim.request_id)
    assert row["gave_back"] == victim.block_ids and row["block_table"] == [] and row["status"] == "waiting"
    label = run.label(victim.request_id)
    assert f"so {label} was preempted: it gave back blocks {', '.join(map(str, victim.block_ids))}" in step["sentence"]
    still_held = [b for b in victim.block_ids if any(b in r["block_table"] and b not in r["new_blocks"]
                                                     for r in step["requests"])]
    assert still_held == [0, 1]  # the shared prompt blocks stay with R1 and R2
    assert "(0 and 1 stay: other requests share them)" in step["sentence"]

    back_at = next(s for s in range(preempted_at + 1, len(run.records))
                   if getattr(run.records[s].request(victim.request_id), "status", None) == "running")
    row = next(r for r in data["steps"][back_at]["requests"] if r["id"] == victim.request_id)
    hits = [b for e in run.records[back_at].events if e.kind == "prefix_hit" and e.request_id == victim.request_id
            for b in e.block_ids]
    assert row["returned"] and row["hit_blocks"] == hits and hits
    assert f"{label} came back after its preemption" in data["steps"][back_at]["sentence"]


def test_the_live_pool_has_the_reference_counts_the_stage_shows(bundled):
    lesson = PagedLesson.start(bundled, SPECS, block_size=8, num_blocks=40, enable_prefix_caching=True)
    for _ in range(9):  # to step 8, when R4 arrives and finds R1's prompt blocks
        lesson.step()
        shown = stage_data(lesson, len(lesson.records) - 1)["steps"][-1]["pool"]
        live = {b.block_id: b.ref_cnt for b in lesson.engine.pool.blocks if b.ref_cnt}
        assert {b["block"]: b["ref_count"] for b in shown if b["ref_count"]} == live
    assert live[0] == live[1] == 3


def test_each_step_is_built_once_and_a_replay_builds_the_same(run):
    built = stage_data(run, 5)["steps"]
    again = stage_data(run, 7)["steps"]
    assert all(a is b for a, b in zip(built, again))  # kept on the lesson, not built again
    replayed, _ = import_paged(export_paged(run, 0))
    assert stage_data(replayed, 5) == stage_data(run, 5)  # a lesson file draws the same stage


def test_a_fork_shares_the_prompt_blocks_and_a_write_copies_the_partly_filled_one(bundled):
    run = fork_lesson.run_fork(bundled, FORK_PROMPT, n=4, max_tokens=12, block_size=4)  # the tab's defaults
    data = fork_stage_data(run, 0)
    assert [r["label"] for r in data["requests"]] == ["s0", "s1", "s2", "s3"]
    prompt_blocks = run.records[0].requests[0].block_table
    first = data["steps"][0]
    assert {b["block"]: b["ref_count"] for b in first["pool"]} == {b: 4 for b in prompt_blocks}
    assert "forked from s0: they share its blocks 0, 1, 2, 3 (reference count 4)" in first["sentence"]
    copies = [e for record in run.records for e in record.events if e.kind == "copy"]
    shown = [(r["id"], pair) for step in data["steps"] for r in step["requests"] for pair in r["copied"]]
    assert shown == [(e.request_id, e.block_ids) for e in copies] and len(copies) == 3  # all writers but one
    partial = copies[0].block_ids[0]
    after = {b["block"]: b["ref_count"] for b in data["steps"][1]["pool"]}
    assert after[partial] == 1 and all(after[e.block_ids[1]] == 1 for e in copies)  # each its own now
    assert after[prompt_blocks[0]] == 4  # the full blocks stay shared
    assert (f"copy-on-write: s0, s1 and s2 were about to write into shared block {partial}, so each first got "
            f"its own copy (blocks {', '.join(str(e.block_ids[1]) for e in copies)}) and s3 keeps block {partial}"
            ) in data["steps"][1]["sentence"].lower()
