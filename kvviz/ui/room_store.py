"""Where rooms (kvviz.ui.rooms) keep their state: this process's memory, or a Redis server.

    store = room_store.store()     # MemoryStore, or RedisStore when KVVIZ_ROOMS_URL=redis://HOST:PORT[/db]

rooms.py decides (codes, sentences, bounds read from the environment); a store keeps what it
decided, and counts what must be counted atomically (rooms open, seats taken, wrong codes). Both
stores have the same methods. The memory store's rooms are live objects shared by the process's
sessions; the Redis store's (kvviz.ui.room_redis) are snapshots read from the server, so every app
process serving a class sees the same rooms.
"""

from __future__ import annotations

import os
import threading

from kvviz.ui.room_types import GUESS_WINDOW_S, MAX_ANSWERS, MAX_QUESTIONS, Room, RoomQuestion

URL_VARIABLE = "KVVIZ_ROOMS_URL"
_chosen: dict = {}  # url ("" for memory) -> its store, made once per process


def store():
    """The rooms' store for KVVIZ_ROOMS_URL as it is now (memory when unset)."""
    url = os.environ.get(URL_VARIABLE, "").strip()
    if url not in _chosen:
        if url:
            from kvviz.ui.room_redis import RedisStore  # the redis client only where a server is named

            _chosen[url] = RedisStore(url)
        else:
            _chosen[url] = MemoryStore()
    return _chosen[url]


class MemoryStore:
    """Rooms in one dict behind one lock, shared by this server's sessions; nothing outside the process."""

    shares_lessons = False  # a room holds the teacher's lesson object itself

    def __init__(self):
        self.lock = threading.Lock()
        self.rooms: dict[str, Room] = {}
        self.wrong_guesses: dict[tuple[str, str], list[float]] = {}  # ("session" or "address", name) -> times

    def down(self) -> str | None:
        return None  # memory always answers

    def add(self, room: Room, max_rooms: int, per_client: int) -> tuple[str, int] | None:
        """Keep `room` unless a bound refuses it: (the bound's variable, rooms counted), or ("taken", 0)."""
        with self.lock:
            if room.code in self.rooms:
                return "taken", 0
            if len(self.rooms) >= max_rooms:
                return "KVVIZ_MAX_ROOMS", len(self.rooms)
            mine = sum(r.client == room.client for r in self.rooms.values()) if room.client is not None else 0
            if mine >= per_client:
                return "KVVIZ_ROOMS_PER_CLIENT", mine
            self.rooms[room.code] = room
        return None

    def get(self, code: str) -> Room | None:
        with self.lock:
            return self.rooms.get(code)

    def remove(self, room: Room) -> None:
        with self.lock:
            self.rooms.pop(room.code, None)

    def teachers(self, teacher: str) -> list[Room]:
        with self.lock:
            return [r for r in self.rooms.values() if r.teacher == teacher]

    def sweep(self, now: float, idle: float, gone) -> None:
        """Drop the rooms idle over `idle` seconds and those `gone(room)` says have ended."""
        with self.lock:
            for code, room in list(self.rooms.items()):
                if now - room.touched > idle or gone(room):
                    del self.rooms[code]

    def sit(self, room: Room, seat: str, now: float, most: int) -> bool:
        """`seat` held in `room` (again, or a free one among `most`), seen at `now`; False when full."""
        with self.lock:
            if seat not in room.students:
                room.free_idle_seats(now)
                if len(room.students) >= most:
                    return False
            room.students[seat] = now
        return True

    def leave(self, room: Room, seat: str) -> None:
        with self.lock:
            room.students.pop(seat, None)

    def seats(self, room: Room, now: float) -> int:
        with self.lock:
            room.free_idle_seats(now)
            return len(room.students)

    def publish(self, room: Room, step: int, progress: int, now: float) -> bool:
        """The teacher shows `step`; True when it moved (followers redraw)."""
        with self.lock:
            room.touched = now
            if (room.step, room.progress) == (step, progress):
                return False
            room.step, room.progress = step, progress
            room.version += 1
        return True

    def show_lesson(self, room: Room, lesson) -> bool:
        """A new lesson in the room, its questions gone; True when it is new."""
        with self.lock:
            if room.lesson is lesson:
                return False
            room.lesson, room.questions = lesson, []
            room.version += 1
        return True

    def ask(self, room: Room, question: RoomQuestion) -> str:
        """"asked", "known" (the same id before) or "full" (MAX_QUESTIONS)."""
        with self.lock:
            if room.question(question.id) is not None:
                return "known"
            if len(room.questions) >= MAX_QUESTIONS:
                return "full"
            room.questions.append(question)
            room.version += 1
        return "asked"

    def reveal(self, room: Room, question_id: str, answer: float, step: int | None) -> bool:
        with self.lock:
            question = room.question(question_id)
            if question is None or question.revealed:
                return False
            question.answer = float(answer)
            if step is not None:
                question.target = step
            room.version += 1
        return True

    def answer(self, room: Room, question_id: str, value: float, seat: str) -> str | None:
        """None when kept; else "gone" (no such question), "revealed" or "full" (MAX_ANSWERS seats answered)."""
        with self.lock:
            question = room.question(question_id)
            if question is None:
                return "gone"
            if question.revealed:
                return "revealed"
            if seat not in question.answers and len(question.answers) >= MAX_ANSWERS:
                return "full"
            question.answers[seat] = float(value)
        return None

    def questions(self, room: Room) -> list[RoomQuestion]:
        with self.lock:
            return list(room.questions)

    def lost_room(self, teacher: str) -> str | None:
        """Rooms in this process close only when the teacher or the sweep closes them: none is lost."""
        return None

    def guessed_too_often(self, keys: list[tuple[str, str]], limits: dict, now: float) -> bool:
        with self.lock:
            for key in list(self.wrong_guesses):
                self.wrong_guesses[key] = [t for t in self.wrong_guesses[key] if now - t < GUESS_WINDOW_S]
                if not self.wrong_guesses[key]:
                    del self.wrong_guesses[key]
            return any(len(self.wrong_guesses.get(key, ())) >= limits[key[0]] for key in keys)

    def wrong_guess(self, keys: list[tuple[str, str]], now: float) -> None:
        with self.lock:
            for key in keys:
                self.wrong_guesses.setdefault(key, []).append(now)
