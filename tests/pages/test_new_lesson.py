"""Adding a lesson is a folder's one declaration, a page script and one line in the lecture (docs/design.md,
"Adding a lesson"): a throwaway stepped lesson added that way shows in the sidebar, the home page, Previous / Next,
the key owners, a model change, Reset, rooms and the lesson-file checks, with nothing else to touch."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from kvviz.lessons import lecture, stepped
from kvviz.lessons.files import LESSON_FORMAT, LessonFileError, read_lesson_file
from kvviz.lessons.lesson import Lesson
from kvviz.lessons.room_view import InRoom
from kvviz.ui.session_keys import Keys

from app_tests import ROOT, click_cleanly

PAGE = '''import streamlit as st

from kvviz.lessons import lecture, stepped

STEPS = lecture.by_key("throwaway").stepped
room = stepped.open_page(STEPS)
run = stepped.current(STEPS)
stepped.header("A throwaway lesson", run)
stepped.toolbar(STEPS, run, room, lambda: None, "Settings", run is not None and not STEPS.done(run), "Start again")
stepped.error(STEPS)
if run is not None:
    st.metric("Steps taken", len(run.records))
'''


@dataclass
class Count:
    """The throwaway's run: it counts to three."""

    records: list = field(default_factory=list)
    replay: bool = False


class CountSteps(stepped.Stepped, InRoom):
    keys = stepped.StepKeys("throw_", view="throw_view")
    page, file_name = "throwaway", "kvviz-throwaway.json"

    def new(self) -> Count:
        return Count()

    def step(self, run: Count) -> bool:
        if self.done(run):
            return False
        run.records.append(len(run.records))
        return True

    def done(self, run: Count) -> bool:
        return len(run.records) >= 3

    def export(self, run: Count, step: int) -> str:
        return json.dumps({"format": LESSON_FORMAT, "lesson": self.page, "records": run.records})

    def read_file(self, data: bytes) -> tuple[Count, int]:
        return Count(list(read_lesson_file(data, self.page)["records"]), replay=True), 0

    def follower(self, run: Count, step: int) -> Count:
        return Count(run.records[:step + 1], replay=True)

    def take_over(self, run: Count, step: int, slot, started) -> None:
        stepped.start(self)

    def stage_data(self, run: Count, step: int, presenter: bool) -> dict:
        return {}


STEPS = CountSteps()
THROWAWAY = Lesson("throwaway", "A throwaway lesson", ":material/delete:", "Counts to three and is gone.", 1,
                   prefix="throw_", parts=(Keys(clears=STEPS.cleared_keys()),), stepped=STEPS)


@pytest.fixture
def added(monkeypatch, tmp_path):
    """The throwaway's one line in the lecture, before the sources, and its page script beside the real ones, in an
    app folder of its own (the repository's lessons/ stays as it is)."""
    monkeypatch.setattr(lecture, "LECTURE", (*lecture.LECTURE[:-1], THROWAWAY, lecture.LECTURE[-1]))
    (tmp_path / "app.py").symlink_to(ROOT / "app.py")
    (tmp_path / "kvviz").symlink_to(ROOT / "kvviz")
    (tmp_path / "lessons").mkdir()
    for page in (ROOT / "lessons").glob("*.py"):
        (tmp_path / "lessons" / page.name).symlink_to(page)
    (tmp_path / "lessons" / "throwaway.py").write_text(PAGE)
    return tmp_path


def test_the_lecture_finds_what_the_new_lesson_implements(added):
    assert lecture.by_key("throwaway") is THROWAWAY and THROWAWAY.replays and THROWAWAY.rooms
    assert STEPS in lecture.stepped() and STEPS in lecture.rooms()
    assert lecture.lesson_files("throwaway") == (STEPS.room_file, STEPS.from_room_file)
    assert lecture.owners("throw_run") == ["throwaway"] and lecture.cleared("throw_run")
    assert "throw_view" in lecture.kept_settings()
    session = {"throw_run": Count(), "throw_view": 2, "spec_k": 4}
    lecture.reset_lessons(session)  # another model loaded
    assert session == {"spec_k": 4}
    with pytest.raises(LessonFileError, match="“A throwaway lesson” lesson; replay it on that page"):
        read_lesson_file(STEPS.export(Count([0]), 0), "speculative")
    replay = STEPS.from_room_file(STEPS.room_file(Count([0, 1])))
    assert replay.replay and replay.records == [0, 1]


def test_the_new_lesson_has_its_page_its_place_and_its_keys(added):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(added / "app.py"), default_timeout=180)
    at.run()
    assert not at.exception
    assert any("**A throwaway lesson** (about 1 min): Counts to three and is gone." in m.value
               for m in at.markdown)  # the home page's list
    at.switch_page("lessons/throwaway.py").run()
    assert not at.exception
    assert at.title[0].value == "A throwaway lesson"
    assert f"Lesson {len(lecture.LECTURE) - 2} of {len(lecture.LECTURE) - 1}" in [c.value for c in at.caption]
    click_cleanly(at, "Start")
    click_cleanly(at, "Step")
    assert at.metric[0].value == "2" and at.session_state["throw_run"].records == [0, 1]
    assert all(len(lecture.owners(key)) == 1 for key in at.session_state.keys())
    click_cleanly(at, "Reset")
    assert "throw_run" not in at.session_state
