"""The "Prefill and decode" page under Streamlit's AppTest: real app, real model, real engine."""

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from kvviz.engine.engine import Engine
from kvviz.lessons.prefill_decode.file import export_lesson, import_lesson
from kvviz.lessons.prefill_decode.logic import PrefillLesson, LessonSettings, lesson_sampling
from kvviz.lessons.prefill_decode.state import DEFAULTS
from kvviz.shapes import format_bytes
from kvviz.ui.common import code_key

from app_tests import button, open_lesson


@pytest.fixture()
def app():
    return open_lesson("lessons/prefill_decode.py")


def test_prefill_then_three_decode_steps(app):
    button(app, "Prefill").click().run()
    lesson = app.session_state["lesson_run"]
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
    assert not app.code  # "Show the code" is closed: its source is not drawn at every step
    app.session_state[code_key(Engine.step)] = True  # a learner opens it
    app.run()
    shown = "\n".join(code.value for code in app.code)  # the step is the loop, a call a stage
    assert all(call in shown for call in ("def step(", "self.scheduler.schedule()", "run_forward(", "self._sample(",
                                          "step_record(", "def _sample(", "sample(last_logits"))
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
    lesson = app.session_state["lesson_run"]
    assert np.allclose(lesson.trace(2).attention.sum(-1), 1.0, atol=1e-4)


def test_memory_bill_matches_the_measured_bytes(app):
    button(app, "Prefill").click().run()
    button(app, "Next token").click().run()
    lesson = app.session_state["lesson_run"]
    app.radio(key="lesson_view").set_value("Memory bill").run()
    bill = lesson.bill(1, lesson.model_info["dtype_bytes"])
    assert bill["formula_bytes"] == bill["token_bytes"]  # formula == bytes holding tokens
    assert bill["token_bytes"] + bill["slack_bytes"] == bill["block_bytes"]
    metrics = {m.label: m.value for m in app.metric}
    assert "Formula" in metrics and metrics["Formula"] == metrics["Measured"]
    assert metrics["Blocks in use"] == f"{bill['blocks']} blocks"  # a count; its bytes are the delta
    assert next(m for m in app.metric if m.label == "Blocks in use").delta == format_bytes(bill["block_bytes"])


def test_bad_prompts_show_one_sentence_and_keep_the_lesson(app):
    button(app, "Prefill").click().run()
    before = app.session_state["lesson_run"]
    app.text_area(key="lesson_prompt").set_value("   ").run()
    button(app, "Prefill").click().run()
    assert [e.value for e in app.error] == ["The prompt is empty; type some text to start from."]
    assert app.session_state["lesson_run"] is before
    app.text_area(key="lesson_prompt").set_value("word " * 600).run()
    button(app, "Prefill").click().run()
    assert "shorten the prompt" in app.error[0].value
    assert app.session_state["lesson_run"] is before and not app.exception


def test_play_runs_steps_until_paused(app):
    app.slider(key="lesson_max_tokens").set_value(3).run()
    button(app, "Prefill").click().run()
    button(app, "Play").click().run()
    assert app.session_state["lesson_playing"]
    lesson = app.session_state["lesson_run"]
    while not lesson.finished:
        button(app, "Next token").click().run()
    assert len(lesson.records) == 3 and not app.session_state["lesson_playing"]


def show_lesson(lesson, view: str):
    """A fresh page session showing `lesson` (live or replayed) at its last step, in `view`."""
    at = open_lesson("lessons/prefill_decode.py")
    at.session_state["lesson_run"] = lesson
    at.session_state["lesson_view"] = view
    at.session_state["lesson_view_step"] = len(lesson.records) - 1
    at.run()
    assert not at.exception
    return at


def test_the_finished_lesson_bills_what_its_last_step_held_live_and_replayed(bundled):
    """The default lesson to its end: the engine gave the request's blocks back in its last step, so that
    step's MemoryRecord holds nothing; the bill shows what the request held during the step."""
    lesson = PrefillLesson.start(bundled, LessonSettings(DEFAULTS["lesson_prompt"],  # the page's defaults: greedy, 48
                                                  lesson_sampling(max_tokens=DEFAULTS["lesson_max_tokens"])))
    lesson.prefill()
    while lesson.next_token() is not None:
        pass
    last = len(lesson.records) - 1
    assert last == 47 and lesson.records[last].memory.used_block_bytes == 0  # the pool took the blocks back
    end = lesson.bill(last, 4)
    assert end["formula_bytes"] == end["token_bytes"] > 0  # it read 0 bytes held after the step
    for step, record in enumerate(lesson.records):
        bill = lesson.bill(step, 4)
        assert bill["formula_bytes"] == bill["token_bytes"] == bill["tokens"] * record.memory.bytes_per_token > 0
        assert bill["blocks"] == -(-bill["tokens"] // 16)
        assert bill["token_bytes"] + bill["slack_bytes"] == bill["block_bytes"]
        if step < last:  # the request still holds its blocks: the engine's own count, to the byte
            assert not bill["returned"]
            assert (bill["token_bytes"], bill["block_bytes"], bill["slack_bytes"]) == (
                record.memory.token_bytes, record.memory.used_block_bytes, record.memory.slack_bytes)
    assert end["returned"] and end["tokens"] == len(lesson.prompt_token_ids) + 47 and end["blocks"] == 4
    replay = import_lesson(export_lesson(lesson))
    while replay.next_token() is not None:
        pass
    for shown in (lesson, replay):
        at = show_lesson(shown, "Memory bill")
        metrics = {m.label: m.value for m in at.metric}
        assert metrics["Formula"] == metrics["Measured"] == format_bytes(end["token_bytes"]) != "0 bytes"
        assert metrics["Blocks in use"] == "4 blocks"
        assert metrics["Last block's slack"] == format_bytes(end["slack_bytes"])
        caption = next(c.value for c in at.caption if "pool" in c.value)
        assert "agree" in caption and "4 blocks then went back to the pool" in caption
        done = at.success[0].value
        assert "Prefill + 47 decode steps" in done
    banner = next(c.value for c in at.caption if "Replaying" in c.value)  # the replay counts them the same way
    assert "prefill + 47 decode steps" in banner and "48" not in banner


def test_the_work_table_names_its_columns_and_writes_no_none_or_rounded_zero(bundled):
    lesson = PrefillLesson.start(bundled, LessonSettings(DEFAULTS["lesson_prompt"], lesson_sampling(max_tokens=6)))
    lesson.prefill()
    while lesson.next_token() is not None:
        pass
    at = show_lesson(lesson, "Work saved")
    table = at.dataframe[0].value
    differences = list(table["largest logit difference"])
    expected = [r["max_logit_difference"] for r in lesson.work()]
    assert differences == ["0 (identical)" if d == 0 else f"{d:.1e}" for d in expected]
    assert all(d != 0 for d in expected[1:]) and not any(text.startswith("0.0") for text in differences)
    assert "None" not in table.to_string() and "with_cache_tokens" not in table.columns


def test_an_unanswered_prediction_is_revealed_as_unanswered_and_not_scored(app):
    button(app, "Prefill").click().run()
    app.selectbox(key="lesson_question_kind").set_value("blocks_after_next").run()
    app.button(key="lesson_ask").click().run()
    button(app, "Next token").click().run()  # no guess typed
    assert not app.exception
    shown = " ".join(m.value for m in app.markdown)
    assert "No answer was given" in shown and "not scored" in shown and "You said" not in shown
    assert "score 0 / 0" in shown


def test_a_views_layer_and_head_survive_a_visit_to_another_view():
    at = open_lesson("lessons/prefill_decode.py")
    next(b for b in at.button if b.label == "Prefill").click().run()
    at.radio(key="lesson_view").set_value("Keys and values").run()
    at.selectbox(key="lesson_kv_layer").set_value(3).run()
    at.selectbox(key="lesson_kv_head").set_value(1).run()
    at.radio(key="lesson_view").set_value("Attention").run()
    at.selectbox(key="lesson_attention_layer").set_value(2).run()
    at.radio(key="lesson_view").set_value("Keys and values").run()
    assert at.selectbox(key="lesson_kv_layer").value == 3 and at.selectbox(key="lesson_kv_head").value == 1
    at.radio(key="lesson_view").set_value("Attention").run()
    assert at.selectbox(key="lesson_attention_layer").value == 2


def a_step_landed_since_the_page_counted():
    """The page counted 16 steps; the view is at step 17, which a stopped run's step finishing between the
    count and the slider put there (the full suite's shared server once logged the exception this made)."""
    import streamlit as st

    from kvviz.lessons import stepped
    from kvviz.lessons.prefill_decode.lesson import LESSON

    st.session_state[LESSON.stepped.keys.view] = 17
    stepped.look_back(LESSON.stepped, 17, 16, "Look back at step (0 = prefill)", help="")


def test_the_look_back_slider_reaches_a_step_that_landed_after_the_count():
    at = AppTest.from_function(a_step_landed_since_the_page_counted, default_timeout=60).run()
    assert not at.exception, at.exception  # was: StreamlitValueAboveMaxError, 17 is greater than 16
    slider = at.slider(key=stepped_view_key())
    assert slider.value == 17 and slider.max == 17


def stepped_view_key() -> str:
    from kvviz.lessons.prefill_decode.lesson import LESSON
    return LESSON.stepped.keys.view
