"""The teacher's room panel: open and close the room, its code, link and QR code, who follows, and the
questions sent to the room and revealed (kvviz.lessons.room_view says how a room works)."""

from __future__ import annotations

import json

import streamlit as st

from kvviz.lessons.files import RoomAnswers
from kvviz.lessons.room_address import qr_png, room_address
from kvviz.lessons.room_answers import results
from kvviz.lessons.room_student import step_payload
from kvviz.lessons.room_view import FollowedLesson
from kvviz.rooms.types import Room, RoomQuestion, setting
from kvviz.ui import rooms
from kvviz.ui.common import session_source


# ---- the teacher's panel ------------------------------------------------------------------------
def publish(lesson: FollowedLesson, run, step: int) -> None:
    """The teacher's page knows its step: the room hears of it now, before the rest of the page draws,
    with the payload its followers draw (built only when the step moved)."""
    room = rooms.teachers_room(lesson.page)
    if room is None:
        return
    rooms.show_lesson(room, run)
    progress = lesson.progress(run)
    if (room.step, room.progress) != (step, progress) or not room.payload:
        rooms.publish(room, step, progress, step_payload(lesson, run, step, room.payload))


def teacher_panel(lesson: FollowedLesson, run, step: int) -> None:
    """Open or close the room, its code, link and QR code, who follows, and the questions' answers."""
    room = rooms.teachers_room(lesson.page)
    if room is None and rooms.down():  # stepped.room_panel says so above
        return
    if room is None:
        lost = rooms.lost_room()
        if lost:
            st.warning(lost)
        typed = (st.text_input("Teacher key", type="password", key="room_teacher_key", max_chars=200,
                               help="This class server opens rooms for its teachers only (KVVIZ_TEACHER_KEY).")
                 if rooms.teacher_key_needed() else "")
        if st.button("Open a room for the class", icon=":material/groups:"):
            refused = rooms.teacher_key_refusal(typed)
            if refused:
                st.error(refused)
                return
            try:
                rooms.open_room(run, lesson.page, rooms.client_address(),
                                session_source())
            except ValueError as error:
                st.error(str(error))
                return
            st.rerun()
        st.caption("Students who open the room's link see this lesson, step by step, on their own screens, "
                   "and answer your predict-then-reveal questions there.")
        return
    publish(lesson, run, step)  # a new run (Prefill or Start again): the room shows it
    _sync_questions(room, lesson.questions(run))
    keep_answers(run, room)
    base, warning = room_address(lesson.page)
    link = f"{base}/{lesson.page}?room={room.code}"
    left, right = st.columns([1, 3])
    left.image(qr_png(link), width=160, output_format="PNG")  # a PNG: st.html's sanitizer strips an inline SVG
    with right:
        st.markdown(f"### Room **{room.code}**")
        st.code(link, language=None)
        if warning:
            st.warning(warning, icon=":material/wifi_off:")
        if room.questions:
            st.download_button("Download the room's answers (JSON)", json.dumps(rooms.answers_table(room), indent=1),
                               file_name=f"kvviz-room-{room.code}.json", mime="application/json", on_click="ignore")
        if st.button("Close the room"):
            rooms.close_room(room)
            st.rerun()
    room_status(lesson, room.code)


def keep_answers(lesson, room: Room) -> None:
    """The room's questions and answers on the teacher's lesson, so its exported file holds them."""
    kept = [row for row in lesson.room_answers if row.room != room.code]
    lesson.room_answers = kept + [RoomAnswers(**row) for row in rooms.answers_table(room)]


@st.fragment(run_every=2.0)
def room_status(lesson: FollowedLesson, code: str) -> None:
    """Who follows and who answered, redrawn every two seconds on the teacher's page; and the teacher's step
    published again should the room not hold it (a class server too busy to answer when the page published)."""
    room = rooms.find(code)
    if room is None:
        st.caption(rooms.down() or "The room has closed.")
        return
    run, step = lesson.state.run, lesson.state.view
    if run is not None and not run.replay and step is not None and room.step != step:
        publish(lesson, run, step)
    st.caption(f"{room.following()} of {rooms.seats(room)} students following now "
               f"(at most {setting('KVVIZ_ROOM_STUDENTS')}).")
    for question in room.questions[-3:]:
        answers = sorted(question.answers.values())
        if question.revealed:
            results(question.text, question.unit, question.answer, answers, question.exact)
        else:
            st.caption(f"“{question.text}” {len(answers)} answered so far; the answers show at the reveal.")



def _sync_questions(room: Room, asked: list[RoomQuestion]) -> None:
    """The questions the teacher asked on the page go to the room, and their answers once the engine gave them."""
    for question in asked:
        refusal = rooms.ask(room, question.id, question.text, question.unit, question.target, question.exact)
        if refusal:
            st.caption(refusal)
        if question.revealed:
            rooms.reveal(room, question.id, question.answer, question.target)
