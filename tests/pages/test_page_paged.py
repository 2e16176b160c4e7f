"""The "Paged cache and batching" page under AppTest: the real engine's tables and pool."""

import pytest

from app_tests import click, open_lesson


@pytest.fixture()
def app():
    return open_lesson("lessons/paged_batching.py")


def test_steps_keep_tables_and_pool_consistent(app):
    click(app, "Start")
    for _ in range(9):
        click(app, "Step")
    assert not app.exception
    lesson = app.session_state["paged_run"]
    block_size = lesson.engine.block_size
    for step, record in enumerate(lesson.records):
        used = set()
        for state in record.requests:
            if state.status == "running":
                assert len(state.block_table) == -(-state.num_computed_tokens // block_size)
                used.update(state.block_table)
        blocks = lesson.pool_blocks(step)  # rebuilt from the records' events
        assert sum(not b.free for b in blocks) == len(used)  # pool counts add up
        assert record.num_free_blocks + len(used) == len(blocks)
        for block in blocks:
            assert block.ref_cnt == len(block.owners)
    # R2 and R4 share R1's system prompt: with prefix caching they hit
    assert lesson.prefix_stats(len(lesson.records) - 1)["cached_tokens"] > 0
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["Running requests"] == str(lesson.reservation_comparison(len(lesson.records) - 1)["requests"])


def test_a_small_pool_preempts_and_still_finishes(app):
    app.slider(key="paged_num_blocks").set_value(12).run()
    click(app, "Start")
    click(app, "Run to the end")
    lesson = app.session_state["paged_run"]
    assert lesson.finished and not app.exception
    assert lesson.engine.scheduler.num_preemptions > 0
    kinds = {e.kind for r in lesson.records for e in r.events}
    assert "preempt" in kinds
    assert all(r.status == "finished" for r in lesson.records[-1].requests)
    # nothing is held at the end, so there is no share of it to call wasted (it read "0% wasted")
    metrics = {m.label: m for m in app.metric}
    for label in ("Contiguous reservation", "Paged blocks"):
        assert (metrics[label].value, metrics[label].delta) == ("0 bytes", "no request holds memory")
    app.slider(key="paged_view_step").set_value(3).run()
    comparison = lesson.reservation_comparison(3)
    assert {m.label: m.delta for m in app.metric}["Paged blocks"] == f"{comparison['paged_waste']:.0%} wasted"


def test_a_pool_too_small_for_any_request_says_so(app):
    click(app, "Start")
    before = app.session_state["paged_run"]
    app.slider(key="paged_num_blocks").set_value(2).run()
    click(app, "Start")
    assert "pool has only 2" in app.error[0].value
    assert app.session_state["paged_run"] is before and not app.exception
