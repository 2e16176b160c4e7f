"""A room (issue 27) under AppTest: a teacher's Prefill and decode lesson followed by students."""

import io
import json
import weakref

import pytest
import qrcode
from PIL import Image
from streamlit.testing.v1 import AppTest

from kvviz.lessons import room_address
from kvviz.lessons.prefill_decode.stage import stage_data
from kvviz.rooms.store import shared_store
from kvviz.ui import live_lessons, rooms

from open_room import room_of
from app_tests import ROOT, click, one_sentence, open_lesson


def student(code: str, seat: str | None = None) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.run()
    at.query_params["room"] = code  # the link opened at its page (the home page would go there itself)
    if seat is not None:
        at.query_params["seat"] = seat
    at.switch_page("lessons/prefill_decode.py").run()
    return at


@pytest.fixture()
def teacher():
    at = open_lesson("lessons/prefill_decode.py")
    click(at, "Prefill")
    click(at, "Next token")
    click(at, "Next token")
    click(at, "Open a room for the class")
    yield at
    store = shared_store()
    for room in filter(None, map(store.get, store.codes())):
        rooms.close_room(room)


def test_students_follow_the_teachers_step_without_a_model_and_choose_their_own_view(teacher):
    room = room_of(teacher)
    assert room is not None and room.step == 2
    assert any(code.value.endswith(f"/prefill_decode?room={room.code}") for code in teacher.code)
    pupils = [student(room.code) for _ in range(3)]
    for pupil in pupils:
        assert not pupil.exception and not pupil.error
        lesson = pupil.session_state["lesson_run"]
        assert lesson.engine is None and lesson.replay and len(lesson.records) == 3  # a replay of the teacher's steps
        assert pupil.success[0].value.startswith("**Decode step 2.**")
        assert not any(b.label == "Next token" for b in pupil.button)  # only the teacher moves it
    assert len(room.students) == 3
    pupils[0].radio(key="lesson_view").set_value("Work saved").run()  # one student's own view
    click(teacher, "Next token")
    payload = room.payload  # built once for every follower: the step that moved, not the lesson
    assert json.loads(json.dumps(payload)) == payload
    assert payload["step"] == 3 and payload["sentence"].startswith("**Decode step 3.**")
    stage = json.loads(payload["stage"])
    assert stage["steps_from"] == 3 and len(stage["steps"]) == 1 and "presenter" not in stage
    assert len(payload["stage"]) < len(json.dumps(stage_data(room.lesson, 3)))
    for pupil in pupils:
        pupil.run()  # the page's rerun (the server wakes only the stage's fragment for a step): the views follow
        assert pupil.success[0].value.startswith("**Decode step 3.**")
        assert pupil.session_state["lesson_view_step"] == 3
    pupils[0].slider(key="lesson_view_step").set_value(1).run()  # a student looks back: that step stays theirs
    click(teacher, "Next token")
    pupils[0].run()
    assert pupils[0].session_state["lesson_view_step"] == 1 and len(pupils[0].session_state["lesson_run"].records) == 5
    assert any("stay where they are until you press" in c.value for c in pupils[0].caption)
    click(pupils[0], "Catch up")
    assert pupils[0].success[0].value.startswith("**Decode step 4.**")
    assert not any("stay where they are" in c.value for c in pupils[0].caption)
    assert pupils[0].radio(key="lesson_view").value == "Work saved"
    assert pupils[1].radio(key="lesson_view").value == "Cache per layer" == teacher.radio(key="lesson_view").value


def test_the_rooms_answers_are_counted_and_shown_at_the_reveal(teacher):
    room = room_of(teacher)
    teacher.selectbox(key="lesson_question_kind").set_value("blocks_after_next").run()
    click(teacher, "Ask")
    pupils = [student(room.code) for _ in range(2)]
    question = room.open_question
    assert question is not None and "How many blocks" in question.text
    for pupil, guess in zip(pupils, (2, 7)):
        pupil.number_input(key="room_answer").set_value(guess)
        next(b for b in pupil.button if b.label == "Send my answer").click().run()
        assert not pupil.error
        pupil.run()  # issue 33 item 11: the next refresh still says what was sent
        assert any(s.value.startswith(f"Sent: {guess} blocks.") for s in pupil.success)
        assert any(b.label == "Change my answer" for b in pupil.button)
    teacher.run()
    assert any("2 answered so far" in c.value for c in teacher.caption)
    click(teacher, "Next token")  # the target step: the engine's record answers
    question = room.question(question.id)  # as the store keeps it now
    assert question.revealed
    shown = next(m.value for m in teacher.markdown if m.value.startswith("**Room's answers**"))
    right = sum(abs(g - question.answer) <= 0.01 * max(question.answer, 1) for g in (2, 7))
    assert f"{right} of 2 answered within 1%" in shown
    pupils[0].run()
    assert any(f"The engine's answer is **{question.answer:,.0f} blocks**" in c.value and "you said 2" in c.value
               for c in pupils[0].caption)


def test_take_over_gives_a_lesson_of_ones_own_at_the_rooms_step(teacher):
    room = room_of(teacher)
    pupil = student(room.code)
    teacher_texts = room.lesson.token_texts[:room.lesson.num_tokens_at(2) + 1]
    click(pupil, "Take over")
    lesson = pupil.session_state["lesson_run"]
    assert lesson.engine is not None and not lesson.replay and len(lesson.records) == 3
    assert lesson.token_texts[:len(teacher_texts)] == teacher_texts
    assert pupil.session_state.get("room_code") is None and len(room.students) == 0
    click(pupil, "Next token")  # it runs on its own now; the teacher's lesson did not move
    assert len(pupil.session_state["lesson_run"].records) == 4 and room.step == 2


def test_take_over_runs_on_the_teachers_model_not_the_students():
    """Issue 50: in a SmolLM2 room a student's Take over ran on the bundled model (another tokenizer, other
    tokens, another bill). The room keeps the teacher's model; Take over loads it for the student."""
    teacher = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    teacher.session_state["model_source"] = "tiny-gemma3"
    teacher.run()
    teacher.switch_page("lessons/prefill_decode.py").run()
    for label in ("Prefill", "Next token", "Open a room for the class"):
        click(teacher, label)
    room = room_of(teacher)
    assert room.model == "tiny-gemma3"
    pupil = student(room.code)
    assert "model_source" not in pupil.session_state or pupil.session_state["model_source"] == "bundled"
    click(pupil, "Take over")
    lesson = pupil.session_state["lesson_run"]
    assert pupil.session_state["model_source"] == "tiny-gemma3" and not pupil.exception
    assert lesson.model_info == room.lesson.model_info and not lesson.replay
    assert lesson.prompt_token_ids == room.lesson.prompt_token_ids and len(lesson.records) == 2
    assert lesson.token_texts == room.lesson.token_texts[:len(lesson.token_texts)]


def test_a_refused_take_over_keeps_the_student_in_the_room_with_one_sentence(teacher, monkeypatch):
    room = room_of(teacher)
    pupil = student(room.code)
    # the server's one live lesson is another session's (AppTest names every session alike)
    monkeypatch.setitem(live_lessons._live, ("another session", "PrefillLesson"), weakref.ref(room.lesson))
    monkeypatch.setenv("KVVIZ_MAX_LESSONS", "1")
    click(pupil, "Take over")
    assert not pupil.exception
    refusal = pupil.error[0].value
    assert f"you still follow room {room.code}" in refusal and "live lessons" in refusal
    assert pupil.session_state["room_code"] == room.code and len(room.students) == 1
    lesson = pupil.session_state["lesson_run"]
    assert lesson.replay and len(lesson.records) == 3  # the room's replay, at the teacher's step
    assert pupil.success[0].value.startswith("**Decode step 2.**")


def test_a_link_never_carries_a_seat_and_leave_frees_it(teacher, monkeypatch):
    """Issue 51: a link with another student's seat token took that seat and replaced their answer. The seat
    is the session's own: the address is the room's link alone, and a seat in a link is ignored."""
    monkeypatch.setenv("KVVIZ_ROOM_STUDENTS", "3")
    room = room_of(teacher)
    first = student(room.code)
    seat = first.session_state["room_seat"]
    assert dict(first.query_params) == {"room": room.code}  # no seat, no model, prompt or step
    copied = student(room.code, seat)  # the first student's seat, pasted into a link
    assert copied.session_state["room_seat"] != seat and not copied.error
    assert len(room.students) == 2 and seat in room.students
    others = [student(room.code)]
    assert all(not o.error for o in others) and len(room.students) == 3
    teacher.run()
    assert any(c.value.startswith("3 of 3 students following") for c in teacher.caption)
    click(others[0], "Leave")
    assert len(room.students) == 2 and "room" not in others[0].query_params
    assert not student(room.code).error  # the seat left is free


def test_a_wrong_code_gets_one_sentence_and_a_lesson_of_ones_own():
    pupil = student("NOSUCH")
    assert "No open room has a seat for the code NOSUCH" in pupil.error[0].value
    assert any(b.label == "Prefill" for b in pupil.button)


def test_a_full_server_refuses_another_room_in_one_sentence(teacher, monkeypatch):
    monkeypatch.setenv("KVVIZ_MAX_ROOMS", "1")
    other = open_lesson("lessons/prefill_decode.py")
    click(other, "Prefill")
    click(other, "Open a room for the class")
    assert "already has 1 open rooms, its limit (KVVIZ_MAX_ROOMS)" in other.error[0].value
    assert not other.exception and other.session_state["lesson_run"] is not None


def test_the_teachers_panel_draws_the_rooms_qr_code_and_a_link_students_can_reach(teacher):
    """Issue 33 item 3: the QR code was an SVG that st.html's sanitizer stripped (an empty box), and
    the link named localhost, the host the teacher browsed to."""
    images = teacher.get("image")
    assert len(images) == 1 and images[0].value[0].endswith(".png")  # qr_png's bytes, kept lossless
    link = next(c.value for c in teacher.code if "?room=" in c.value)
    detected = room_address.lan_address()
    if detected is not None:
        assert link.startswith(f"http://{detected}:8501/prefill_decode?room=")
        assert not teacher.warning
    else:
        assert "KVVIZ_PUBLIC_URL" in teacher.warning[0].value


def test_the_rooms_link_is_the_configured_address_else_the_detected_one(monkeypatch):
    monkeypatch.setenv("KVVIZ_PUBLIC_URL", "http://class.example:8080/kv/")
    assert room_address.room_address("prefill_decode") == ("http://class.example:8080/kv", None)
    monkeypatch.setenv("KVVIZ_PUBLIC_URL", "10.0.0.5:8501")
    assert room_address.room_address("prefill_decode") == ("http://10.0.0.5:8501", None)
    monkeypatch.delenv("KVVIZ_PUBLIC_URL")
    detected = room_address.lan_address()
    base, warning = room_address.room_address("prefill_decode")
    if detected is not None:
        assert (base, warning) == (f"http://{detected}:8501", None)
    else:
        assert "localhost" in base and "KVVIZ_PUBLIC_URL" in warning


def test_the_qr_code_is_a_png_of_a_qr_codes_size():
    link = "http://10.0.0.5:8501/prefill_decode?room=ABCD"
    image = Image.open(io.BytesIO(room_address.qr_png(link)))
    modules = qrcode.QRCode(border=2)
    modules.add_data(link)
    modules.make(fit=True)
    side = (modules.modules_count + 4) * 8  # border 2 each side, 8 px a module
    assert image.format == "PNG" and image.size == (side, side)
    assert set(image.convert("L").getdata()) == {0, 255}  # black modules on white


def test_a_server_with_a_teacher_key_opens_rooms_for_its_teachers_only(monkeypatch):
    """Issue 61 item 4: one student's tabs opened all 10 rooms and the real teacher was refused; the per-address
    limit never applied behind a local reverse proxy. KVVIZ_TEACHER_KEY makes opening a room a teacher's act."""
    monkeypatch.setenv("KVVIZ_TEACHER_KEY", "the staff room's key")
    at = open_lesson("lessons/prefill_decode.py")
    click(at, "Prefill")
    at.text_input(key="room_teacher_key").set_value("a guess")
    click(at, "Open a room for the class")
    assert rooms.teachers_room("prefill_decode") is None or not shared_store().codes()
    assert any("teacher key" in e.value and one_sentence(e.value) for e in at.error), [e.value for e in at.error]
    assert at.session_state["lesson_run"] is not None  # the lesson goes on
    at.text_input(key="room_teacher_key").set_value("the staff room's key")
    click(at, "Open a room for the class")
    room = room_of(at)
    assert room is not None and not at.error
    rooms.close_room(room)


def test_a_take_over_storm_is_refused_in_a_sentence_past_the_servers_turns(teacher):
    """Issue 61 item 5: twenty students pressing Take over together ran twenty lessons side by side and the
    teacher's Next token waited 6-7 s. The server runs fair_share.TAKE_OVERS.at_once at a time; a press past
    them keeps the student in the room, told why in one sentence, and works once a turn is free."""
    from kvviz.ui import fair_share

    room = room_of(teacher)
    pupil = student(room.code)
    held = [fair_share.TAKE_OVERS.turn() for _ in range(fair_share.TAKE_OVERS.at_once)]
    assert all(turn.__enter__() for turn in held)  # other students' Take overs, running now
    try:
        click(pupil, "Take over")
        assert not pupil.exception
        said = next(e.value for e in pupil.error if "taking over" in e.value)
        assert one_sentence(said) and "taking over on this server right now" in said, said
        assert pupil.session_state.get("room_code") == room.code and len(room.students) == 1  # still following
        assert pupil.session_state["lesson_run"].replay
    finally:
        for turn in held:
            turn.__exit__(None, None, None)
    click(pupil, "Take over")
    assert not pupil.session_state["lesson_run"].replay and pupil.session_state.get("room_code") is None
