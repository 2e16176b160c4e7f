"""A lesson page of the tests' own (PAGE) whose lesson is a FileLesson, and a room opened on it in a store: what
tests/rooms/ keep in Redis and read back."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from kvviz.rooms.types import CODE_LETTERS, Room
from kvviz.ui import rooms
from kvviz.rooms.redis_store import RedisStore

PAGE = "store_test"  # a lesson page of this test's own, with the lesson file below


@dataclass
class FileLesson:
    """A lesson as a room reads it: records, and a file it is written to and rebuilt from."""

    records: list = field(default_factory=list)
    released: bool = False


def lesson_files(page: str):
    """The test page's lesson file: its records as JSON (the app serves kvviz.lessons.lecture.lesson_files)."""
    if page != PAGE:
        return None
    return (lambda lesson: json.dumps({"records": lesson.records}),
            lambda text: FileLesson(json.loads(text)["records"]))


def opened(store: RedisStore, lesson, teacher: str = "teacher", client: str | None = None) -> Room:
    code = "K7QW2MXP"
    room = Room(code, teacher, None, PAGE, lesson, client=client)
    while store.add(room, 10, 10) == ("taken", 0):
        room.code = "".join(ch for ch in rooms.new_seat().upper() if ch in CODE_LETTERS)[:8]
    return room
