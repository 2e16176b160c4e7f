"""Issue 61 item 8: a room's lesson is bounded like a lesson file. A 1,500-token SmolLM2 lesson wrote a 96 MB
file into Redis, which every other process then refused to replay (its students saw "Room ... has closed" while
the teacher's panel showed it open), and a longer one left a ghost room counted against KVVIZ_MAX_ROOMS for an
hour. A room whose lesson would not fit is refused in a sentence and never kept; one whose lesson grows past it
closes, and its teacher is told why."""

import time

import pytest
import redis

from kvviz.engine.sampling import SamplingParams
from kvviz.lessons import lecture, stepped
from kvviz.lessons.prefill_decode.logic import PrefillLesson, LessonSettings
from kvviz.lessons.prefill_decode.state import STEPS
from kvviz.rooms.codec import MAX_FIELD_CHARS
from kvviz.rooms.redis_store import RedisStore
from kvviz.rooms.types import Room

CODE = "K7QW2MXP"


@pytest.fixture
def lesson(bundled):
    run = PrefillLesson.start(bundled, LessonSettings("The cache holds keys and values.",
                                               SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)))
    run.prefill()
    run.next_token()
    return run


def rooms_counted(url: str) -> int:
    """The rooms the server counts against KVVIZ_MAX_ROOMS."""
    return redis.Redis.from_url(url).zcard("kvviz:rooms")


def test_a_lesson_past_what_a_room_carries_is_refused_in_a_sentence_and_leaves_no_room(redis_url, lesson,
                                                                                       monkeypatch):
    monkeypatch.setattr(stepped, "MAX_LESSON_BYTES", len(STEPS.room_file(lesson)) - 1)  # this lesson is 1 past it
    store = RedisStore(redis_url.url, lesson_files=lecture.lesson_files)
    room = Room(CODE, "teacher", None, "prefill_decode", lesson)
    with pytest.raises(ValueError) as refused:
        store.add(room, 10, 10)
    said = str(refused.value)
    assert said.startswith("This lesson's file is ") and "a room holds a shorter lesson" in said
    assert ". " not in said and said.endswith(".")
    assert store.get(CODE) is None and rooms_counted(redis_url.url) == 0  # no ghost


def test_a_lesson_that_grows_past_it_closes_the_room_and_tells_its_teacher(redis_url, lesson, monkeypatch):
    monkeypatch.setattr(stepped, "MAX_LESSON_BYTES", len(STEPS.room_file(lesson)) + 100)  # fits now, not two steps on
    store = RedisStore(redis_url.url, lesson_files=lecture.lesson_files)
    room = Room(CODE, "teacher", None, "prefill_decode", lesson)
    assert store.add(room, 10, 10) is None and rooms_counted(redis_url.url) == 1
    assert store.publish(room, 1, 1, time.time())
    lesson.next_token()
    lesson.next_token()
    assert not store.publish(room, 3, 3, time.time())
    assert store.get(CODE) is None and rooms_counted(redis_url.url) == 0
    said = store.lost_room("teacher")
    assert said.startswith(f"Room {CODE} closed: this lesson's file is ") and "shorter lesson" in said
    assert store.lost_room("teacher") is None  # told once


def test_a_step_past_a_fields_limit_closes_the_room_rather_than_leave_it_unreadable(redis_url, lesson):
    store = RedisStore(redis_url.url, lesson_files=lecture.lesson_files)
    room = Room(CODE, "teacher", None, "prefill_decode", lesson)
    assert store.add(room, 10, 10) is None
    room.payload = {"stage": "0" * MAX_FIELD_CHARS}  # no follower would read it (kvviz.rooms.codec.decode_json)
    assert not store.publish(room, 1, 1, time.time())
    assert store.get(CODE) is None and rooms_counted(redis_url.url) == 0
    assert "one step of this lesson is" in store.lost_room("teacher")


def test_a_room_on_a_page_no_lesson_follows_reads_as_gone(redis_url, lesson):
    """Issue 61 item 9: a room whose page was set to one no lesson has stopped its followers silently, while the
    teacher's panel went on counting them; it reads as gone (the follower is told the room closed)."""
    teacher, follower = (RedisStore(redis_url.url, lesson_files=lecture.lesson_files) for _ in range(2))
    room = Room(CODE, "teacher", None, "prefill_decode", lesson)
    assert teacher.add(room, 10, 10) is None and follower.get(CODE) is not None
    redis.Redis.from_url(redis_url.url).hset(f"kvviz:room:{CODE}", "page", "no_such_page")
    assert follower.get(CODE) is None


def test_a_room_whose_teacher_left_is_freed_though_no_page_asks_for_rooms(monkeypatch):
    """Issue 61: rooms of closed pages freed within a minute. A room was swept only when some page asked for rooms;
    on another app process nobody did, and a closed teacher's room counted against KVVIZ_MAX_ROOMS for an hour.
    The process sweeps on its own every rooms.SWEEP_EVERY_S (20 s; a fifth of a second here)."""
    from kvviz.rooms.store import shared_store
    from kvviz.ui import rooms

    monkeypatch.delenv("KVVIZ_ROOMS_URL", raising=False)
    monkeypatch.setattr(rooms, "SWEEP_EVERY_S", 0.2)
    lesson = type("Ended", (), {"records": [], "released": False})()  # a lesson object as live_lessons marks one
    room = rooms.open_room(lesson, "prefill_decode")
    store = shared_store()
    assert store.get(room.code) is not None
    lesson.released = True  # its teacher's page closed: kvviz.ui.live_lessons released the lesson
    deadline = time.time() + 30  # a sweeper another test started may be asleep for its 20 s
    while store.get(room.code) is not None and time.time() < deadline:
        time.sleep(0.05)
    assert store.get(room.code) is None


def test_a_process_whose_first_followers_arrive_together_makes_one_store_and_one_listener(redis_url):
    """Issue 62: 30 followers' first pages on a fresh app process each made a RedisStore of their own, each with a
    listener, so every teacher's step woke every follower 30 times (about 7 fragment runs a second each, 75 ms of
    CPU a follower a step). The stores' cache is filled once, under a lock, whoever asks first."""
    import threading

    import kvviz.rooms.store

    kvviz.rooms.store._chosen.pop(redis_url.url, None)
    before = {thread.ident for thread in threading.enumerate() if thread.name == "kvviz-rooms-listener"}
    start, made = threading.Barrier(24), []

    def first_page() -> None:
        start.wait()
        made.append(kvviz.rooms.store.shared_store())

    pages = [threading.Thread(target=first_page) for _ in range(24)]
    for page in pages:
        page.start()
    for page in pages:
        page.join()
    assert len({id(store) for store in made}) == 1
    listeners = {thread.ident for thread in threading.enumerate() if thread.name == "kvviz-rooms-listener"} - before
    assert len(listeners) == 1
