"""The "Prefill and decode" page under Streamlit's AppTest: real app, real model, real engine."""

import numpy as np
import pytest

from conftest import open_lesson


@pytest.fixture()
def app():
    return open_lesson("lessons/prefill_decode.py")


def button(at, label):
    return next(b for b in at.button if b.label == label)


def test_prefill_then_three_decode_steps(app):
    button(app, "Prefill").click().run()
    lesson = app.session_state["lesson"]
    prompt_tokens = len(lesson.prompt_token_ids)
    for _ in range(3):
        button(app, "Next token").click().run()
    assert not app.exception
    assert len(lesson.records) == 4
    for step, record in enumerate(lesson.records):
        state = record.requests[0]
        assert state.num_computed_tokens == prompt_tokens + step  # the cache grows by one a step
        assert lesson.trace(step).keys.shape[1] == prompt_tokens + step
        assert len(state.block_table) == -(-state.num_computed_tokens // 16)
    assert any("Decode step 3" in m.value for m in app.success)
    # the work table: one token per decode step with the cache, all of them without
    work = lesson.work()
    assert [r["with_cache_tokens"] for r in work] == [prompt_tokens, 1, 1, 1]
    assert [r["without_cache_tokens"] for r in work] == [prompt_tokens + s for s in range(4)]
    assert max(r["max_logit_difference"] for r in work) < 1e-3


def test_step_slider_and_inspectors_redraw_from_records(app):
    button(app, "Prefill").click().run()
    for _ in range(2):
        button(app, "Next token").click().run()
    app.slider(key="lesson_view_step").set_value(0).run()
    assert not app.exception
    assert any("Prefill." in m.value for m in app.success)
    app.radio(key="lesson_view").set_value("Keys and values").run()
    app.selectbox(key="lesson_kv_layer").set_value(5).run()
    app.selectbox(key="lesson_kv_head").set_value(1).run()
    app.radio(key="lesson_view").set_value("Attention").run()
    app.selectbox(key="lesson_attention_layer").set_value(3).run()
    assert not app.exception
    lesson = app.session_state["lesson"]
    assert np.allclose(lesson.trace(2).attention.sum(-1), 1.0, atol=1e-4)


def test_memory_bill_matches_the_measured_bytes(app):
    button(app, "Prefill").click().run()
    button(app, "Next token").click().run()
    lesson = app.session_state["lesson"]
    app.radio(key="lesson_view").set_value("Memory bill").run()
    bill = lesson.bill(1, lesson.model_info["dtype_bytes"])
    assert bill["formula_bytes"] == bill["token_bytes"]  # formula == bytes holding tokens
    assert bill["token_bytes"] + bill["slack_bytes"] == bill["block_bytes"]
    metrics = {m.label: m.value for m in app.metric}
    assert "Formula" in metrics and metrics["Formula"] == metrics["Measured"]


def test_bad_prompts_show_one_sentence_and_keep_the_lesson(app):
    button(app, "Prefill").click().run()
    before = app.session_state["lesson"]
    app.text_area(key="lesson_prompt").set_value("   ").run()
    button(app, "Prefill").click().run()
    assert [e.value for e in app.error] == ["The prompt is empty; type some text to start from."]
    assert app.session_state["lesson"] is before
    app.text_area(key="lesson_prompt").set_value("word " * 600).run()
    button(app, "Prefill").click().run()
    assert "shorten the prompt" in app.error[0].value
    assert app.session_state["lesson"] is before and not app.exception


def test_play_runs_steps_until_paused(app):
    app.slider(key="lesson_max_tokens").set_value(3).run()
    button(app, "Prefill").click().run()
    button(app, "Play").click().run()
    assert app.session_state["lesson_playing"]
    lesson = app.session_state["lesson"]
    while not lesson.finished:
        button(app, "Next token").click().run()
    assert len(lesson.records) == 3 and not app.session_state["lesson_playing"]
