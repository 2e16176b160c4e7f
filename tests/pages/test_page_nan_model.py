"""Issue 25 item 15 on the page: a folder model whose weights hold a NaN. The engine stops the request
with reason "error" and a sentence (tests/engine/test_validation.py); each engine-driven page
must show that sentence, not a traceback, and keep no half-made lesson (Prefill and decode greedy and
sampled, Paged cache and batching, Speculative decoding)."""

import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM

from kvviz.models import BUNDLED_DIR

from app_tests import button, open_lesson
from tiny_models import tiny_config


@pytest.fixture(scope="module")
def nan_folder(tmp_path_factory):
    """A tiny random llama that reads the bundled tokenizer, with one NaN in its first MLP."""
    torch.manual_seed(0)
    config = tiny_config("llama")
    config.vocab_size = 4096  # the bundled tokenizer's ids
    model = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight[0, 0] = float("nan")
    folder = tmp_path_factory.mktemp("nan-model")
    model.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(BUNDLED_DIR / name, folder / name)
    return folder


@pytest.mark.parametrize("greedy", [True, False], ids=["greedy", "sampled"])
def test_a_model_with_nan_weights_gets_a_sentence_on_prefill(nan_folder, monkeypatch, greedy):
    monkeypatch.setenv("KVVIZ_MODELS", "bundled,folders")
    at = open_lesson("lessons/prefill_decode.py")
    at.text_input(key="model_request").set_value(str(nan_folder))
    button(at, "Load model").click().run()
    assert not at.exception and at.session_state["model_source"] == str(nan_folder.resolve())
    if not greedy:
        at.toggle(key="lesson_greedy").set_value(False).run()
    button(at, "Prefill").click().run()
    assert not at.exception, at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "are NaN" in errors[0], errors
    assert "lesson_run" not in at.session_state  # no half-made lesson to step on
    button(at, "Prefill").click().run()  # pressed again: the same sentence, still no traceback
    assert not at.exception and [e.value for e in at.error] == errors


@pytest.mark.parametrize("path, start, key", [("lessons/paged_batching.py", "Start", "paged_run"),
                                              ("lessons/speculative.py", "Start", "spec_run")])
def test_the_paged_and_speculative_pages_say_so_too(nan_folder, monkeypatch, path, start, key):
    monkeypatch.setenv("KVVIZ_MODELS", "bundled,folders")
    at = open_lesson(path)
    at.text_input(key="model_request").set_value(str(nan_folder))
    button(at, "Load model").click().run()
    assert not at.exception
    button(at, start).click().run()
    assert not at.exception, at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "are NaN" in errors[0], errors
    assert key not in at.session_state
