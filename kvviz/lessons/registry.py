"""The lessons' session state, one object a lesson: a model change, Reset, rooms and the session-key checks
read it.

Each lesson folder exports one LessonState in its lesson.py (kvviz.lessons.lesson_state): the lesson's
page, the one prefix every session key of its page starts with, the keys each of its modules makes (a
`Keys`: what a model change clears, what outlives a visit to another page) and, for a lesson taken a step
at a time, its Stepped (new, step, export, read and its room part). Adding a lesson means a folder
kvviz/lessons/<key>/ with its lesson.py, a page script lessons/<key>.py, its line in
kvviz/lessons/catalog.py, its line below, and its tests (docs/design.md, "Adding a lesson"). This module
sits above the lessons and imports them; the lessons read the catalog, never this.
"""

from __future__ import annotations

from kvviz.lessons import room_view
from kvviz.lessons.batch_generation.lesson import LESSON as batch_generation
from kvviz.lessons.cache_strategies.lesson import LESSON as cache_strategies
from kvviz.lessons.lesson_state import LessonState
from kvviz.lessons.memory_bill.lesson import LESSON as memory_bill
from kvviz.lessons.model_lab.lesson import LESSON as model_lab
from kvviz.lessons.paged_batching.lesson import LESSON as paged_batching
from kvviz.lessons.prefill_decode.lesson import LESSON as prefill_decode
from kvviz.lessons.putting_it_together.lesson import LESSON as putting_it_together
from kvviz.lessons.sources.lesson import LESSON as sources
from kvviz.lessons.speculative.lesson import LESSON as speculative
from kvviz.lessons.stepped import Stepped
from kvviz.ui.session_keys import Keys

# in lecture order (kvviz.lessons.catalog.LECTURE, less the home page, whose one keeping is the app's: below)
LESSONS: tuple[LessonState, ...] = (prefill_decode, memory_bill, model_lab, paged_batching, batch_generation,
                                    cache_strategies, putting_it_together, speculative, sources)
STEPPED: tuple[Stepped, ...] = tuple(lesson.stepped for lesson in LESSONS if lesson.stepped is not None)
ROOMS = tuple(lesson for lesson in STEPPED if lesson.room is not None)  # the lessons a room can follow
ROOM_KEYS: Keys = room_view.KEYS  # the room a session follows or teaches, on any lesson's page
ROOM_PREFIX = "room_"  # every one of them starts with it
# keys of the app itself, which stay when another model loads: the model picker, presenter mode,
# whether each "Show the code" is open (kvviz.ui.common.code_key), the home page's lecture pack (its pages
# name the model they were recorded on) and the skip link (kvviz.ui.skip_link)
APP_PREFIXES = ("model_", "presenter", "show_code:", "home_", "skip_link")


def lesson_files(page: str):
    """(export, read) of the lesson files a room kept in Redis carries for `page`, or None (app.py serves it
    to kvviz.rooms.store)."""
    lesson = next((lesson for lesson in ROOMS if lesson.page == page), None)
    return (lesson.room_file, lesson.from_room_file) if lesson is not None else None


def kept_settings() -> list[str]:
    """The widget keys whose values outlive a visit to another page."""
    return [key for lesson in LESSONS for key in lesson.kept]


def reset_lessons(state) -> None:
    """Clear every lesson's run, and the room followed: another model was loaded, and a run belongs to the
    model it ran on."""
    for lesson in LESSONS:
        lesson.reset(state)
    ROOM_KEYS.reset(state)


def cleared(key: str) -> bool:
    """Whether loading another model clears `key`."""
    return any(lesson.cleared(key) for lesson in LESSONS) or ROOM_KEYS.cleared(key)


def owners(key: str) -> list[str]:
    """Who answers for `key` (a lesson's page, "room" or "app"): exactly one for every key a page makes."""
    names = [lesson.page for lesson in LESSONS if lesson.owns(key)]
    return names + ["room"] * key.startswith(ROOM_PREFIX) + ["app"] * key.startswith(APP_PREFIXES)
