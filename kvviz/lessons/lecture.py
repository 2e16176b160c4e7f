"""The lecture: every lesson in order, one line each, and what follows from the list.

Each lesson folder says once what it is, in its lesson.py's LESSON (a kvviz.lessons.lesson.Lesson: page, title,
icon, line, minutes, key prefix, its modules' keys and, when stepped, its run). Navigation, the home page, the
Previous / Next links, a model change, Reset, rooms, the lesson-file checks and the session-key checks read
LECTURE; which lessons are stepped, replay files and open rooms follows from what each implements. Adding a
lesson is a folder kvviz/lessons/<key>/ with its lesson.py, a page script lessons/<key>.py, and its line
below (docs/design.md, "Adding a lesson"). This module sits above the lessons and imports them; the few parts
of the lessons that name another lesson (a file's refusal, a room link to another page) read it once it is
whole, inside a function.
"""

from __future__ import annotations

from kvviz.lessons import lecture_index, room_view
from kvviz.lessons.batch_generation.lesson import LESSON as batch_generation
from kvviz.lessons.cache_strategies.lesson import LESSON as cache_strategies
from kvviz.lessons.lesson import Lesson
from kvviz.lessons.memory_bill.lesson import LESSON as memory_bill
from kvviz.lessons.model_lab.lesson import LESSON as model_lab
from kvviz.lessons.paged_batching.lesson import LESSON as paged_batching
from kvviz.lessons.prefill_decode.lesson import LESSON as prefill_decode
from kvviz.lessons.putting_it_together.lesson import LESSON as putting_it_together
from kvviz.lessons.sources.lesson import LESSON as sources
from kvviz.lessons.speculative.lesson import LESSON as speculative
from kvviz.lessons.stepped import Stepped
from kvviz.ui.session_keys import Keys

# the home page has no folder: its page keeps only its lecture pack (its pages name the model they were recorded on)
HOME = Lesson("home", "What kvviz teaches", ":material/school:",
              "The idea in one paragraph and the path through the lessons.", 2, prefix="home_")

# The article's arc first (prefill and decode, the bill, paging, strategies, putting it together), each
# lesson after the ones whose words it uses; Speculative decoding goes beyond the article, and the
# sources close the list. A word used before its lesson links forward (navigation.taught_later).
LECTURE: tuple[Lesson, ...] = (HOME, prefill_decode, memory_bill, model_lab, paged_batching, batch_generation,
                               cache_strategies, putting_it_together, speculative, sources)
ROOM_KEYS: Keys = room_view.KEYS  # the room a session follows or teaches, on any lesson's page
ROOM_PREFIX = "room_"  # every one of them starts with it
# keys of the app itself, which stay when another model loads: the model picker, presenter mode,
# whether each "Show the code" is open (kvviz.ui.common.code_key) and the skip link (kvviz.ui.skip_link)
APP_PREFIXES = ("model_", "presenter", "show_code:", "skip_link")


def by_key(key: str) -> Lesson | None:
    """The lesson whose page, folder and files' `lesson` field is `key` (None if none is)."""
    return next((lesson for lesson in LECTURE if lesson.key == key), None)


lecture_index.serve(by_key)  # for the lesson-file checks and a student's room page, which sit below the lecture


def stepped() -> tuple[Stepped, ...]:
    """The runs of the lessons taken a step at a time, in lecture order."""
    return tuple(lesson.stepped for lesson in LECTURE if lesson.stepped is not None)


def rooms() -> tuple[Stepped, ...]:
    """The runs a room can follow, in lecture order."""
    return tuple(lesson.stepped for lesson in LECTURE if lesson.rooms)


def index_of(title: str) -> int | None:
    """Index in LECTURE of the page with this title (None if it is not a lesson)."""
    return next((i for i, lesson in enumerate(LECTURE) if lesson.title == title), None)


def neighbours(title: str) -> tuple[Lesson | None, Lesson | None]:
    """The lessons before and after the page called `title` (None at either end, or off the list)."""
    index = index_of(title)
    if index is None:
        return None, None
    return (LECTURE[index - 1] if index > 0 else None), (LECTURE[index + 1] if index + 1 < len(LECTURE) else None)


def lesson_files(page: str):
    """(export, read) of the lesson files a room kept in Redis carries for `page`, or None (app.py serves it
    to kvviz.rooms.store)."""
    lesson = next((lesson for lesson in rooms() if lesson.page == page), None)
    return (lesson.room_file, lesson.from_room_file) if lesson is not None else None


def kept_settings() -> list[str]:
    """The widget keys whose values outlive a visit to another page."""
    return [key for lesson in LECTURE for key in lesson.kept]


def reset_lessons(state) -> None:
    """Clear every lesson's run, and the room followed: another model was loaded, and a run belongs to the
    model it ran on."""
    for lesson in LECTURE:
        lesson.reset(state)
    ROOM_KEYS.reset(state)


def cleared(key: str) -> bool:
    """Whether loading another model clears `key`."""
    return any(lesson.cleared(key) for lesson in LECTURE) or ROOM_KEYS.cleared(key)


def owners(key: str) -> list[str]:
    """Who answers for `key` (a lesson's page, "room" or "app"): exactly one for every key a page makes."""
    names = [lesson.key for lesson in LECTURE if lesson.owns(key)]
    return names + ["room"] * key.startswith(ROOM_PREFIX) + ["app"] * key.startswith(APP_PREFIXES)
