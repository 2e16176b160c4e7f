"""What a room is: its data, its bounds, the checks on what a student's link carries, and RoomStore, the
interface of the stores that keep rooms (kvviz.rooms.store in this process, kvviz.rooms.redis_store in a Redis
server shared by several processes). Those stores, kvviz.ui.rooms and the lessons' room parts read these names
from here.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

CODE_LETTERS = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I: read aloud and typed from a projector
CODE_LENGTH = 8  # 32**8 codes: guessing one of 10 open rooms takes about 5.5e10 tries
MAX_QUESTIONS = 50
MAX_ANSWERS = 1000  # answers one question keeps (seats come and go; a lesson file holds this many: kvviz.lessons.files)
MAX_ANSWER = 1e15  # bytes a lesson's cache could hold, with room to spare
DEFAULTS = {"KVVIZ_MAX_ROOMS": 10, "KVVIZ_ROOMS_PER_CLIENT": 2, "KVVIZ_ROOM_STUDENTS": 60,
            "KVVIZ_SEAT_IDLE_S": 30, "KVVIZ_ROOM_IDLE_S": 3600}
SEAT_PATTERN = re.compile(r"[A-Za-z0-9_-]{16}")  # secrets.token_urlsafe(12)
GUESSES = {"session": 5}  # wrong codes a session may try in GUESS_WINDOW_S seconds. Nothing is keyed on an address:
# a class behind one router or a reverse proxy shares one (or none), and a script's tabs from it locked the class out
# (issue 61). What keeps a code unguessable is its length: a script opening 50 sessions a second, 5 wrong codes each,
# tries 15,000 codes a minute; one of 10 open rooms among 32**8 (1.1e12) codes takes it 5.5e10 tries on average,
# about 7 years, and a room lives an hour or two (a chance of about 2 in 100,000 of finding one in two hours). A
# right code for a full room is no wrong code.
GUESS_WINDOW_S = 60.0
# page -> (export: lesson -> file text, read: file text -> replay), or None for a page whose lessons a room kept
# in Redis cannot carry: a room there carries its lesson as that file (kvviz.rooms.redis_store)
LessonFiles = Callable[[str], "tuple[Callable, Callable] | None"]


def setting(name: str) -> int:
    try:
        return max(1, int(os.environ.get(name, DEFAULTS[name])))
    except ValueError:
        return DEFAULTS[name]


@dataclass
class RoomQuestion:
    """A question the teacher asked: students answer it until it is revealed."""

    id: str
    text: str
    unit: str
    target: int  # the step whose record holds the answer (the first that may, until revealed)
    exact: bool = False  # only the same number is right (a block id); else within 1% (bytes)
    answer: float | None = None  # the engine's, set when revealed
    answers: dict[str, float] = field(default_factory=dict)  # student's seat -> their number

    @property
    def revealed(self) -> bool:
        return self.answer is not None


@dataclass
class Room:
    code: str
    teacher: str  # the teacher's session name (session_id())
    teacher_runtime: str | None  # Streamlit's id of the teacher's session
    page: str  # the lesson's key, e.g. "prefill_decode"
    lesson: object  # the teacher's lesson; students read its records
    step: int = 0
    progress: int = 0  # what the teacher's lesson holds past its step that followers also draw
    opened: float = field(default_factory=time.time)
    touched: float = field(default_factory=time.time)
    students: dict[str, float] = field(default_factory=dict)  # seat -> last seen
    questions: list[RoomQuestion] = field(default_factory=list)
    version: int = 0  # grows with every change a student's page must show (not another student's answer)
    # the teacher's step as followers draw it (room_student.step_payload), JSON-able
    payload: dict = field(default_factory=dict)
    client: str | None = None  # the opener's address, when the server knows it
    model: str = ""  # the teacher's model source ("smollm2", a folder, ...): Take over runs on it too

    def question(self, question_id: str) -> RoomQuestion | None:
        return next((q for q in self.questions if q.id == question_id), None)

    @property
    def open_question(self) -> RoomQuestion | None:
        """The newest question not yet revealed."""
        return next((q for q in reversed(self.questions) if not q.revealed), None)

    def following(self, within_s: float = 25.0) -> int:
        """Students whose page asked for news in the last `within_s` seconds."""
        now = time.time()
        return sum(now - seen <= within_s for seen in self.students.values())

    def free_idle_seats(self, now: float) -> None:
        """Seats whose page has not asked for news for KVVIZ_SEAT_IDLE_S seconds (a closed tab) are free."""
        idle = setting("KVVIZ_SEAT_IDLE_S")
        for seat, seen in list(self.students.items()):
            if now - seen > idle:
                del self.students[seat]


def valid_seat(token) -> bool:
    return isinstance(token, str) and SEAT_PATTERN.fullmatch(token) is not None


def lesson_token(lesson) -> str:
    """A name for one teacher's lesson while it lives, the same on every process: a payload says which
    lesson its steps belong to. The teacher's process names the object; a replay rebuilt on another
    process from the lesson's file carries the teacher's name as `room_token` (kvviz.rooms.redis_store)."""
    return getattr(lesson, "room_token", None) or f"{id(lesson):x}"


class RoomStore(Protocol):
    """Where rooms are kept (kvviz.rooms.store.MemoryStore, kvviz.rooms.redis_store.RedisStore): the same methods,
    the same answers. `get` and `teachers` give snapshots a page may read and change freely; a change goes
    through a method, which finds the room by its code and brings the snapshot it was given up to date.
    A room gone meanwhile: False, None, 0, [] or "gone", never an exception. tests/rooms/test_store_contract.py
    runs every case on both."""

    def down(self) -> str | None:
        """None while the store answers; else one sentence saying it does not."""

    def add(self, room: Room, max_rooms: int, per_client: int) -> tuple[str, int] | None:
        """Keep `room` (None), or the bound that refuses it: (its variable, rooms counted), or ("taken", 0)."""

    def get(self, code: str) -> Room | None: ...

    def codes(self) -> list[str]:
        """The rooms this process opened that are still open."""

    def remove(self, room: Room) -> None: ...

    def teachers(self, teacher: str) -> list[Room]:
        """The open rooms of the teacher session `teacher`."""

    def sweep(self, now: float, idle: float, gone: Callable[[Room], bool]) -> None:
        """Close the rooms `gone(room)` says have ended; those idle over `idle` s close here, or expire on a
        server that keeps them (Redis) on their own."""

    def sit(self, room: Room, seat: str, now: float, most: int) -> bool:
        """`seat` held in `room` (again, or one of `most`), seen at `now`; False when full or gone."""

    def leave(self, room: Room, seat: str) -> None: ...

    def seats(self, room: Room, now: float) -> int:
        """Seats held now, the idle ones freed first."""

    def publish(self, room: Room, step: int, progress: int, now: float) -> bool:
        """The teacher shows `step` (followers draw `room.payload`); True when it moved."""

    def show_lesson(self, room: Room, lesson) -> bool:
        """A new lesson in the room, its questions gone; True when it is new."""

    def ask(self, room: Room, question: RoomQuestion) -> str:
        """"asked", "known" (the same id before), "full" (MAX_QUESTIONS) or "gone"."""

    def reveal(self, room: Room, question_id: str, answer: float, step: int | None) -> bool: ...

    def answer(self, room: Room, question_id: str, value: float, seat: str) -> str | None:
        """None when kept; else "gone", "revealed" or "full" (MAX_ANSWERS seats answered)."""

    def questions(self, room: Room) -> list[RoomQuestion]: ...

    def lost_room(self, teacher: str) -> str | None:
        """Why this teacher's room closed without the teacher closing it (said once), else None."""

    def guessed_too_often(self, keys: list[tuple[str, str]], limits: dict, now: float) -> bool: ...

    def wrong_guess(self, keys: list[tuple[str, str]], now: float) -> None: ...
