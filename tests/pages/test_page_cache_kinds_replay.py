"""Issue 26's cache kinds export and replay like the rest: the built-in tiny-mla (latent rows) and
tiny-gemma3 (a sliding layer group) on the Prefill and decode page and the Paged page; the replayed
page (no engine) shows the same metrics, tables, captions and charts as the live one, step by step.
An 8-bit cache cannot be picked on these pages; its records keep the dtype and the scales' bytes."""

import json

import numpy as np
import pytest

from kvviz import Engine, SamplingParams
from kvviz.engine.cache_dtype import measured_bytes_per_token
from kvviz.engine.records import StepRecord
from kvviz.lessons.files import typed
from kvviz.lessons.paged_batching.file import export_paged, import_paged
from kvviz.lessons.prefill_decode.explain import project_newest_token
from kvviz.lessons.prefill_decode.file import export_lesson, import_lesson
from kvviz.lessons.prefill_decode.logic import PrefillLesson, LessonSettings, lesson_sampling
from kvviz.lessons.prefill_decode.state import VIEWS
from kvviz.models import TINY_GEMMA3, TINY_MLA, load_model

from app_tests import button, open_lesson, page_view


def screen(at) -> dict:
    """Every number and figure the page shows: metrics, tables, captions and charts (left out: the sidebar,
    which names the loaded model, and the live run's lines on what can run next and on opening a room)."""
    live_only = ("Replaying", "press **Start**", "Students who open")
    return {**page_view(at),
            "captions": [c.value for c in at.main.caption if not any(s in c.value for s in live_only)],
            "charts": [json.loads(chart.proto.spec)["data"] for chart in at.get("plotly_chart")]}


@pytest.mark.parametrize("source", [TINY_MLA, TINY_GEMMA3])
def test_the_paged_page_replays_a_tiny_model_with_the_same_numbers(source):
    live = open_lesson("lessons/paged_batching.py")
    live.text_input(key="model_request").set_value(source)
    button(live, "Load model").click().run()
    button(live, "Start").click().run()
    button(live, "Run to the end").click().run()
    assert not live.exception and live.session_state["model_source"] == source
    lesson = live.session_state["paged_run"]
    last = len(lesson.records) - 1
    groups = [g.name for g in lesson.records[0].layer_groups]
    assert groups == (["full", "sliding"] if source == TINY_GEMMA3 else [])
    replay, _ = import_paged(export_paged(lesson, last).encode())
    played = open_lesson("lessons/paged_batching.py")
    played.session_state["paged_run"] = replay
    played.session_state["paged_view_step"] = last
    played.run()
    assert not played.exception and "Replaying a recorded run" in played.info[0].value
    for step in sorted({1, last // 2, last}):
        live.slider(key="paged_view_step").set_value(step).run()
        played.slider(key="paged_view_step").set_value(step).run()
        shown, replayed = screen(live), screen(played)
        assert shown["metrics"] and shown["charts"]
        assert replayed == shown, (source, step)


@pytest.mark.parametrize("source", [TINY_MLA, TINY_GEMMA3])
def test_the_prefill_page_replays_a_tiny_model_with_the_same_numbers(source):
    lm = load_model(source)
    settings = LessonSettings(prompt="ROMEO:\nBut soft, what light through yonder window breaks? It is the east",
                              sampling=lesson_sampling(max_tokens=6), block_size=4)
    lesson = PrefillLesson.start(lm, settings)
    while lesson.next_token() is not None:
        pass
    replay = import_lesson(export_lesson(lesson).encode())
    while replay.next_token() is not None:
        pass
    views = []
    for shown in (lesson, replay):
        screens = {}
        for view in VIEWS:
            at = open_lesson("lessons/prefill_decode.py")
            at.session_state["lesson_run"] = shown
            at.session_state["lesson_view"] = view
            at.session_state["lesson_view_step"] = len(shown.records) - 1
            at.run()
            assert not at.exception, view
            screens[view] = screen(at)
        views.append(screens)
    del views[0]["Inside attention"], views[1]["Inside attention"]  # its first part recomputes from the weights
    assert views[1] == views[0]
    if source == TINY_MLA:  # the latent rows are drawn, and come back from the file
        assert any("Latent + RoPE key" in json.dumps(chart) for screens in views for s in screens.values()
                   for chart in s["charts"])


def test_inside_attention_recomputes_tiny_gemma3s_cached_keys_in_both_layer_kinds():
    """Gemma-3 rotates sliding and full layers differently (a rotary embedding per layer type): the view's
    recomputed K and V for the newest token are the rows the engine cached, in every layer."""
    lm = load_model(TINY_GEMMA3)
    lesson = PrefillLesson.start(lm, LessonSettings(prompt="ROMEO:\nBut soft", sampling=lesson_sampling(max_tokens=3),
                                             block_size=4))
    while lesson.next_token() is not None:
        pass
    trace = lesson.trace(2)
    token_ids = (lesson.prompt_token_ids + [t for r in lesson.records for _, t in r.sampled])[:trace.keys.shape[1]]
    for layer in range(lm.shape.num_layers):  # five sliding layers, then a full one
        projection = project_newest_token(lm.model, token_ids, layer)
        np.testing.assert_allclose(projection.k, trace.keys[layer, -1], atol=1e-4)
        np.testing.assert_allclose(projection.v, trace.values[layer, -1], atol=1e-4)


def test_an_8bit_records_dtype_and_scale_bytes_survive_the_file_check(bundled):
    engine = Engine(bundled, kv_cache_dtype="int8", block_size=4)
    engine.add_request("ROMEO:", SamplingParams(max_tokens=3), trace=True)
    records = []
    while engine.has_unfinished():
        records.append(engine.step())
    assert records[0].memory.kv_cache_dtype == "int8"
    assert records[0].memory.bytes_per_token == measured_bytes_per_token(bundled.shape, "int8") == 864
    for record in records:
        data = json.loads(json.dumps({**record.to_dict(), "trace": None}))
        again = typed(data, StepRecord, "record")  # as a lesson file's records are read
        assert again.memory == record.memory
