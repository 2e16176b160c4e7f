"""Rooms: a teacher's live lesson followed by the class, on this server.

    room = rooms.open_room(lesson, page="paged_batching")   # the teacher's session owns it
    rooms.publish(room, step=3)                              # each time the teacher's page draws
    found = rooms.take_seat("K7QW2M", seat, client)          # a student's link: the room, or one sentence
    rooms.answer(found, question_id, 12.0, seat)             # a student's answer, under their seat

A room belongs to one lesson page (Prefill and decode, Paged cache and batching, Speculative
decoding). It holds a reference to the teacher's lesson object (its records are what students
see, as a replay: no model runs for them), the step the teacher shows, the questions the teacher
asked and one answer per seat per question. Everything sits in one dict behind one lock, shared by the
server's sessions. A room closes when its teacher's session ends, when it has been idle for
KVVIZ_ROOM_IDLE_S seconds, or when the teacher closes it.

A student holds a seat, not a tab: the seat is a token kept in the page's address (?room=CODE&seat=TOKEN),
so a reload takes the same seat, and a seat whose page has not asked for news for KVVIZ_SEAT_IDLE_S
seconds is free again. A wrong code and a full room get the same sentence (a code's existence is not
told), and a session or an address that tries more than its GUESSES wrong codes in GUESS_WINDOW_S
seconds waits.

Bounds, each an environment variable: KVVIZ_MAX_ROOMS rooms at once (default 10), KVVIZ_ROOMS_PER_CLIENT
rooms opened from one address (2), KVVIZ_ROOM_STUDENTS seats a room (60), KVVIZ_SEAT_IDLE_S seconds
before an unseen seat is freed (30), KVVIZ_ROOM_IDLE_S seconds before an idle room closes (3600), and
MAX_QUESTIONS questions a room (50).
"""

from __future__ import annotations

import os
import re
import unicodedata
import secrets
import threading
import time
from dataclasses import dataclass, field

import streamlit as st
from streamlit.runtime import Runtime
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

from kvviz.ui import room_wake

CODE_LETTERS = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I: read aloud and typed from a projector
CODE_LENGTH = 6
MAX_QUESTIONS = 50
SESSION_KEY = "room_session"  # this session's name in rooms, in st.session_state
DEFAULTS = {"KVVIZ_MAX_ROOMS": 10, "KVVIZ_ROOMS_PER_CLIENT": 2, "KVVIZ_ROOM_STUDENTS": 60,
            "KVVIZ_SEAT_IDLE_S": 30, "KVVIZ_ROOM_IDLE_S": 3600}
SEAT_PATTERN = re.compile(r"[A-Za-z0-9_-]{16}")  # secrets.token_urlsafe(12)
GUESSES = {"session": 5, "address": 30}  # wrong codes each may try in GUESS_WINDOW_S seconds (a class may share
# one address behind its school's router: its limit is higher, and still far from guessing one of 32**6 codes)
GUESS_WINDOW_S = 60.0
_lock = threading.Lock()
_rooms: dict[str, "Room"] = {}
_wrong_guesses: dict[tuple[str, str], list[float]] = {}  # ("session" or "address", its name) -> wrong codes' times


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
    payload: dict = field(default_factory=dict)  # the teacher's step as followers draw it (room_view.step_payload), JSON-able
    client: str | None = None  # the opener's address, when the server knows it

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


def session_id() -> str:
    """This browser session's name in rooms: kept in its session state (SESSION_KEY)."""
    return st.session_state.setdefault(SESSION_KEY, secrets.token_hex(8))


def client_address() -> str | None:
    """The browser's address as the server sees it (None when unknown, as under a test)."""
    try:
        return st.context.ip_address
    except (AttributeError, RuntimeError):
        return None


def new_seat() -> str:
    return secrets.token_urlsafe(12)


def valid_seat(token) -> bool:
    return isinstance(token, str) and SEAT_PATTERN.fullmatch(token) is not None


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


def open_room(lesson, page: str, client: str | None = None) -> Room:
    """A new room for this session's lesson (the one it had is closed), opened from `client`'s address;
    ValueError says why not."""
    sweep()
    teacher = session_id()
    with _lock:
        for code, room in list(_rooms.items()):
            if room.teacher == teacher:
                del _rooms[code]
        if len(_rooms) >= setting("KVVIZ_MAX_ROOMS"):
            raise ValueError(f"This server already has {len(_rooms)} open rooms, its limit (KVVIZ_MAX_ROOMS); "
                             "close one, or wait for an idle one to close.")
        mine = sum(room.client == client for room in _rooms.values()) if client is not None else 0
        if mine >= setting("KVVIZ_ROOMS_PER_CLIENT"):
            raise ValueError(f"Your address already has {mine} open rooms, its limit (KVVIZ_ROOMS_PER_CLIENT); "
                             "close one in its tab, or wait for it to close.")
        code = "".join(secrets.choice(CODE_LETTERS) for _ in range(CODE_LENGTH))
        while code in _rooms:
            code = "".join(secrets.choice(CODE_LETTERS) for _ in range(CODE_LENGTH))
        room = _rooms[code] = Room(code, teacher, runtime_session(), page, lesson, client=client)
    return room


def close_room(room: Room) -> None:
    with _lock:
        _rooms.pop(room.code, None)
    room_wake.changed(room.code, full=True)


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


def no_seat(code: str) -> str:
    """The one sentence for a wrong code and for a full room alike: which of the two is not told."""
    return (f"No open room has a seat for the code {code or '(empty)'}: check it with your teacher (the room may "
            "have closed or be full), or run the lesson on your own here.")


def take_seat(code: str, seat: str, session: str | None = None, address: str | None = None) -> Room | str:
    """The room with this code, `seat` held in it (the same seat again after a reload); else one sentence.
    The session and its address each try at most their GUESSES wrong codes in GUESS_WINDOW_S seconds."""
    sweep()
    code, now = normalize(code), time.time()
    keys = [(kind, name) for kind, name in (("session", session), ("address", address)) if name]
    with _lock:
        for key in list(_wrong_guesses):
            _wrong_guesses[key] = [t for t in _wrong_guesses[key] if now - t < GUESS_WINDOW_S]
            if not _wrong_guesses[key]:
                del _wrong_guesses[key]
        if any(len(_wrong_guesses.get(key, ())) >= GUESSES[key[0]] for key in keys):
            return ("Too many room codes were tried from here in the last minute; wait a minute, then check the "
                    "code with your teacher.")
        room = _rooms.get(code)
        if room is not None:
            room.free_idle_seats(now)
            if seat in room.students or len(room.students) < setting("KVVIZ_ROOM_STUDENTS"):
                room.students[seat] = now
                return room
        for key in keys:
            _wrong_guesses.setdefault(key, []).append(now)
    return no_seat(code)


def seen(room: Room, seat: str) -> bool:
    """A student's page looked for news: it still follows. False when its seat was freed while it was
    away and the room has filled since."""
    now = time.time()
    with _lock:
        if seat not in room.students:
            room.free_idle_seats(now)
            if len(room.students) >= setting("KVVIZ_ROOM_STUDENTS"):
                return False
        room.students[seat] = now
    return True


def leave(room: Room, seat: str) -> None:
    with _lock:
        room.students.pop(seat, None)


def seats(room: Room) -> int:
    """Seats held now (the idle ones freed first)."""
    with _lock:
        room.free_idle_seats(time.time())
        return len(room.students)


def publish(room: Room, step: int, progress: int = 0, payload: dict | None = None) -> None:
    """The teacher's page shows `step` (and its lesson has come `progress` far): followers move to it,
    woken to draw `payload` (built once for them all)."""
    with _lock:
        room.touched = time.time()
        moved = (room.step, room.progress) != (step, progress) or payload is not None
        if moved:
            room.step, room.progress = step, progress
            room.payload = payload if payload is not None else room.payload
            room.version += 1
    if moved:
        room_wake.changed(room.code)


def show_lesson(room: Room, lesson) -> None:
    """The teacher started a new lesson (Prefill or Start again): the room shows it, and the questions
    asked about the old one's steps go (the old lesson keeps their answers)."""
    with _lock:
        moved = room.lesson is not lesson
        if moved:
            room.lesson, room.questions, room.payload = lesson, [], {}
            room.version += 1
    if moved:
        room_wake.changed(room.code, full=True)


def ask(room: Room, question_id: str, text: str, unit: str, target: int, exact: bool = False) -> str | None:
    """Put a question to the room (once per id); a sentence when the room has asked too many."""
    with _lock:
        if room.question(question_id) is not None:
            return None
        if len(room.questions) >= MAX_QUESTIONS:
            return f"This room has asked {MAX_QUESTIONS} questions, its limit; open a new room to ask more."
        room.questions.append(RoomQuestion(question_id, text, unit, target, exact))
        room.version += 1
    room_wake.changed(room.code, full=True)
    return None


def reveal(room: Room, question_id: str, answer: float, step: int | None = None) -> None:
    """The engine's answer, read at `step` (when the question could not say which step ahead)."""
    with _lock:
        question = room.question(question_id)
        moved = question is not None and not question.revealed
        if moved:
            question.answer = float(answer)
            if step is not None:
                question.target = step
            room.version += 1
    if moved:
        room_wake.changed(room.code, full=True)


def answer(room: Room, question_id: str, value: float, seat: str) -> str | None:
    """The number of the student in `seat` (a second answer replaces the first); a sentence if refused.
    No follower's page wakes for it: only the teacher's counts change, and they redraw on their own."""
    with _lock:
        question = room.question(question_id)
        if question is None:
            return "That question is no longer open in this room."
        if question.revealed:
            return "The teacher has already revealed this answer."
        if not 0 <= value < 1e15:
            return "Answer with a number from 0 up."
        question.answers[seat] = float(value)
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
