"""Rooms: a teacher's live lesson followed by the class, on this server.

    room = rooms.open_room(lesson, page="paged_batching")   # the teacher's session owns it
    rooms.publish(room, step=3)                              # each time the teacher's page draws
    found = rooms.find("K7QW2M")                             # a student's link; None if closed or wrong
    rooms.join(found)                                        # counts the student, or says why not

A room belongs to one lesson page (Prefill and decode, Paged cache and batching, Speculative
decoding). It holds a reference to the teacher's lesson object (its records are what students
see, as a replay: no model runs for them), the step the teacher shows, the questions the teacher
asked and one answer per student per question. Everything sits in one dict behind one lock, shared by the
server's sessions. A room closes when its teacher's session ends, when it has been idle for
KVVIZ_ROOM_IDLE_S seconds, or when the teacher closes it.

Bounds, each an environment variable: KVVIZ_MAX_ROOMS rooms at once (default 10),
KVVIZ_ROOM_STUDENTS students a room (60), KVVIZ_ROOM_IDLE_S seconds before an idle room closes
(3600), and MAX_QUESTIONS questions a room (50).
"""

from __future__ import annotations

import os
import unicodedata
import secrets
import threading
import time
from dataclasses import dataclass, field

import streamlit as st
from streamlit.runtime import Runtime
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

CODE_LETTERS = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I: read aloud and typed from a projector
CODE_LENGTH = 6
MAX_QUESTIONS = 50
SESSION_KEY = "room_session"  # this session's name in rooms, in st.session_state
DEFAULTS = {"KVVIZ_MAX_ROOMS": 10, "KVVIZ_ROOM_STUDENTS": 60, "KVVIZ_ROOM_IDLE_S": 3600}
_lock = threading.Lock()
_rooms: dict[str, "Room"] = {}


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
    answers: dict[str, float] = field(default_factory=dict)  # student session -> their number

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
    students: dict[str, float] = field(default_factory=dict)  # session id -> last seen
    questions: list[RoomQuestion] = field(default_factory=list)
    version: int = 0  # grows with every change a student's page must show

    def question(self, question_id: str) -> RoomQuestion | None:
        return next((q for q in self.questions if q.id == question_id), None)

    @property
    def open_question(self) -> RoomQuestion | None:
        """The newest question not yet revealed."""
        return next((q for q in reversed(self.questions) if not q.revealed), None)

    def following(self, within_s: float = 10.0) -> int:
        """Students whose page asked for news in the last `within_s` seconds."""
        now = time.time()
        return sum(now - seen <= within_s for seen in self.students.values())


def session_id() -> str:
    """This browser session's name in rooms: kept in its session state (SESSION_KEY)."""
    return st.session_state.setdefault(SESSION_KEY, secrets.token_hex(8))


def runtime_session() -> str | None:
    """Streamlit's id of this session, to learn when it has ended."""
    ctx = get_script_run_ctx()
    return ctx.session_id if ctx is not None else None


def _session_ended(session: str) -> bool:
    return Runtime.exists() and not Runtime.instance().is_active_session(session)


def sweep() -> None:
    """Close the rooms whose teacher left or that sat idle too long."""
    idle = setting("KVVIZ_ROOM_IDLE_S")
    now = time.time()
    with _lock:
        for code, room in list(_rooms.items()):
            ended = room.teacher_runtime is not None and _session_ended(room.teacher_runtime)
            if now - room.touched > idle or ended or getattr(room.lesson, "released", False):
                del _rooms[code]


def open_room(lesson, page: str) -> Room:
    """A new room for this session's lesson (the one it had is closed); ValueError says why not."""
    sweep()
    teacher = session_id()
    with _lock:
        for code, room in list(_rooms.items()):
            if room.teacher == teacher:
                del _rooms[code]
        if len(_rooms) >= setting("KVVIZ_MAX_ROOMS"):
            raise ValueError(f"This server already has {len(_rooms)} open rooms, its limit (KVVIZ_MAX_ROOMS); "
                             "close one, or wait for an idle one to close.")
        code = "".join(secrets.choice(CODE_LETTERS) for _ in range(CODE_LENGTH))
        while code in _rooms:
            code = "".join(secrets.choice(CODE_LETTERS) for _ in range(CODE_LENGTH))
        room = _rooms[code] = Room(code, teacher, runtime_session(), page, lesson)
    return room


def close_room(room: Room) -> None:
    with _lock:
        _rooms.pop(room.code, None)


def teachers_room(page: str) -> Room | None:
    """The room this session opened for `page`, if it is still open."""
    sweep()
    teacher = session_id()
    with _lock:
        return next((r for r in _rooms.values() if r.teacher == teacher and r.page == page), None)


def normalize(code: str) -> str:
    """The code as rooms keep it: NFKC first, so a phone's fullwidth "ＫＢ７" is "KB7"; ASCII letters and digits only."""
    text = unicodedata.normalize("NFKC", str(code)[:CODE_LENGTH * 8]).upper()
    return "".join(ch for ch in text if ch.isascii() and ch.isalnum())[:CODE_LENGTH * 2]


def find(code: str) -> Room | None:
    """The open room with this code (any case, spaces ignored), or None."""
    sweep()
    with _lock:
        return _rooms.get(normalize(code))


def join(room: Room) -> str | None:
    """Count this session as one of the room's students; a sentence if the room is full."""
    student = session_id()
    with _lock:
        if student not in room.students and len(room.students) >= setting("KVVIZ_ROOM_STUDENTS"):
            return (f"Room {room.code} is full ({len(room.students)} students, its limit KVVIZ_ROOM_STUDENTS); "
                    "ask your teacher to raise the limit.")
        room.students[student] = time.time()
    return None


def seen(room: Room) -> None:
    """A student's page looked for news: it still follows."""
    with _lock:
        room.students[session_id()] = time.time()


def leave(room: Room) -> None:
    with _lock:
        room.students.pop(session_id(), None)


def publish(room: Room, step: int, progress: int = 0) -> None:
    """The teacher's page shows `step` (and its lesson has come `progress` far): followers move to it."""
    with _lock:
        room.touched = time.time()
        if (room.step, room.progress) != (step, progress):
            room.step, room.progress = step, progress
            room.version += 1


def show_lesson(room: Room, lesson) -> None:
    """The teacher started a new lesson (Prefill or Start again): the room shows it, and the questions
    asked about the old one's steps go (the old lesson keeps their answers)."""
    with _lock:
        if room.lesson is not lesson:
            room.lesson, room.questions = lesson, []
            room.version += 1


def ask(room: Room, question_id: str, text: str, unit: str, target: int, exact: bool = False) -> str | None:
    """Put a question to the room (once per id); a sentence when the room has asked too many."""
    with _lock:
        if room.question(question_id) is not None:
            return None
        if len(room.questions) >= MAX_QUESTIONS:
            return f"This room has asked {MAX_QUESTIONS} questions, its limit; open a new room to ask more."
        room.questions.append(RoomQuestion(question_id, text, unit, target, exact))
        room.version += 1
    return None


def reveal(room: Room, question_id: str, answer: float, step: int | None = None) -> None:
    """The engine's answer, read at `step` (when the question could not say which step ahead)."""
    with _lock:
        question = room.question(question_id)
        if question is not None and not question.revealed:
            question.answer = float(answer)
            if step is not None:
                question.target = step
            room.version += 1


def answer(room: Room, question_id: str, value: float) -> str | None:
    """This student's number for the question (a second answer replaces the first); a sentence if refused."""
    with _lock:
        question = room.question(question_id)
        if question is None:
            return "That question is no longer open in this room."
        if question.revealed:
            return "The teacher has already revealed this answer."
        if not 0 <= value < 1e15:
            return "Answer with a number from 0 up."
        question.answers[session_id()] = float(value)
        room.version += 1
    return None


def answers_table(room: Room) -> list[dict]:
    """Every question with its answers (no student's name), for the teacher's download and lesson file."""
    with _lock:
        return [{"room": room.code, "question": q.text, "unit": q.unit, "step": q.target, "engine": q.answer,
                 "answers": sorted(q.answers.values()), "exact": q.exact} for q in room.questions]


def right_answers(answers: list[float], engine: float, exact: bool) -> int:
    """How many answers match the engine's: the same number, or within 1% of it."""
    tolerance = 0 if exact else 0.01 * max(abs(engine), 1)
    return sum(abs(a - engine) <= tolerance for a in answers)
