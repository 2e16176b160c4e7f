"""Issue 52: Prefill and decode on a model with sliding layers: the stage knows each layer's window (to grey the
positions a sliding layer gave back and say how many it holds), and the bill has a line per kind of layer,
its bytes measured from the engine's groups (which hold far less than every layer keeping every position)."""

import json

import pytest

from kvviz.lessons.files import LessonFileError
from kvviz.lessons.prefill_decode.file import export_lesson, import_lesson
from kvviz.lessons.prefill_decode.logic import PrefillLesson, LessonSettings, lesson_sampling
from kvviz.lessons.prefill_decode.stage import stage_data
from kvviz.models import TINY_GEMMA3, load_model


def test_the_stage_and_bill_of_a_sliding_model_past_its_window(bundled):
    lm = load_model(TINY_GEMMA3)
    window = lm.model.config.sliding_window
    prompt = " ".join(["the cache slides"] * (window * 2))
    lesson = PrefillLesson.start(lm, LessonSettings(prompt=prompt, sampling=lesson_sampling(max_tokens=3)))
    lesson.prefill()
    lesson.next_token()
    data = stage_data(lesson, 1)
    kinds = lm.model.config.layer_types
    assert data["windows"] == [window if kind == "sliding_attention" else None for kind in kinds]
    bill = data["steps"][1]["bill"]
    assert len(bill["formula"]) == 2 and "(window)" in bill["formula"][1]
    # the blocks held, split as the stage says them: the full layers' table (the one drawn) and the sliding layers'
    full, sliding = bill["group_blocks"]
    assert full + sliding == bill["blocks"] and full == len(data["steps"][1]["block_table"]) and sliding < full
    tokens = data["steps"][1]["num_tokens"]
    every_position = tokens * bill["bytes_per_token"]
    assert tokens > window and bill["token_bytes"] < every_position
    assert abs(bill["token_bytes"] - bill["formula_bytes"]) < every_position / 4  # the formula's split, measured

    plain = PrefillLesson.start(bundled, LessonSettings(prompt="ROMEO:", sampling=lesson_sampling(max_tokens=2)))
    plain.prefill()
    assert stage_data(plain, 0)["windows"] is None and stage_data(plain, 0)["steps"][0]["bill"]["formula"] == []


def test_a_file_keeps_the_sliding_layers_and_refuses_bad_ones():
    lm = load_model(TINY_GEMMA3)
    lesson = PrefillLesson.start(lm, LessonSettings(prompt="the cache " * 12, sampling=lesson_sampling(max_tokens=2)))
    lesson.prefill()
    lesson.next_token()
    text = export_lesson(lesson)
    replay = import_lesson(text.encode())
    assert stage_data(replay, 1)["windows"] == stage_data(lesson, 1)["windows"]
    assert replay.bill(1, 4) == lesson.bill(1, 4)
    for bad in ([{"x": 1}] * len(lm.model.config.layer_types), ["full_attention"], ["sliding_attention"] * 999):
        data = json.loads(text)
        data["model"]["layer_types"] = bad
        with pytest.raises(LessonFileError, match="model.layer_types"):
            import_lesson(json.dumps(data).encode())
