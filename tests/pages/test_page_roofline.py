"""Prefill and decode, "Why decode is memory-bound", under AppTest: the roofline's words defined, an
untied embedding left out of the bytes read, and what-ifs that cannot run said to be so."""

import pytest

from kvviz.lessons.prefill_decode import roofline

from kvviz.shapes import PRESETS, format_bytes

from app_tests import metric_value, open_lesson


@pytest.fixture(scope="module")
def bound():
    at = open_lesson("lessons/prefill_decode.py")
    next(b for b in at.button if b.label == "Prefill").click().run()
    at.radio(key="lesson_view").set_value("Why decode is memory-bound").run()
    assert not at.exception
    return at


def test_the_three_words_are_on_screen(bound):
    text = "\n".join(m.value for m in bound.markdown)
    for term, definition in roofline.DEFINITIONS:
        assert f"**{term}**: {definition}" in text


def test_llama_reads_its_matrices_not_its_input_embedding(bound):
    bound.selectbox(key="lesson_roofline_model").set_value("llama-3.1-8b").run()
    bound.selectbox(key="lesson_roofline_context").set_value(8192).run()
    assert not bound.warning  # fits an H100, within the model's context
    # (8,030,261,248 - 525,336,576) × 2 bytes of weights + 1 GiB of cache
    assert metric_value(bound, "Bytes read") == format_bytes(15_009_849_344 + 2**30)
    assert "525,336,576 of the input embedding are looked up" in " ".join(m.value for m in bound.markdown)


def test_what_ifs_past_memory_or_context_say_so(bound):
    bound.selectbox(key="lesson_roofline_model").set_value("llama-3.1-70b").run()
    bound.select_slider(key="lesson_roofline_batch").set_value(256).run()
    bound.selectbox(key="lesson_roofline_context").set_value(131072).run()
    assert len(bound.warning) == 1 and "10.13 TiB in memory" in bound.warning[0].value.replace("\\", "")
    assert metric_value(bound, "Ceiling (tokens/s)") == "does not fit"
    bound.selectbox(key="lesson_roofline_model").set_value("gpt2").run()
    bound.select_slider(key="lesson_roofline_batch").set_value(1).run()
    bound.selectbox(key="lesson_roofline_context").set_value(32768).run()
    assert [w.value.replace("\\", "") for w in bound.warning] == [(  # shown as plain text: markdown escaped
        "gpt2 was built for 1,024 tokens and cannot attend to 32,768, so these figures describe a step it "
        "could never run.")]
    assert PRESETS["gpt2"].max_context == 1024
