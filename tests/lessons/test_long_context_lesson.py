"""Issue 49 item 2: a long prompt's lesson stays quick. The no-cache twin, which runs every token again at
each step, stops past TWIN_MOST_FLOPS (its work is then counted, not run), and a traced prefill keeps the
whole attention triangle only for short prompts; the lesson still exports and replays exactly."""

from dataclasses import replace

import pytest

from kvviz.engine.batch import TRIANGLE_MOST_TOKENS
from kvviz.lessons.budget import ModelCost
from kvviz.lessons.prefill_decode import logic
from kvviz.lessons.prefill_decode.file import export_lesson, import_lesson
from kvviz.lessons.prefill_decode.logic import PrefillLesson, LessonSettings, lesson_sampling, lesson_work


def long_lesson(bundled, prompt_tokens: int, max_tokens: int = 6) -> PrefillLesson:
    ids = [(17 * i) % 1000 + 3 for i in range(prompt_tokens)]  # token ids: exactly this many tokens
    lesson = PrefillLesson.start(bundled, LessonSettings(prompt=ids, sampling=lesson_sampling(max_tokens=max_tokens)))
    lesson.settings = replace(lesson.settings, prompt=bundled.tokenizer.decode(ids))  # as a page keeps it: text
    return lesson


def test_the_twin_stops_past_its_bound_and_the_work_is_still_counted(bundled, monkeypatch):
    cost = ModelCost.of(bundled.model)
    monkeypatch.setattr(logic, "TWIN_MOST_FLOPS", cost.forward(102, 0))  # the twin runs while the context <= 102
    lesson = long_lesson(bundled, 100)
    for _ in range(5):
        lesson.next_token()
    assert len(lesson.records) == 5 and len(lesson.twin_records) == 3 and lesson.twin is None
    rows = lesson.work()
    assert [r["without_cache_tokens"] for r in rows] == [100, 101, 102, 103, 104]  # run, run, run, counted...
    assert [r["with_cache_tokens"] for r in rows] == [100, 1, 1, 1, 1]
    assert [r["max_logit_difference"] is None for r in rows] == [False, False, False, True, True]
    assert "ran the first 3 steps" in lesson.twin_note()
    work = lesson_work(bundled, 100, 4)  # the click budget's estimate counts the twin's 3 steps, not 5
    assert work.steps == 5 + 3
    replay = import_lesson(export_lesson(lesson))
    while replay.next_token() is not None:  # a replay reveals its steps one at a time
        pass
    assert replay.work() == rows and len(replay.twin_records) == 3


def test_a_long_prefill_keeps_the_newest_row_not_the_triangle(bundled):
    short, long = long_lesson(bundled, TRIANGLE_MOST_TOKENS), long_lesson(bundled, TRIANGLE_MOST_TOKENS + 1)
    short.next_token(), long.next_token()
    assert short.traces[0].prompt_attention is not None
    assert long.traces[0].prompt_attention is None
    assert long.traces[0].attention.shape[-1] == TRIANGLE_MOST_TOKENS + 1  # the newest token's row, every key


@pytest.mark.parametrize("prompt_tokens", [30])
def test_a_short_lesson_on_the_bundled_model_keeps_its_twin(bundled, prompt_tokens):
    lesson = long_lesson(bundled, prompt_tokens)
    while lesson.next_token() is not None:
        pass
    assert len(lesson.twin_records) == len(lesson.records) and lesson.twin_note() is None
