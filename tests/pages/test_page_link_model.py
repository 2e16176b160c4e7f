"""A Prefill and decode link names its model (?model=...): opened elsewhere, the lesson runs on that
model, or says in one sentence why it cannot and which model it runs on instead."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from app_tests import ROOT


def open_link(params: dict) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=240)
    at.query_params.update(params)
    at.run()
    at.switch_page("lessons/prefill_decode.py").run()
    return at


def test_a_link_reopens_its_lesson_on_the_model_it_names():
    at = open_link({"model": "tiny-mla", "prompt": "ROMEO:", "tokens": "6", "step": "2"})
    assert not at.exception and not at.error
    assert at.session_state["model_source"] == "tiny-mla"
    lesson = at.session_state["lesson_run"]
    assert lesson.model_info["name"].startswith("tiny") and lesson.model_info.get("kv_lora_rank")
    assert at.session_state["lesson_view_step"] == 2
    assert dict(at.query_params)["model"] == "tiny-mla"  # the page writes back what it ran


def test_a_link_to_a_model_this_server_cannot_load_says_so_and_runs_on_its_own():
    at = open_link({"model": "no-such-folder/xyz", "prompt": "ROMEO:", "tokens": "6", "step": "1"})
    assert not at.exception
    message = at.error[0].value
    assert "The link's model could not be loaded here" in message and "runs on bundled instead" in message
    assert at.session_state.get("model_source", "bundled") == "bundled"
    assert at.session_state["lesson_run"].model_info["name"] != "tiny-mla"
    assert at.session_state["lesson_view_step"] == 1  # the rest of the link still opens
