"""Issue 25 item 5: the Speculative lesson's engines hold what its request can use, and count against the
server's live lessons (KVVIZ_MAX_LESSONS) beside a Prefill and decode lesson."""

import time

import pytest
import torch

from kvviz.lessons.prefill_decode.logic import PrefillLesson, LessonSettings, lesson_sampling
from kvviz.lessons.speculative.logic import DEFAULT_PROMPT, SpeculativeLesson
from kvviz.models import LoadedModel
from kvviz.ui import live_lessons


@pytest.fixture(scope="module")
def million_positions(bundled):
    """A tiny random llama that claims a context of 1,048,576 positions."""
    from transformers import AutoModelForCausalLM

    from tiny_models import tiny_config

    torch.manual_seed(0)
    config = tiny_config("llama")
    config.vocab_size, config.max_position_embeddings = len(bundled.tokenizer), 2**20
    model = AutoModelForCausalLM.from_config(config).eval()
    return LoadedModel(model, bundled.tokenizer, torch.device("cpu"), torch.float32, "long", "custom", 2**20)


def test_the_speculative_engines_hold_the_request_not_the_whole_context(million_positions):
    """Both engines took 3.0 GiB each and 14 s to start on a model of a million positions."""
    started = time.perf_counter()
    lesson = SpeculativeLesson.start(million_positions, DEFAULT_PROMPT, 4, 48, 4)
    assert time.perf_counter() - started < 5
    most = len(lesson.prompt_token_ids) + 48 + 4 + 1  # prompt, tokens to generate, one pass's drafts, one more
    for engine in (lesson.engine, lesson.plain):
        assert engine.num_blocks == -(-most // 4)
    while lesson.step():
        pass
    assert lesson.finished and lesson.totals()["same_tokens"]
    assert len(lesson.output(len(lesson.records))) == 48


def test_a_speculative_lesson_counts_against_the_live_lessons(bundled, monkeypatch):
    monkeypatch.setattr(live_lessons, "_live", {})  # this test's own server
    monkeypatch.setenv("KVVIZ_MAX_LESSONS", "1")
    prefill = PrefillLesson.start(bundled, LessonSettings(prompt="ROMEO:", sampling=lesson_sampling(max_tokens=2)))
    assert live_lessons.admit(prefill) is None
    speculative = SpeculativeLesson.start(bundled, DEFAULT_PROMPT, 2, 8, 4)
    refusal = live_lessons.admit(speculative)  # the same session, another lesson with engines of its own
    assert refusal is not None and "running its limit of 1 live lessons" in refusal
    assert live_lessons.admit(prefill) is None  # a session's new lesson of the same kind replaces its old one
    monkeypatch.setenv("KVVIZ_MAX_LESSONS", "2")
    assert live_lessons.admit(speculative) is None
    speculative.release()
    assert speculative.released and speculative.engine is None and speculative.plain is None
    assert live_lessons.sweep() == 1  # a released lesson leaves the count
