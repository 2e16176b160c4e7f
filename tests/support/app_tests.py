"""What the tests share besides fixtures: the repository's root, the one-sentence rule every refusal keeps, and
how a test opens the real app in Streamlit's AppTest, clicks its buttons and reads what a page shows.

Fixtures are in tests/conftest.py (and a folder's own conftest.py); plain helpers are here, imported by name,
since a test module cannot import a conftest.py reliably (every folder's is a module named conftest)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def one_sentence(message: str) -> bool:
    return message.endswith(".") and ". " not in message


def open_lesson(path: str):
    """A fresh AppTest session of the real app, switched to the lesson at `path`."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.run()
    at.switch_page(path).run()
    assert not at.exception
    return at


def button(at, label):
    """The AppTest button with this label."""
    return next(b for b in at.button if b.label == label)


def click(at, label) -> None:
    """Click the button labelled `label` and run the page."""
    button(at, label).click().run()


def click_cleanly(at, label) -> None:
    """Click the button labelled `label`, run the page, and expect no exception."""
    button(at, label).click().run()
    assert not at.exception


def metric(at, label):
    """The st.metric labelled `label` (its value, delta and help)."""
    return next(m for m in at.metric if m.label == label)


def metric_value(at, label: str) -> str:
    """The value the st.metric labelled `label` shows."""
    return next(m.value for m in at.metric if m.label == label)


def shown(element) -> str:
    """An st.error's sentence as the reader sees it (the page escapes it for markdown)."""
    return element.value.replace("\\", "").replace("\u2060", "")


def page_view(at) -> dict:
    """What a page shows: every metric (value and delta) and every table, as plain data."""
    return {"metrics": {m.label: (m.value, m.delta) for m in at.metric},
            "tables": [t.value.to_dict() for t in at.table]}
