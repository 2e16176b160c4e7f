"""Room seats (kvviz.ui.rooms, issue 35 item 5-6): a seat per student, not per tab; idle seats freed;
one sentence for a wrong code and a full room; wrong codes rate-limited; rooms bounded per address;
an answer wakes no follower; a step's one payload (issue 34)."""

import time

import pytest
import streamlit as st

import kvviz.rooms.store
from kvviz.rooms.store import shared_store
from kvviz.rooms.types import CODE_LENGTH, CODE_LETTERS, GUESSES, Room, valid_seat
from kvviz.ui import room_wake, rooms


class Lesson:  # what a room reads of a lesson here: that it is not released
    released = False


@pytest.fixture()
def room(monkeypatch):
    monkeypatch.setenv("KVVIZ_ROOM_STUDENTS", "3")
    code = "K7QW2MXP"
    store = shared_store()  # the memory store: KVVIZ_ROOMS_URL is unset here
    store.add(Room(code, "teacher", None, "prefill_decode", Lesson(), client="10.0.0.9"), 10, 10)
    yield store.get(code)
    for other in filter(None, map(store.get, store.codes())):
        store.remove(other)
    kvviz.rooms.store._chosen.clear()  # a fresh store (and no wrong codes counted) for the next test


def fresh(room):
    return shared_store().get(room.code)


def seated(found, room) -> bool:
    """take_seat gave `room` back (a snapshot of it), not a sentence."""
    return not isinstance(found, str) and found.code == room.code


def test_a_reload_takes_the_same_seat(room):
    seat = rooms.new_seat()
    assert valid_seat(seat) and not valid_seat("x") and not valid_seat(None)
    for _ in range(3):  # one student reloading three times
        assert seated(rooms.take_seat("k7qw 2mxp", seat), room)
    assert len(fresh(room).students) == 1
    others = [rooms.take_seat(room.code, rooms.new_seat()) for _ in range(2)]
    assert all(seated(found, room) for found in others) and rooms.seats(room) == 3


def test_a_full_room_and_a_wrong_code_get_the_same_sentence(room):
    for _ in range(3):
        rooms.take_seat(room.code, rooms.new_seat())
    full = rooms.take_seat(room.code, rooms.new_seat())
    wrong = rooms.take_seat("ZZZZZZZZ", rooms.new_seat())
    assert isinstance(full, str) and full == wrong.replace("ZZZZZZZZ", room.code)
    assert "full" in full and "closed" in full  # it names both, telling neither


def test_a_seat_unseen_for_a_while_is_freed(room, monkeypatch):
    monkeypatch.setenv("KVVIZ_SEAT_IDLE_S", "5")
    seats = [rooms.new_seat() for _ in range(3)]
    for seat in seats:
        rooms.take_seat(room.code, seat)
    shared_store().sit(room, seats[0], time.time() - 10, 3)  # that tab was last seen ten seconds ago
    newcomer = rooms.new_seat()
    assert seated(rooms.take_seat(room.code, newcomer), room)
    assert seats[0] not in fresh(room).students and rooms.seats(room) == 3
    assert not rooms.seen(room, seats[0])  # the closed tab came back to a full room: no seat
    rooms.leave(room, seats[1])
    assert rooms.seen(room, seats[0]) and rooms.seats(room) == 3


def test_wrong_codes_are_rate_limited_per_session_and_never_per_address(room):
    """Issue 61 item 3: 300 tabs from one address trying random codes locked every student behind that address
    out. A session waits after its own wrong codes; a classmate's session joins at once."""
    for _ in range(GUESSES["session"]):
        assert isinstance(rooms.take_seat("ZZZZZZZZ", rooms.new_seat(), "one session"), str)
    refused = rooms.take_seat(room.code, rooms.new_seat(), "one session")
    assert isinstance(refused, str) and refused.startswith("Too many room codes")
    for guess in range(300):  # a script's tabs, all behind the class's one address
        assert isinstance(rooms.take_seat("ZZZZZZZZ", rooms.new_seat(), f"script tab {guess}"), str)
    assert seated(rooms.take_seat(room.code, rooms.new_seat(), "a student"), room)


def test_a_code_is_long_enough_that_guessing_it_is_infeasible():
    codes, rooms_open = len(CODE_LETTERS) ** CODE_LENGTH, 10
    guesses_a_minute = 50 * 60 * GUESSES["session"]  # a script opening 50 sessions a second
    assert codes / rooms_open / 2 / guesses_a_minute / 60 / 24 / 365 > 5  # years, on average, to find one room


def test_a_full_room_refuses_without_locking_its_class_out(room, monkeypatch):
    """A class behind one address (a school's router, a reverse proxy): 200 tabs on the real link in a
    full room were refused as full, and counted as wrong codes, so the address stayed locked after seats
    freed. Now a full room's refusals count for nothing, and no limit is an address's."""
    monkeypatch.setenv("KVVIZ_ROOM_STUDENTS", "2")
    taken = [rooms.new_seat() for _ in range(2)]
    for index, seat in enumerate(taken):
        assert seated(rooms.take_seat(room.code, seat, f"seated {index}"), room)
    for tab in range(200):
        refused = rooms.take_seat(room.code, rooms.new_seat(), f"tab {tab}")
        assert isinstance(refused, str) and refused.startswith("No open room has a seat")
    for student in range(60):  # a class's typos: each student one wrong code
        assert isinstance(rooms.take_seat("ZZZZZZZZ", rooms.new_seat(), f"typo {student}"), str)
    rooms.leave(room, taken[0])
    assert seated(rooms.take_seat(room.code, rooms.new_seat(), "the next student"), room)


def test_rooms_are_bounded_per_address(room, monkeypatch):
    monkeypatch.setenv("KVVIZ_ROOMS_PER_CLIENT", "1")
    st.session_state[rooms.SESSION_KEY] = "a student's tab"
    with pytest.raises(ValueError, match="KVVIZ_ROOMS_PER_CLIENT"):
        rooms.open_room(Lesson(), "prefill_decode", "10.0.0.9")
    assert rooms.open_room(Lesson(), "prefill_decode", "10.0.0.10").client == "10.0.0.10"


def test_an_answer_wakes_no_follower(room):
    rooms.ask(room, "q", "How many blocks?", "blocks", 3)
    seat = rooms.new_seat()
    rooms.take_seat(room.code, seat)
    version = fresh(room).version
    for value in range(25):  # a student changing their answer 25 times
        assert rooms.answer(room, "q", value, seat) is None
    assert fresh(room).version == version and fresh(room).question("q").answers == {seat: 24.0}
    rooms.reveal(room, "q", 24)
    assert fresh(room).version == version + 1  # the reveal wakes them


@pytest.mark.parametrize("value, sentence", [(-5.0, "from 0 up"), (float("nan"), "from 0 up"),
                                             (1e15, "below 1,000,000,000,000,000")])
def test_an_answer_out_of_range_gets_the_sentence_that_fits_it(room, value, sentence):
    rooms.ask(room, "q", "How many bytes?", "bytes", 3)
    seat = rooms.new_seat()
    rooms.take_seat(room.code, seat)
    assert sentence in rooms.answer(room, "q", value, seat)
    assert rooms.answer(room, "q", 1e15 - 1, seat) is None and fresh(room).question("q").answers == {seat: 1e15 - 1}


def test_a_step_keeps_one_payload_for_every_follower_and_a_new_lesson_drops_it(room):
    payload = {"lesson": "a1", "step": 1, "steps_from": 1, "sentence": None, "stage": '{"steps_from":1,"steps":[{}]}'}
    version = room.version
    rooms.publish(room, 1, payload=payload)
    assert room.payload is payload and room.step == 1 and room.version == version + 1
    rooms.publish(room, 1)  # the teacher's page ran again at the same step: nothing to wake for
    assert room.payload is payload and room.version == version + 1
    rooms.show_lesson(room, Lesson())  # Prefill again: the old lesson's steps are no follower's news
    assert room.payload == {} and room.version == version + 2
    assert room_wake.changed(room.code) == 0 and room_wake.followers(room.code) == 0  # no session follows here
