"""Issue 60: the lecture pack made from the app, as `kvviz page --lecture` makes it: the home page's Make the lecture
pack records the stepped lessons on the session's model (the bundled one here) and offers one zip of their pages
and an index; the clock stops it at one click's budget, which the next run says."""

import io
import zipfile
from pathlib import Path

from streamlit.testing.v1 import AppTest

from kvviz.lessons.files import MAX_LESSON_BYTES

ROOT = Path(__file__).resolve().parents[2]


def home() -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.run()
    assert not at.exception
    return at


def press(at: AppTest, label: str) -> None:
    next(b for b in at.button if b.label == label).click().run()
    assert not at.exception


def test_the_home_page_makes_the_lecture_pack_on_the_sessions_model():
    at = home()
    press(at, "Make the lecture pack")
    name, data = at.session_state["home_pack"]
    assert name == "kvviz-lecture.zip" and len(data) < MAX_LESSON_BYTES
    with zipfile.ZipFile(io.BytesIO(data)) as pack:
        files = {Path(info).name: pack.read(info).decode("utf-8") for info in pack.namelist()}
    assert set(files) == {"index.html", "kvviz-lesson.html", "kvviz-paged-batching.html", "kvviz-speculative.html"}
    index = files["index.html"]
    assert all(f'href="{page}"' in index for page in files if page != "index.html")
    for page, text in files.items():
        assert text.lstrip().lower().startswith("<!doctype html>"), page
        assert "default-src 'none'" in text, page  # the page asks for nothing outside itself
    assert "bundled" in index  # the model it was recorded on
    assert not at.error


def test_the_clock_stops_a_pack_past_the_budget_and_the_page_says_so(monkeypatch):
    monkeypatch.setenv("KVVIZ_CLICK_SECONDS", "0.1")  # the first lesson's recording is past it
    at = home()
    press(at, "Make the lecture pack")
    said = next(e.value for e in at.error)
    assert said.startswith("Stopped by the clock at ") and "no pack was made" in said, said
    assert "home_pack" not in at.session_state
