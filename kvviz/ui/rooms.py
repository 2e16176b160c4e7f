"""Rooms: a teacher's live lesson followed by the class, on this server or across several.

    room = rooms.open_room(lesson, page="paged_batching")   # the teacher's session owns it
    rooms.publish(room, step=3)                              # each time the teacher's page draws
    found = rooms.take_seat("K7QW2MXP", seat, session)       # a student's link: the room, or one sentence
    rooms.answer(found, question_id, 12.0, seat)             # a student's answer, under their seat

A room belongs to one lesson page (Prefill and decode, Paged cache and batching, Speculative
decoding). It holds a reference to the teacher's lesson object (its records are what students
see, as a replay: no model runs for them), the step the teacher shows, the questions the teacher
asked and one answer per seat per question (the data and its bounds: kvviz.rooms.types). Where rooms
live is kvviz.rooms.store's: one dict behind one lock, shared by the server's sessions, or, with
KVVIZ_ROOMS_URL=redis://HOST:PORT, a Redis server that every app process serving the class shares
(kvviz.rooms.redis_store: the lesson travels as its lesson file, written and read as app.py serves them
(kvviz.rooms.store.serve_lesson_files), and changes by pub/sub, which wake this process's followers through
room_wake.changed, the callback given to the store here). A room closes when its teacher's session ends,
when it has been idle for KVVIZ_ROOM_IDLE_S seconds, or when the teacher closes it.

A student holds a seat: a token the session keeps, never in the page's address, so a link passed on
cannot take another student's seat; a reload is a new session with a new seat, and a seat whose page
has not asked for news for KVVIZ_SEAT_IDLE_S seconds is free again. A wrong code and a full room get
the same sentence (a code's existence is not told); a session that tries more than its GUESSES wrong codes in
GUESS_WINDOW_S seconds waits, and a full room's refusal counts as no wrong code. Nothing is keyed on a browser's
address (a class shares one behind a router; behind a local proxy there is none): a code's length keeps it
unguessable (kvviz.rooms.types), and KVVIZ_TEACHER_KEY, when set, is asked for before a room opens.

Bounds, each an environment variable: KVVIZ_MAX_ROOMS rooms at once (default 10), one room a session (opening
another closes it), KVVIZ_ROOMS_PER_CLIENT rooms opened from one known address (2), KVVIZ_ROOM_STUDENTS seats
a room (60), KVVIZ_SEAT_IDLE_S seconds before an unseen seat is freed (30), KVVIZ_ROOM_IDLE_S seconds before
an idle room closes (3600), and MAX_QUESTIONS questions a room (50).
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
import unicodedata

import streamlit as st

from kvviz.rooms.store import shared_store
from kvviz.rooms.types import (CODE_LENGTH, CODE_LETTERS, GUESSES, MAX_ANSWER, MAX_ANSWERS, MAX_QUESTIONS, Room,
                               RoomQuestion, setting)
from kvviz.ui import room_wake, streamlit_door

SESSION_KEY = "room_session"  # this session's name in rooms, in st.session_state


def session_id() -> str:
    """This browser session's name in rooms: kept in its session state (SESSION_KEY)."""
    return st.session_state.setdefault(SESSION_KEY, secrets.token_hex(8))


def client_address() -> str | None:
    """The browser's address as the server sees it (None when unknown, as under a test)."""
    try:
        return st.context.ip_address
    except (AttributeError, RuntimeError):
        return None


TEACHER_KEY_VARIABLE = "KVVIZ_TEACHER_KEY"


def teacher_key_needed() -> bool:
    """Whether this server asks for a teacher's key before it opens a room (KVVIZ_TEACHER_KEY is set)."""
    return bool(os.environ.get(TEACHER_KEY_VARIABLE, ""))


def teacher_key_refusal(typed: str) -> str | None:
    """None when `typed` is this server's teacher key (or none is needed); else one sentence."""
    key = os.environ.get(TEACHER_KEY_VARIABLE, "")
    if not key or secrets.compare_digest(str(typed)[:200].encode(), key.encode()):
        return None
    return ("That is not this server's teacher key; ask whoever runs the class server for it "
            "(KVVIZ_TEACHER_KEY), or follow your teacher's room link instead.")


def new_seat() -> str:
    return secrets.token_urlsafe(12)


def runtime_session() -> str | None:
    """Streamlit's id of this session, to learn when it has ended."""
    return streamlit_door.session_id()


def _session_ended(session: str) -> bool:
    return streamlit_door.session_ended(session)


def _store():
    return shared_store(on_change=room_wake.changed)  # another process's change wakes this one's followers


def down() -> str | None:
    """One sentence when the rooms' server (KVVIZ_ROOMS_URL) did not answer its last call; else None."""
    return _store().down()


def sweep() -> None:
    """Close the rooms whose teacher left or that sat idle too long."""
    _store().sweep(time.time(), setting("KVVIZ_ROOM_IDLE_S"), _gone)


SWEEP_EVERY_S = 20.0  # a closed teacher's page frees its room within this, though no page asks for rooms
_sweeper: list[threading.Thread] = []
_sweeper_guard = threading.Lock()


def keep_sweeping() -> None:
    """Sweep every SWEEP_EVERY_S seconds in a thread of this process, from the first room opened on: a room is
    swept when a page asks for rooms, and on another app process (KVVIZ_ROOMS_URL) a closed teacher's room was
    counted against KVVIZ_MAX_ROOMS for an hour when nobody on its own process did."""
    with _sweeper_guard:
        if _sweeper and _sweeper[0].is_alive():
            return
        _sweeper[:] = [threading.Thread(target=_sweep_forever, name="kvviz-rooms-sweeper", daemon=True)]
        _sweeper[0].start()


def _sweep_forever() -> None:
    while True:
        time.sleep(SWEEP_EVERY_S)
        try:
            sweep()
        except Exception:  # a store that failed once may answer next time; the thread goes on
            logging.getLogger(__name__).exception("sweeping the rooms failed")


def _gone(room: Room) -> bool:
    ended = room.teacher_runtime is not None and _session_ended(room.teacher_runtime)
    return ended or getattr(room.lesson, "released", False)


def open_room(lesson, page: str, client: str | None = None, model: str = "") -> Room:
    """A new room for this session's lesson on `model` (its source, for Take over), opened from `client`'s
    address (the one it had is closed); ValueError says why not."""
    sweep()
    keep_sweeping()
    store, teacher = _store(), session_id()
    for room in store.teachers(teacher):
        store.remove(room)
    while True:
        code = "".join(secrets.choice(CODE_LETTERS) for _ in range(CODE_LENGTH))
        room = Room(code, teacher, runtime_session(), page, lesson, client=client, model=model)
        refused = store.add(room, setting("KVVIZ_MAX_ROOMS"), setting("KVVIZ_ROOMS_PER_CLIENT"))
        if refused is None:
            return room
        bound, count = refused
        if bound == "KVVIZ_MAX_ROOMS":
            raise ValueError(f"This server already has {count} open rooms, its limit (KVVIZ_MAX_ROOMS); "
                             "close one, or wait for an idle one to close.")
        if bound == "KVVIZ_ROOMS_PER_CLIENT":
            raise ValueError(f"Your address already has {count} open rooms, its limit (KVVIZ_ROOMS_PER_CLIENT); "
                             "close one in its tab, or wait for it to close.")
        if bound == "down":
            raise ValueError(down() or "The class room server does not answer; the lesson goes on without a room.")


def close_room(room: Room) -> None:
    _store().remove(room)
    room_wake.changed(room.code, full=True)


def teachers_room(page: str) -> Room | None:
    """The room this session opened for `page`, if it is still open."""
    sweep()
    return next((r for r in _store().teachers(session_id()) if r.page == page), None)


def lost_room() -> str | None:
    """Why this session's room closed without its teacher closing it (the room server lost it, or the lesson
    outgrew what a room carries), told once."""
    return _store().lost_room(session_id())


def normalize(code: str) -> str:
    """The code as rooms keep it: NFKC first, so a phone's fullwidth "ＫＢ７" is "KB7"; ASCII letters and digits
    only."""
    text = unicodedata.normalize("NFKC", str(code)[:CODE_LENGTH * 8]).upper()
    return "".join(ch for ch in text if ch.isascii() and ch.isalnum())[:CODE_LENGTH * 2]


def find(code: str) -> Room | None:
    """The open room with this code (any case, spaces ignored), or None."""
    sweep()
    return _store().get(normalize(code))


def no_seat(code: str) -> str:
    """The one sentence for a wrong code and for a full room alike: which of the two is not told."""
    return (f"No open room has a seat for the code {code or '(empty)'}: check it with your teacher (the room may "
            "have closed or be full), or run the lesson on your own here.")


def take_seat(code: str, seat: str, session: str | None = None) -> Room | str:
    """The room with this code, `seat` held in it (the same seat again after a reload); else one sentence.
    The session tries at most GUESSES["session"] wrong codes in GUESS_WINDOW_S seconds."""
    sweep()
    store, code, now = _store(), normalize(code), time.time()
    keys = [("session", session)] if session else []
    if store.guessed_too_often(keys, GUESSES, now):
        return ("Too many room codes were tried from here in the last minute; wait a minute, then check the "
                "code with your teacher.")
    room = store.get(code)
    if room is not None and store.sit(room, seat, now, setting("KVVIZ_ROOM_STUDENTS")):
        return room
    if store.down():
        return store.down()
    if room is None:  # a full room's refusal is the same sentence, but no guess: the class waits for a seat
        store.wrong_guess(keys, now)
    return no_seat(code)


def seen(room: Room, seat: str) -> bool:
    """A student's page looked for news: it still follows. False when its seat was freed while it was
    away and the room has filled since."""
    return _store().sit(room, seat, time.time(), setting("KVVIZ_ROOM_STUDENTS"))


def leave(room: Room, seat: str) -> None:
    _store().leave(room, seat)


def seats(room: Room) -> int:
    """Seats held now (the idle ones freed first)."""
    return _store().seats(room, time.time())


def publish(room: Room, step: int, progress: int = 0, payload: dict | None = None) -> None:
    """The teacher's page shows `step` (and its lesson has come `progress` far): followers move to it,
    woken to draw `payload` (built once for them all; the Redis store keeps it for other processes)."""
    if payload is not None:
        room.payload = payload
    if _store().publish(room, step, progress, time.time()) or payload is not None:
        room_wake.changed(room.code)


def show_lesson(room: Room, lesson) -> None:
    """The teacher started a new lesson (Prefill or Start again): the room shows it, and the questions
    asked about the old one's steps go (the old lesson keeps their answers)."""
    if _store().show_lesson(room, lesson):
        room.payload = {}
        room_wake.changed(room.code, full=True)


def ask(room: Room, question_id: str, text: str, unit: str, target: int, exact: bool = False) -> str | None:
    """Put a question to the room (once per id); a sentence when the room has asked too many."""
    asked = _store().ask(room, RoomQuestion(question_id, text, unit, target, exact))
    if asked == "full":
        return f"This room has asked {MAX_QUESTIONS} questions, its limit; open a new room to ask more."
    if asked == "asked":
        room_wake.changed(room.code, full=True)
    return None


def reveal(room: Room, question_id: str, answer: float, step: int | None = None) -> None:
    """The engine's answer, read at `step` (when the question could not say which step ahead)."""
    if _store().reveal(room, question_id, answer, step):
        room_wake.changed(room.code, full=True)


def answer(room: Room, question_id: str, value: float, seat: str) -> str | None:
    """The number of the student in `seat` (a second answer replaces the first); a sentence if refused.
    No follower's page wakes for it: only the teacher's counts change, and they redraw on their own."""
    if not value >= 0:  # NaN too
        return "Answer with a number from 0 up: a count of blocks or bytes is never negative."
    if value >= MAX_ANSWER:
        return f"Answer with a number below {MAX_ANSWER:,.0f}: no question here has an answer that large."
    refused = _store().answer(room, question_id, float(value), seat)
    if refused == "revealed":
        return "The teacher has already revealed this answer."
    if refused == "full":
        return f"This question has {MAX_ANSWERS:,} answers, as many as a room keeps; the teacher can reveal it now."
    if refused is not None:
        return "That question is no longer open in this room."
    return None


def answers_table(room: Room) -> list[dict]:
    """Every question with its answers (no student's name), for the teacher's download and lesson file."""
    return [{"room": room.code, "question": q.text, "unit": q.unit, "step": q.target, "engine": q.answer,
             "answers": sorted(q.answers.values()), "exact": q.exact} for q in _store().questions(room)]


def right_answers(answers: list[float], engine: float, exact: bool) -> int:
    """How many answers match the engine's: the same number, or within 1% of it."""
    tolerance = 0 if exact else 0.01 * max(abs(engine), 1)
    return sum(abs(a - engine) <= tolerance for a in answers)
