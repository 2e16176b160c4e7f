from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def bundled():
    from kvviz import load_model

    return load_model("bundled")


def open_lesson(path: str):
    """A fresh AppTest session of the real app, switched to the lesson at `path`."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.run()
    at.switch_page(path).run()
    assert not at.exception
    return at
