"""The lecture's lessons by key, for the modules below the lecture that must name another lesson: the lesson-file
checks (a file of another lesson is sent to its page) and a student's room page (a room on another lesson's page).

kvviz.lessons.lecture imports every lesson, and through them those modules, so they cannot import it; once it has
listed the lessons, it serves its own `by_key` here (as app.py serves the web-page builder to kvviz.lessons.stepped),
and no import runs from them back up to it.
"""

from __future__ import annotations

from collections.abc import Callable

_find: Callable | None = None  # kvviz.lessons.lecture.by_key, once the lecture is imported


def serve(find: Callable) -> None:
    """kvviz.lessons.lecture hands over its by_key (a key -> its Lesson, or None)."""
    global _find
    _find = find


def by_key(key: str):
    """The lesson (kvviz.lessons.lesson.Lesson) whose key is `key`, or None; None also before the lecture is
    imported, when no lesson is listed yet."""
    return _find(key) if _find is not None else None
