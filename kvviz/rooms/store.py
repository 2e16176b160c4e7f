"""Where rooms (kvviz.ui.rooms) keep their state: this process's memory, or a Redis server.

    store = shared_store(on_change)   # MemoryStore, or RedisStore when KVVIZ_ROOMS_URL=redis://HOST:PORT[/db]

kvviz.ui.rooms decides (codes, sentences, bounds read from the environment); a store keeps what it
decided, and counts what must be counted atomically (rooms open, seats taken, wrong codes). Both
stores implement kvviz.rooms.types.RoomStore alike: `get` gives a snapshot of the room, and a
change goes through the store's methods, which take the room by its code and bring the snapshot
they are given up to date. The memory store keeps this process's rooms; the Redis store's
(kvviz.rooms.redis_store) are shared by every app process serving a class. tests/rooms/
test_store_contract.py runs the same cases on both.
"""

from __future__ import annotations

import copy
import os
import threading
from collections.abc import Callable

from kvviz.rooms.types import GUESS_WINDOW_S, MAX_ANSWERS, MAX_QUESTIONS, LessonFiles, Room, RoomQuestion, RoomStore

URL_VARIABLE = "KVVIZ_ROOMS_URL"
_chosen: dict = {}  # url ("" for memory) -> its store, made once per process
_choosing = threading.Lock()  # 60 students' first pages on a fresh process ask at once
_lesson_files: list[LessonFiles] = []  # what app.py serves (serve_lesson_files): a Redis store writes lessons by it


def serve_lesson_files(lesson_files: LessonFiles) -> None:
    """How each page's lesson is written to a file and read back, for rooms kept in Redis: app.py passes
    kvviz.lessons.lecture.lesson_files (the rooms import no lesson)."""
    _lesson_files[:] = [lesson_files]


def lesson_files(page: str):
    """The served (export, read) of `page`'s lessons, or None."""
    return _lesson_files[0](page) if _lesson_files else None


def shared_store(on_change: Callable[[str, bool], object] | None = None) -> RoomStore:
    """This process's rooms' store for KVVIZ_ROOMS_URL as it is now (memory when unset). A Redis store's listener
    calls on_change(code, full) when another process changed a room: kvviz.ui.rooms passes room_wake.changed, which
    wakes this process's followers. The first call for a URL makes its store, with that call's on_change."""
    url = os.environ.get(URL_VARIABLE, "").strip()
    with _choosing:  # one store, so one listener: a process whose first 30 followers arrived together made 30,
        # each waking every follower at each of the teacher's steps (55-128 ms of CPU a follower a step, issue 62)
        if url not in _chosen:
            if url:
                from kvviz.rooms.redis_store import RedisStore  # the redis client only where a server is named

                _chosen[url] = RedisStore(url, on_change=on_change, lesson_files=lesson_files)
            else:
                _chosen[url] = MemoryStore()
        return _chosen[url]


def snapshot(room: Room) -> Room:
    """A copy of `room` a page may read and change freely; the lesson stays the teacher's own object."""
    copied = copy.copy(room)
    copied.students, copied.payload = dict(room.students), room.payload
    copied.questions = [copy.copy(q) for q in room.questions]
    for question in copied.questions:
        question.answers = dict(question.answers)
    return copied


class MemoryStore:
    """Rooms in one dict behind one lock, shared by this server's sessions; nothing outside the process."""

    def __init__(self):
        self.lock = threading.Lock()
        self._rooms: dict[str, Room] = {}
        self._wrong_guesses: dict[tuple[str, str], list[float]] = {}  # ("session" or "address", name) -> times

    def down(self) -> str | None:
        return None  # memory always answers

    def add(self, room: Room, max_rooms: int, per_client: int) -> tuple[str, int] | None:
        """Keep `room` unless a bound refuses it: (the bound's variable, rooms counted), or ("taken", 0)."""
        with self.lock:
            if room.code in self._rooms:
                return "taken", 0
            if len(self._rooms) >= max_rooms:
                return "KVVIZ_MAX_ROOMS", len(self._rooms)
            mine = sum(r.client == room.client for r in self._rooms.values()) if room.client is not None else 0
            if mine >= per_client:
                return "KVVIZ_ROOMS_PER_CLIENT", mine
            self._rooms[room.code] = snapshot(room)
        return None

    def get(self, code: str) -> Room | None:
        with self.lock:
            room = self._rooms.get(code)
            return snapshot(room) if room is not None else None

    def codes(self) -> list[str]:
        with self.lock:
            return list(self._rooms)

    def remove(self, room: Room) -> None:
        with self.lock:
            self._rooms.pop(room.code, None)

    def teachers(self, teacher: str) -> list[Room]:
        with self.lock:
            return [snapshot(r) for r in self._rooms.values() if r.teacher == teacher]

    def sweep(self, now: float, idle: float, gone) -> None:
        """Drop the rooms idle over `idle` seconds and those `gone(room)` says have ended."""
        with self.lock:
            for code, room in list(self._rooms.items()):
                if now - room.touched > idle or gone(room):
                    del self._rooms[code]

    def sit(self, room: Room, seat: str, now: float, most: int) -> bool:
        """`seat` held in `room` (again, or a free one among `most`), seen at `now`; False when full or gone."""
        with self.lock:
            live = self._rooms.get(room.code)
            if live is None:
                return False
            if seat not in live.students:
                live.free_idle_seats(now)
                if len(live.students) >= most:
                    return False
            live.students[seat] = now
            room.students[seat] = now
        return True

    def leave(self, room: Room, seat: str) -> None:
        with self.lock:
            live = self._rooms.get(room.code)
            if live is not None:
                live.students.pop(seat, None)
            room.students.pop(seat, None)

    def seats(self, room: Room, now: float) -> int:
        with self.lock:
            live = self._rooms.get(room.code)
            if live is None:
                return 0
            live.free_idle_seats(now)
            return len(live.students)

    def publish(self, room: Room, step: int, progress: int, now: float) -> bool:
        """The teacher shows `step` (and `room.payload`, what followers draw of it); True when it moved."""
        with self.lock:
            live = self._rooms.get(room.code)
            if live is None:
                return False
            live.touched, live.payload = now, room.payload
            room.touched = now
            if (live.step, live.progress) == (step, progress):
                return False
            live.step, live.progress = room.step, room.progress = step, progress
            live.version += 1
            room.version = live.version
        return True

    def show_lesson(self, room: Room, lesson) -> bool:
        """A new lesson in the room, its questions gone; True when it is new."""
        with self.lock:
            live = self._rooms.get(room.code)
            if live is None or live.lesson is lesson:
                return False
            live.lesson, live.questions, live.payload = lesson, [], {}
            live.version += 1
            room.lesson, room.questions, room.version = lesson, [], live.version
        return True

    def ask(self, room: Room, question: RoomQuestion) -> str:
        """"asked", "known" (the same id before), "full" (MAX_QUESTIONS) or "gone" (no such room)."""
        with self.lock:
            live = self._rooms.get(room.code)
            if live is None:
                return "gone"
            if live.question(question.id) is not None:
                return "known"
            if len(live.questions) >= MAX_QUESTIONS:
                return "full"
            live.questions.append(copy.copy(question))
            live.version += 1
            room.version = live.version
        return "asked"

    def reveal(self, room: Room, question_id: str, answer: float, step: int | None) -> bool:
        with self.lock:
            live = self._rooms.get(room.code)
            question = live.question(question_id) if live is not None else None
            if question is None or question.revealed:
                return False
            question.answer = float(answer)
            if step is not None:
                question.target = step
            live.version += 1
            room.version = live.version
        return True

    def answer(self, room: Room, question_id: str, value: float, seat: str) -> str | None:
        """None when kept; else "gone" (no such question), "revealed" or "full" (MAX_ANSWERS seats answered)."""
        with self.lock:
            live = self._rooms.get(room.code)
            question = live.question(question_id) if live is not None else None
            if question is None:
                return "gone"
            if question.revealed:
                return "revealed"
            if seat not in question.answers and len(question.answers) >= MAX_ANSWERS:
                return "full"
            question.answers[seat] = float(value)
        return None

    def questions(self, room: Room) -> list[RoomQuestion]:
        fresh = self.get(room.code)
        return fresh.questions if fresh is not None else []

    def lost_room(self, teacher: str) -> str | None:
        """Rooms in this process close only when the teacher or the sweep closes them: none is lost."""
        return None

    def guessed_too_often(self, keys: list[tuple[str, str]], limits: dict, now: float) -> bool:
        with self.lock:
            for key in list(self._wrong_guesses):
                self._wrong_guesses[key] = [t for t in self._wrong_guesses[key] if now - t < GUESS_WINDOW_S]
                if not self._wrong_guesses[key]:
                    del self._wrong_guesses[key]
            return any(len(self._wrong_guesses.get(key, ())) >= limits[key[0]] for key in keys)

    def wrong_guess(self, keys: list[tuple[str, str]], now: float) -> None:
        with self.lock:
            for key in keys:
                self._wrong_guesses.setdefault(key, []).append(now)
