"""Issue 50 item 3: once SmolLM2 is fetched, the app opens on it (chat on, as it has a chat template) and the
sidebar names the bundled fallback; ?model=NAME alone loads that model on any page."""

import pytest
from streamlit.testing.v1 import AppTest

from kvviz.hub.fetch import fetched_folder

from app_tests import ROOT

needs_smollm2 = pytest.mark.skipif(fetched_folder("smollm2") is None,
                                   reason="SmolLM2 is not fetched here (scripts/test.sh runs kvviz fetch smollm2)")


@needs_smollm2
def test_a_new_session_opens_on_smollm2_once_fetched_with_chat_on(monkeypatch):
    monkeypatch.delenv("KVVIZ_DEFAULT_MODEL", raising=False)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.run()
    at.switch_page("lessons/prefill_decode.py").run()
    assert not at.exception and at.session_state["model_source"] == "smollm2"
    assert any(c.value.startswith("**smollm2**") for c in at.sidebar.caption)
    assert any("Offline fallback: **bundled**" in c.value for c in at.sidebar.caption)
    assert at.session_state["lesson_chat"] is True
    assert at.session_state["lesson_prompt"].startswith("In one sentence")  # a question, not Shakespeare


def test_the_operator_picks_the_default_and_a_link_picks_the_model_on_any_page(monkeypatch):
    monkeypatch.setenv("KVVIZ_DEFAULT_MODEL", "bundled")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params["model"] = "tiny-gemma3"
    at.run()
    at.switch_page("lessons/memory_bill.py").run()  # a page without a lesson link of its own
    assert not at.exception and at.session_state["model_source"] == "tiny-gemma3"
    refused = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    refused.query_params["model"] = "/etc"
    refused.run()
    assert refused.session_state["model_source"] == "bundled"
    assert "could not be loaded here" in refused.session_state["model_error"]
