"""Issue 51 item 8: a traceback never reaches a browser. The app's own config (.streamlit/config.toml)
sets client.showErrorDetails to "none": Streamlit then sends a generic sentence for an error kvviz did not
foresee, never its message, type or traceback (which held the server's paths and code)."""

import tomllib

from streamlit import config
from streamlit.testing.v1 import AppTest

from app_tests import ROOT

FAILING = "raise RuntimeError('/srv/kvviz/secret_path.py line 12')"


def test_an_unforeseen_error_shows_no_message_or_traceback_with_the_apps_setting(monkeypatch):
    setting = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())["client"]["showErrorDetails"]
    before = config.get_option("client.showErrorDetails")
    config.set_option("client.showErrorDetails", setting)
    try:
        at = AppTest.from_string(FAILING).run()
    finally:
        config.set_option("client.showErrorDetails", before)
    shown = at.exception[0]
    assert "secret_path" not in shown.message and not shown.stack_trace
    assert "error" in shown.message.lower()  # a sentence still says something went wrong
    config.set_option("client.showErrorDetails", "full")  # the default, for contrast: it showed everything
    try:
        assert "secret_path" in AppTest.from_string(FAILING).run().exception[0].message
    finally:
        config.set_option("client.showErrorDetails", before)
