"""Issue 51 item 6: what a room keeps in Redis, damaged by hand (HSET, DEL, another program), gives no
traceback: the room reads as gone for its followers, a bad answer is dropped, a teacher whose room vanished
is told, and a question keeps at most MAX_ANSWERS answers on both stores."""

import json

import pytest
import redis

from kvviz.rooms.redis_store import RedisStore
from kvviz.rooms.store import MemoryStore
from kvviz.rooms.types import Room, RoomQuestion
from kvviz.ui import rooms

from store_rooms import FileLesson, opened


@pytest.mark.parametrize("field, value", [
    ("step", "abc"), ("questions", "not json"), ("payload", "{"), ("questions", json.dumps([{"id": 1}])),
    ("questions", json.dumps([{"id": "q", "text": "t", "unit": "u", "target": "three"}])),
    ("questions", "[" * 100_000), ("opened", "nan"), ("version", ""), ("payload", "[1, 2]"),
    ("payload", json.dumps({"x": 1})),  # issue 61 item 9: followers showed an error box
    ("payload", json.dumps({"lesson": "a", "step": -2, "progress": 0, "steps_from": 0, "sentence": "", "stage": "{}"})),
    ("payload", json.dumps({"lesson": "a", "step": 1, "progress": 0, "steps_from": 0, "sentence": 5, "stage": "{}"})),
])
def test_a_damaged_field_reads_as_a_gone_room_not_a_traceback(redis_url, field, value):
    teacher, follower = RedisStore(redis_url.url), RedisStore(redis_url.url)
    room = opened(teacher, FileLesson([{"step": 0}]))
    assert follower.get(room.code) is not None
    redis.Redis.from_url(redis_url.url).hset(f"kvviz:room:{room.code}", field, value)
    assert follower.get(room.code) is None and teacher.get(room.code) is None
    assert follower.down() is None  # the server answers: nothing says it is down
    said = teacher.lost_room("teacher")  # the teacher's process closed it and says why, once
    assert said.startswith(f"Room {room.code} closed: its data on the class room server was changed there")
    assert not redis.Redis.from_url(redis_url.url).exists(f"kvviz:room:{room.code}")
    seat = rooms.new_seat()
    assert follower.answer(room, "q", 3.0, seat) in ("gone", None)  # no traceback on the answer's path either


def test_a_deleted_teacher_field_and_a_wrong_type_seats_key(redis_url):
    store, raw = RedisStore(redis_url.url), redis.Redis.from_url(redis_url.url)
    room = opened(store, FileLesson())
    raw.hdel(f"kvviz:room:{room.code}", "teacher")
    assert store.get(room.code) is None
    other = opened(store, FileLesson())
    raw.delete(f"kvviz:room:{other.code}:seats")
    raw.set(f"kvviz:room:{other.code}:seats", "not a sorted set")
    assert store.get(other.code) is None and store.down() is None  # wrong type: the room, not the server
    assert store.sit(other, rooms.new_seat(), 0.0, 60) is False


def test_a_bad_answer_is_dropped_and_the_others_kept(redis_url):
    store, raw = RedisStore(redis_url.url), redis.Redis.from_url(redis_url.url)
    room = opened(store, FileLesson())
    assert store.ask(room, RoomQuestion("q", "How many blocks?", "blocks", 3)) == "asked"
    seat = rooms.new_seat()
    assert store.answer(room, "q", 7.0, seat) is None
    answers = f"kvviz:room:{room.code}:answers"
    raw.hset(answers, "not json", "1")
    raw.hset(answers, json.dumps(["q", rooms.new_seat()]), "many")
    raw.hset(answers, json.dumps([1, 2, 3]), "2")
    assert store.get(room.code).question("q").answers == {seat: 7.0}


def test_a_room_the_server_lost_is_told_to_its_teacher_once(redis_url):
    store = RedisStore(redis_url.url)
    room = opened(store, FileLesson())
    redis.Redis.from_url(redis_url.url).flushall()  # a restart without persistence
    assert store.teachers("teacher") == []
    said = store.lost_room("teacher")
    assert (said.startswith(f"Room {room.code} is gone from the class room server")
            and store.lost_room("teacher") is None)


@pytest.mark.parametrize("kind", ["memory", "redis"])
def test_a_question_keeps_at_most_max_answers(redis_url, kind, monkeypatch):
    """1,010 join-answer-leave cycles gave 1,011 answers, and the teacher's file failed its own replay."""
    for module in ("kvviz.rooms.types", "kvviz.rooms.store", "kvviz.rooms.redis_store", "kvviz.rooms.codec"):
        monkeypatch.setattr(f"{module}.MAX_ANSWERS", 5)
    store = MemoryStore() if kind == "memory" else RedisStore(redis_url.url)
    room = opened(store, FileLesson()) if kind == "redis" else Room("K7QW2MXP", "t", None, "p", FileLesson())
    if kind == "memory":
        store.add(room, 10, 10)
    store.ask(room, RoomQuestion("q", "How many blocks?", "blocks", 3))
    seats = [rooms.new_seat() for _ in range(6)]
    assert [store.answer(room, "q", 1.0, seat) for seat in seats] == [None] * 5 + ["full"]
    assert store.answer(room, "q", 2.0, seats[0]) is None  # a student already counted may change their answer
    assert len(store.get(room.code).question("q").answers) == 5
