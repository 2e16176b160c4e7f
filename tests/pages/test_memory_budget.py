"""Issue 61 item 2: links cycling through five models loaded a model again for every lesson that held an evicted
one (15 GiB after 15 tabs). Each model is now held once per process (kvviz.ui.common), and a model load or a
lesson that would take the process past the server's memory budget (kvviz.ui.memory_budget, KVVIZ_MEMORY_GIB) is
refused in a sentence, the session keeping what it had."""

import pytest

from kvviz.models import ModelLoadError
from kvviz.ui import common, memory_budget

from app_tests import button, one_sentence, open_lesson


def test_a_model_streamlits_cache_let_go_is_not_loaded_twice_while_a_lesson_holds_it():
    from kvviz.engine.engine import Engine

    engine = Engine(common.shared_model("bundled"), num_blocks=4)  # a lesson's engine holds the module
    common._loaded.clear()  # Streamlit's cache evicts the model (it keeps MODELS_KEPT), as three others would
    assert common.shared_model("bundled").model is engine.model  # that copy, not a second one


def test_a_model_load_past_the_budget_is_refused_in_a_sentence(monkeypatch):
    used = memory_budget.resident_bytes()
    monkeypatch.setenv(memory_budget.BUDGET_VARIABLE, str((used + 2**20) / memory_budget.GiB))  # a MiB of headroom
    folder = memory_budget.BUNDLED_DIR  # a folder of weights, loaded by its path: 10 MB past the MiB of headroom
    assert memory_budget.model_bytes(str(folder)) > 4 * 2**20
    with pytest.raises(ModelLoadError) as refused:
        memory_budget.check_model_load(str(folder))
    assert one_sentence(str(refused.value)) and "KVVIZ_MEMORY_GIB" in str(refused.value)
    memory_budget.check_model_load("bundled")  # the fallback always loads
    monkeypatch.setenv(memory_budget.BUDGET_VARIABLE, str(used / memory_budget.GiB + 4))
    memory_budget.check_model_load(str(folder))  # room enough: no sentence


def test_a_lesson_past_the_budget_is_refused_and_the_session_keeps_its_state(monkeypatch):
    at = open_lesson("lessons/prefill_decode.py")
    monkeypatch.setenv(memory_budget.BUDGET_VARIABLE, str(memory_budget.resident_bytes() / memory_budget.GiB / 2))
    button(at, "Prefill").click().run()
    assert not at.exception
    assert at.session_state["lesson_run"] is None if "lesson_run" in at.session_state else True
    errors = [e.value for e in at.error]
    assert any("memory budget" in e and one_sentence(e) for e in errors), errors
    monkeypatch.delenv(memory_budget.BUDGET_VARIABLE)
    button(at, "Prefill").click().run()
    assert at.session_state["lesson_run"] is not None and not at.error
