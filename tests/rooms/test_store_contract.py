"""Issue 53: both room stores keep one declared contract (kvviz.rooms.types.RoomStore): every case here runs on
the memory store and on a Redis store (a real redis-server started by the test), with the same answers and the
same types. `get` gives snapshots; changes go through the methods, which find the room by its code."""

import time

import pytest

from kvviz.rooms.redis_store import RedisStore
from kvviz.rooms.store import MemoryStore
from kvviz.rooms.types import GUESS_WINDOW_S, MAX_QUESTIONS, Room, RoomQuestion, RoomStore
from kvviz.ui.rooms import new_seat

from redis_server import REDIS_SERVER, running_redis

PAGE = "contract_test"



class Lesson:
    released = False


@pytest.fixture(params=["memory", "redis"])
def store(request) -> RoomStore:
    if request.param == "memory":
        yield MemoryStore()
        return
    if not REDIS_SERVER.exists():
        pytest.skip("redis-server is not installed (/usr/bin/redis-server; scripts/test.sh installs it)")
    with running_redis() as server:
        yield RedisStore(server.url, lesson_files=lambda page: (lambda lesson: "{}", lambda text: Lesson()))


def opened(store: RoomStore, code: str = "K7QW2MXP", teacher: str = "teacher", client: str | None = None) -> Room:
    room = Room(code, teacher, None, PAGE, Lesson(), client=client)
    assert store.add(room, 10, 10) is None
    return store.get(code)


def seat() -> str:
    return new_seat()


def test_both_stores_declare_the_interface(store):
    declared = {name for name in vars(RoomStore) if not name.startswith("_")}
    assert declared <= set(dir(store)), declared - set(dir(store))
    assert store.down() is None


def test_rooms_open_up_to_their_bounds_and_close(store):
    room = opened(store, client="10.0.0.9")
    assert isinstance(room, Room) and room.page == PAGE and room.code in store.codes()
    assert store.add(Room("K7QW2MXP", "t", None, PAGE, Lesson()), 10, 10) == ("taken", 0)
    assert store.add(Room("K7QW2N", "t", None, PAGE, Lesson(), client="10.0.0.9"), 10, 1) == \
        ("KVVIZ_ROOMS_PER_CLIENT", 1)
    assert store.add(Room("K7QW2P", "t", None, PAGE, Lesson()), 1, 10) == ("KVVIZ_MAX_ROOMS", 1)
    assert [r.code for r in store.teachers("teacher")] == ["K7QW2MXP"] and store.teachers("nobody") == []
    store.remove(room)
    assert store.get("K7QW2MXP") is None and store.codes() == [] and store.lost_room("teacher") is None


def test_a_snapshot_changed_by_a_page_changes_nothing_kept(store):
    room = opened(store)
    room.students["not a real seat"] = 1.0
    room.step = 99
    kept = store.get(room.code)
    assert kept.students == {} and kept.step == 0 and kept is not room


def test_seats_are_taken_freed_and_bounded(store):
    room, now = opened(store), time.time()
    first, second, third = seat(), seat(), seat()
    assert store.sit(room, first, now, 2) and store.sit(room, second, now, 2)
    assert not store.sit(room, third, now, 2)  # full
    assert store.sit(room, first, now + 1, 2)  # the same student again
    assert store.seats(room, now) == 2 and set(store.get(room.code).students) == {first, second}
    store.leave(room, second)
    assert store.seats(room, now) == 1 and store.sit(room, third, now, 2)
    store.remove(room)
    assert not store.sit(room, seat(), now, 2) and store.seats(room, now) == 0  # gone: no seat, no error


def test_a_step_moves_the_room_once_and_carries_its_payload(store):
    room, now = opened(store), time.time()
    payload = {"lesson": "t1", "step": 3, "progress": 0, "steps_from": 3, "sentence": "Decode step 3.",
               "stage": '{"steps": [1, 2, 3]}'}  # as kvviz.lessons.room_student.step_payload builds it
    room.payload = dict(payload)
    version = store.get(room.code).version
    assert store.publish(room, 3, 0, now) and room.step == 3 and room.version == version + 1
    assert not store.publish(room, 3, 0, now)  # the same step: nothing to redraw
    kept = store.get(room.code)
    assert (kept.step, kept.version, kept.payload) == (3, version + 1, payload)


def test_questions_are_asked_answered_and_revealed(store):
    room, answerer = opened(store), seat()
    question = RoomQuestion("q1", "How many blocks?", "blocks", 3)
    assert store.ask(room, question) == "asked" and store.ask(room, question) == "known"
    assert store.answer(room, "q1", 4.0, answerer) is None and store.answer(room, "nope", 1.0, answerer) == "gone"
    asked = store.questions(room)
    assert [type(q) for q in asked] == [RoomQuestion] and asked[0].answers == {answerer: 4.0}
    assert store.reveal(room, "q1", 3.0, 5) and not store.reveal(room, "q1", 3.0, 5)
    assert store.answer(room, "q1", 2.0, answerer) == "revealed"
    kept = store.get(room.code).question("q1")
    assert (kept.answer, kept.target, kept.revealed) == (3.0, 5, True)


def test_a_room_asks_at_most_its_questions_and_a_new_lesson_clears_them(store):
    room = opened(store)
    for number in range(MAX_QUESTIONS):
        assert store.ask(room, RoomQuestion(f"q{number}", "?", "bytes", 1)) == "asked"
    assert store.ask(room, RoomQuestion("one more", "?", "bytes", 1)) == "full"
    lesson = Lesson()
    assert store.show_lesson(room, lesson) and not store.show_lesson(room, lesson)
    assert store.questions(room) == [] and store.get(room.code).lesson is not None


def test_a_room_gone_answers_as_gone_never_with_an_error(store):
    room = opened(store)
    store.remove(room)
    assert store.ask(room, RoomQuestion("q", "?", "bytes", 1)) == "gone"
    assert store.answer(room, "q", 1.0, seat()) == "gone" and not store.reveal(room, "q", 1.0, None)
    assert not store.publish(room, 2, 0, time.time()) and store.questions(room) == []
    assert store.get(room.code) is None  # and asking wrote nothing that reopens it


def test_wrong_codes_are_counted_per_key_within_the_window(store):
    now, keys, limits = time.time(), [("session", "s1"), ("address", "10.0.0.9")], {"session": 2, "address": 3}
    assert not store.guessed_too_often(keys, limits, now)
    store.wrong_guess(keys, now)
    store.wrong_guess(keys, now)
    assert store.guessed_too_often(keys, limits, now)  # the session's two
    assert not store.guessed_too_often([("session", "s2"), ("address", "10.0.0.9")], limits, now)
    assert not store.guessed_too_often(keys, limits, now + GUESS_WINDOW_S + 1)  # the window passed


def test_the_sweep_closes_the_rooms_whose_teacher_left(store):
    """Idle rooms close in the sweep here, or expire on the Redis server on their own (KVVIZ_ROOM_IDLE_S)."""
    for code in ("BBBBBBBB", "CCCCCCCC"):
        opened(store, code)
    store.sweep(time.time(), 3600, lambda room: room.code == "BBBBBBBB")
    assert store.get("BBBBBBBB") is None and store.get("CCCCCCCC") is not None
