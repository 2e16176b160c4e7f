"""Rooms on the Paged cache and batching and Speculative decoding lessons (issue 27), under AppTest:
a teacher's run followed by students who see the same step's numbers, move nobody, answer the
teacher's question and take the run over; a room's link opened on another lesson's page."""

import json

import pytest
from streamlit.testing.v1 import AppTest

from kvviz.rooms.store import shared_store
from kvviz.ui import rooms

from open_room import room_of
from app_tests import ROOT, click_cleanly, one_sentence, open_lesson

PAGED, SPECULATIVE = "lessons/paged_batching.py", "lessons/speculative.py"


def student(code: str, path: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.run()
    at.query_params["room"] = code  # the link opened at `path` (the home page would go to the room itself)
    at.switch_page(path).run()
    assert not at.exception
    return at


def numbers(at) -> dict[str, tuple[str, str]]:
    """Every metric on the page: label -> (value, delta)."""
    return {m.label: (m.value, m.delta) for m in at.metric}


@pytest.fixture()
def close_rooms():
    yield
    store = shared_store()
    for room in filter(None, map(store.get, store.codes())):
        rooms.close_room(room)


@pytest.fixture()
def paged_teacher(close_rooms):
    at = open_lesson(PAGED)
    click_cleanly(at, "Start")
    click_cleanly(at, "Step")
    click_cleanly(at, "Step")
    click_cleanly(at, "Open a room for the class")
    return at


@pytest.fixture()
def speculative_teacher(close_rooms):
    at = open_lesson(SPECULATIVE)
    click_cleanly(at, "Start")
    click_cleanly(at, "Step")
    click_cleanly(at, "Open a room for the class")
    return at


def test_paged_students_follow_the_teachers_step_and_numbers_and_move_nobody(paged_teacher):
    teacher = paged_teacher
    room = room_of(teacher)
    assert room.page == "paged_batching" and room.step == 2
    assert any(code.value.endswith(f"/paged_batching?room={room.code}") for code in teacher.code)
    pupils = [student(room.code, PAGED) for _ in range(2)]
    for pupil in pupils:
        lesson = pupil.session_state["paged_run"]
        assert lesson.engine is None and len(lesson.records) == 3  # a replay of the teacher's steps: no model
        assert numbers(pupil) == numbers(teacher) and len(numbers(pupil)) == 5
        assert not any(b.label in ("Step", "Run to the end", "Commit") for b in pupil.button)  # only the teacher steps
        assert any(f"Following room {room.code}" in i.value for i in pupil.info)
    assert len(room.students) == 2
    pupils[0].slider(key="paged_view_step").set_value(0).run()  # one student looks back
    assert pupils[0].session_state["paged_view_step"] == 0 and room.step == 2
    pupils[1].run()
    assert pupils[1].session_state["paged_view_step"] == 2 and teacher.session_state["paged_view_step"] == 2
    click_cleanly(teacher, "Step")
    payload = room.payload  # one for every follower: the step that moved, its stage data already JSON
    stage = json.loads(payload["stage"])
    assert payload["step"] == 3 and stage["steps_from"] == 3 and len(stage["steps"]) == 1
    assert stage["steps"][0]["sentence"] and payload["sentence"] is None  # the stage says this lesson's sentence
    for pupil, shown in zip(pupils, (0, 3)):
        pupil.run()  # the page's rerun: the views follow, but for the student who looked back
        assert len(pupil.session_state["paged_run"].records) == 4
        assert pupil.session_state["paged_view_step"] == shown
    click_cleanly(pupils[0], "Catch up")
    for pupil in pupils:
        assert pupil.session_state["paged_view_step"] == 3 and numbers(pupil) == numbers(teacher)
    rooms.close_room(room)  # the teacher closed it: one sentence, and the student's page runs on its own
    pupils[0].run()
    assert pupils[0].error[0].value == f"Room {room.code} has closed; you can run the lesson on your own here."
    assert one_sentence(pupils[0].error[0].value) and pupils[0].session_state.get("paged_run") is None
    assert any(b.label == "Start" for b in pupils[0].button)


def test_a_paged_question_goes_through_the_room_and_is_revealed_exactly(paged_teacher):
    teacher = paged_teacher
    room = room_of(teacher)
    teacher.selectbox(key="paged_question_request").select_index(0).run()
    click_cleanly(teacher, "Commit")
    question = room.open_question
    assert question is not None and "Which physical block id" in question.text and question.exact
    pupils = [student(room.code, PAGED) for _ in range(2)]
    free = teacher.session_state["paged_run"]
    for pupil, guess in zip(pupils, (0, 39)):
        assert pupil.number_input(key="room_answer").label == "Your answer (block id)"
        pupil.number_input(key="room_answer").set_value(guess)
        next(b for b in pupil.button if b.label == "Send my answer").click().run()
        assert not pupil.error
    teacher.run()
    assert any("2 answered so far" in c.value for c in teacher.caption)
    for _ in range(12):  # until the request is given its next block
        question = room.question(question.id)  # as the store keeps it now
        if question.revealed:
            break
        click_cleanly(teacher, "Step")
    question = room.question(question.id)
    assert question.revealed and free.records[question.target].step == question.target
    right = sum(guess == question.answer for guess in (0, 39))
    shown = next(m.value for m in teacher.markdown if m.value.startswith("**Room's answers**"))
    assert f"The engine: **{question.answer:,.0f} block id**; {right} of 2 answered exactly that." in shown
    pupils[1].run()
    assert any(f"The engine's answer is **{question.answer:,.0f} block id**" in c.value and "you said 39" in c.value
               for c in pupils[1].caption)
    answers = teacher.session_state["paged_run"].room_answers  # kept with the lesson, for its file
    assert [(a.room, a.engine, a.answers, a.exact) for a in answers] == [
        (room.code, question.answer, [0.0, 39.0], True)]


def test_a_paged_student_takes_over_at_the_rooms_step(paged_teacher):
    room = room_of(paged_teacher)
    pupil = student(room.code, PAGED)
    teachers = room.lesson
    click_cleanly(pupil, "Take over")
    lesson = pupil.session_state["paged_run"]
    assert lesson.engine is not None and lesson is not teachers and len(lesson.records) == 3
    assert [r.block_table for s in lesson.records for r in s.requests] == [
        r.block_table for s in teachers.records for r in s.requests]  # the same steps, run again
    assert pupil.session_state.get("room_code") is None and not room.students
    assert numbers(pupil) == numbers(paged_teacher) and not pupil.warning
    click_cleanly(pupil, "Step")  # its own now; the teacher's run did not move
    assert len(pupil.session_state["paged_run"].records) == 4 and len(teachers.records) == 3 and room.step == 2


def test_speculative_students_follow_to_the_end_and_take_over(speculative_teacher):
    teacher = speculative_teacher
    room = room_of(teacher)
    assert room.page == "speculative" and room.step == 1
    pupil = student(room.code, SPECULATIVE)
    assert pupil.session_state["spec_run"].engine is None
    assert numbers(pupil) == numbers(teacher) and "Forward passes" in numbers(pupil)
    assert not any(b.label in ("Step", "Run to the end") for b in pupil.button)
    click_cleanly(teacher, "Run to the end")  # plain decoding goes on after the drafts' run: followers see it too
    pupil.run()
    assert numbers(pupil) == numbers(teacher)
    finished = [s.value for s in teacher.success if s.value.startswith("Both finished")]
    assert finished and [s.value for s in pupil.success if s.value.startswith("Both finished")] == finished
    click_cleanly(pupil, "Take over")
    own = pupil.session_state["spec_run"]
    assert own.engine is not None and len(own.records) == len(room.lesson.records)
    assert own.output(len(own.records) - 1) == room.lesson.output(len(room.lesson.records) - 1)
    assert numbers(pupil)["Forward passes"] == numbers(teacher)["Forward passes"]


def test_a_room_link_on_another_lessons_page_goes_to_the_rooms_page(paged_teacher):
    room = room_of(paged_teacher)
    pupil = student(room.code, "lessons/prefill_decode.py")  # the link's path was edited: the wrong lesson
    assert pupil.session_state.get("room_code") == room.code
    assert pupil.session_state["paged_run"].engine is None and pupil.session_state.get("lesson_run") is None
    assert any(f"Following room {room.code}" in i.value for i in pupil.info)


@pytest.mark.parametrize("path", ["lessons/memory_bill.py", "lessons/home.py"])
def test_a_room_link_on_a_page_without_rooms_goes_to_the_rooms_lesson(paged_teacher, path):
    room = room_of(paged_teacher)
    pupil = student(room.code, path)  # the link's path was edited to a page no room runs on
    assert pupil.session_state.get("room_code") == room.code and room.students
    assert any(f"Following room {room.code}" in i.value for i in pupil.info)
    assert pupil.session_state["paged_run"].engine is None  # the room's copy, not a run of its own
    assert pupil.query_params["room"] == room.code and len(room.students) == 1  # one seat, kept on reload


@pytest.mark.parametrize("path", ["lessons/memory_bill.py", "lessons/model_lab.py"])
def test_a_wrong_room_code_on_a_page_without_rooms_gets_one_sentence(path, close_rooms):
    pupil = student("NOSUCH", path)
    assert len(pupil.error) == 1 and "No open room has a seat for the code NOSUCH" in pupil.error[0].value
    assert one_sentence(pupil.error[0].value)
    pupil.run()  # the page goes on as it was; the sentence was said once
    assert not pupil.error and not pupil.exception


@pytest.mark.parametrize("path, run_button", [(PAGED, "Start"), (SPECULATIVE, "Start")])
def test_a_wrong_code_gets_one_sentence_and_a_run_of_ones_own(path, run_button, close_rooms):
    pupil = student("NOSUCH", path)
    assert len(pupil.error) == 1 and "No open room has a seat for the code NOSUCH" in pupil.error[0].value
    assert one_sentence(pupil.error[0].value)
    click_cleanly(pupil, run_button)
    assert not pupil.error
