"""The "Speculative decoding" page under AppTest: drafts, verdicts and rollbacks from the records."""

import pytest

from kvviz.lessons.speculative import figures

from app_tests import open_lesson


@pytest.fixture()
def app():
    return open_lesson("lessons/speculative.py")


def click(at, key):
    at.button(key=key).click().run()


def test_steps_show_the_records_numbers(app):
    click(app, "spec_start")
    for _ in range(6):
        click(app, "spec_step")
    assert not app.exception
    lesson = app.session_state["spec_run"]
    step = len(lesson.records) - 1
    assert step == 6 and len(lesson.plain_records) == 7  # one pass of each engine per press
    rows = lesson.draft_steps()
    records_accepted = sum(d.num_accepted for r in lesson.records for d in r.drafts)
    records_proposed = sum(len(d.draft_token_ids) for r in lesson.records for d in r.drafts)
    tokens = sum(len(r.sampled) for r in lesson.records)
    assert sum(r.num_accepted for r in rows) == records_accepted > 0  # the verse's refrain is copied
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["Forward passes"] == "7"
    assert metrics["Tokens generated"] == str(tokens) and tokens > 7  # more than one token per pass
    assert metrics["Tokens per pass"] == f"{tokens / 7:.2f}"
    assert metrics["Drafts accepted"] == f"{records_accepted} of {records_proposed}"
    # the chips of the latest pass: accepted drafts in green, rejected ones struck in red
    chips = next(m.value for m in app.markdown if "draft accepted" in m.value or "draft rejected" in m.value)
    last = lesson.records[-1].drafts[0]
    assert chips.count("title='draft accepted'") == last.num_accepted
    assert chips.count("title='draft rejected: rolled back'") == len(last.draft_token_ids) - last.num_accepted
    # passes are counted from 1 everywhere: the heading, the slider, the table and the chart
    assert any(m.value.startswith("**Forward pass 7**") for m in app.markdown)
    slider = app.slider(key="spec_view_step")
    assert (slider.min, slider.max, slider.value) == (1, 7, 7)
    table = next(t.value for t in app.table if "drafts" in t.value.columns)
    assert list(table.index) == [str(number) for number in range(1, 8)]
    assert list(figures.tokens_per_pass(rows).data[0].x) == list(range(1, 8))
    slider.set_value(1).run()
    assert any(m.value.startswith("**Forward pass 1**") for m in app.markdown)
    assert {m.label: m.value for m in app.metric}["Forward passes"] == "1"
    assert app.session_state["spec_view"] == 0  # the record it shows


def test_run_to_the_end_compares_forward_passes(app):
    app.slider(key="spec_max_tokens").set_value(24).run()
    click(app, "spec_start")
    click(app, "spec_to_end")
    lesson = app.session_state["spec_run"]
    assert lesson.finished and not app.exception
    assert len(lesson.plain_records) == 24  # plain decoding: one token per pass
    assert len(lesson.records) < 24
    assert lesson.output(len(lesson.records)) == lesson.output(24, plain=True)
    assert f"{len(lesson.records)} forward passes with drafts against 24 without" in app.success[0].value
    # look back at a pass with a rollback: its caption names the slots the records hold
    rolled = next(r for r in lesson.draft_steps() if r.rolled_back_slots)
    app.slider(key="spec_view_step").set_value(rolled.number).run()
    caption = next(c.value for c in app.caption if "rolled back" in c.value)
    assert ", ".join(map(str, rolled.rolled_back_slots)) in caption
    assert lesson.engine.pool.num_free_blocks == lesson.engine.num_blocks  # rollbacks leaked nothing


def test_an_empty_prompt_is_refused_in_one_sentence(app):
    app.text_area(key="spec_prompt").set_value("   ").run()
    click(app, "spec_start")
    assert "The prompt is empty" in app.error[0].value
    assert "spec_run" not in app.session_state and not app.exception
