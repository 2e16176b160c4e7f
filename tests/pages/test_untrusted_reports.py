"""Issue 61 items 7 and 10: what a browser sends is checked where it enters. The stage's report of its step
({"step": -2} drew the second-last step with an error box; a 4,000-digit number, [1, 2] or NaN left every later
click failing), and the prompt box's length (a 20 MB prompt over the websocket was tokenized before any check:
24 CPU s, 2.9 GiB)."""

import time

import pytest

from kvviz.lessons.prefill_decode.state import MAX_PROMPT_CHARS
from kvviz.ui.stage import MOST_STEP, reported_step

from app_tests import one_sentence, open_lesson


@pytest.mark.parametrize("report", [{"step": -2}, {"step": int("9" * 4000)}, [1, 2], "abc", {"step": "3"},
                                    {"step": float("nan")}, {"step": float("inf")}, {"step": None}, {"step": True},
                                    {"step": 2.5}, None, {"step": MOST_STEP + 1}])
def test_a_stage_report_that_is_no_step_is_ignored(report):
    assert reported_step(report) is None


def test_a_stage_report_of_a_step_is_read():
    assert reported_step({"step": 3}) == 3 and reported_step({"step": 3.0}) == 3 and reported_step({"step": 0}) == 0


def test_a_prompt_past_the_limit_is_refused_before_it_is_tokenized(monkeypatch):
    from kvviz.lessons.prefill_decode import state

    at = open_lesson("lessons/prefill_decode.py")
    assert at.text_area(key="lesson_prompt").proto.max_chars == MAX_PROMPT_CHARS  # the browser's own limit
    # a script's websocket message is not held to it: the page checks the length before it tokenizes anything
    monkeypatch.setattr(state, "setting", lambda key: "a" * (20 * 2**20) if key == "lesson_prompt" else None)
    started = time.process_time()
    refusal = state.prompt_too_long()
    assert time.process_time() - started < 0.5
    assert refusal and one_sentence(refusal) and f"{MAX_PROMPT_CHARS:,}" in refusal
    monkeypatch.setattr(state, "setting", lambda key: "KING:" if key == "lesson_prompt" else None)
    assert state.prompt_too_long() is None
