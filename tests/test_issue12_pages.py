"""Numbers and controls a teacher found wrong by driving the pages (issue 12), under AppTest."""

from conftest import open_lesson


def click(at, label):
    next(b for b in at.button if b.label == label).click().run()


def metric(at, label):
    return next(m for m in at.metric if m.label == label)


def test_paged_waste_counts_a_shared_prefix_block_once():
    at = open_lesson("lessons/paged_batching.py")
    click(at, "Start")
    click(at, "Step")
    click(at, "Step")
    lesson = at.session_state["lesson_paged"]
    record, block_size = lesson.records[-1], lesson.engine.block_size
    running = [r for r in record.requests if r.status == "running" and r.num_computed_tokens]
    tables = [r.block_table for r in running]
    shared = set(tables[0]).intersection(*tables[1:])
    assert len(running) >= 2 and shared  # R2 reuses R1's system-prompt blocks
    filled = {}
    for r in running:
        for i, block in enumerate(r.block_table):
            filled[block] = max(filled.get(block, 0), min(block_size, r.num_computed_tokens - i * block_size))
    slots = len(filled) * block_size
    expected = 1 - sum(filled.values()) / slots
    assert expected > 0  # the pool has empty slots, so the page must not say 0%
    assert metric(at, "Paged blocks").delta == f"{expected:.0%} wasted"
    assert f"{len(filled)} blocks hold {slots} slots" in metric(at, "Paged blocks").help


def test_paged_predict_panel_offers_a_request_after_a_new_start():
    at = open_lesson("lessons/paged_batching.py")
    click(at, "Start")
    at.selectbox(key="paged_question_request").select_index(0).run()
    click(at, "Run to the end")
    assert any("Every request has finished" in c.value for c in at.caption)
    click(at, "Start")
    box = at.selectbox(key="paged_question_request")
    assert box.value is not None and box.options
    commit = next(b for b in at.button if b.label == "Commit")
    assert not commit.disabled
    commit.click().run()
    assert len(at.session_state["paged_questions"]) == 1 and not at.exception
