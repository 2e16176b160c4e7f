"""Issue 35, item 2: a link's values are quoted as text. The Prefill and decode page's refusal quoted
the raw view, tokens, temperature and seed: ?view=![a](http://HOST/x) made every opener's browser
fetch that address, and a [text](address) value put a working link in the app's own error box."""

from streamlit.testing.v1 import AppTest

from conftest import ROOT

IMAGE, LINK = "![a](http://kvviz.invalid/x)", "[CLICK ME](http://kvviz.invalid/y)"


def test_link_values_in_the_refusal_are_text_not_markdown():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=240)
    at.query_params.update(prompt="ROMEO:", step="0", view=IMAGE, tokens=LINK, temperature=IMAGE, seed=LINK,
                           greedy="0")
    at.run()
    at.switch_page("lessons/prefill_decode.py").run()
    assert not at.exception
    message = " ".join(error.value for error in at.error)
    for name in ("view", "tokens", "temperature", "seed"):
        assert f"The link's {name} " in message
    assert "](" not in message and "![" not in message and "http://" not in message, message
    shown = message.replace("\\", "").replace("\u2060", "")  # as the reader sees it
    assert "view '![a](http://kvviz.invalid/x)'" in shown and "tokens '[CLICK ME](http://kv'" in shown
