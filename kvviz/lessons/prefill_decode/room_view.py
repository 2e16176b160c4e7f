"""Prefill and decode in a room (kvviz.ui.rooms): the teacher's panel, and the students who follow.

A student's page opened with ?room=CODE shows the teacher's lesson as a replay of its records at
the teacher's step: every view works, nothing runs a model, and the student picks views and
layers without moving anyone. A one-second fragment reruns the student's page when the room
changed (a step, a question, a reveal). "Take over" runs the same prompt and settings to the
same step on the student's own engine; "Leave" keeps nothing.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit
from dataclasses import replace

import qrcode
import qrcode.image.svg
import streamlit as st

from kvviz.lessons.prefill_decode import predict
from kvviz.lessons.prefill_decode import state as ls
from kvviz.ui import rooms
from kvviz.ui.common import drop

KEYS = frozenset({"room_code", "room_query_done", "room_error", "room_version", "room_answer", "room_sent",
                  "room_followed_step", rooms.SESSION_KEY})
PAGE = "prefill_decode"


# ---- a student's page ----------------------------------------------------------------------------
def restore_from_query() -> None:
    """A link with ?room=CODE, read once per session: follow that room, or say why not."""
    if st.session_state.get("room_query_done") or "room" not in st.query_params:
        return
    st.session_state["room_query_done"] = True
    code = rooms.normalize(st.query_params["room"])
    room = rooms.find(code)
    if room is None or room.page != PAGE:
        st.session_state["room_error"] = (f"No open room has the code {code or '(empty)'}: check it with your "
                                          "teacher, or it may have closed. You can run the lesson on your own here.")
        return
    refusal = rooms.join(room)
    if refusal is not None:
        st.session_state["room_error"] = refusal
        return
    st.session_state["room_code"] = room.code
    st.session_state["lesson_query_done"] = True  # the room, not the link's prompt, sets the lesson


def followed_room() -> rooms.Room | None:
    """The room this session follows, its lesson refreshed to the teacher's step; None when it
    follows none (a closed room leaves a sentence and no lesson)."""
    code = st.session_state.get("room_code")
    if code is None:
        return None
    room = rooms.find(code)
    if room is None or getattr(room.lesson, "released", False) or not room.lesson.records:
        stop_following()
        st.session_state["room_error"] = f"Room {code} has closed. You can run the lesson on your own here."
        return None
    rooms.seen(room)
    st.session_state["room_version"] = room.version
    st.session_state["lesson"] = follower(room)
    if st.session_state.get("room_followed_step") != room.step:  # the teacher moved: follow
        st.session_state["lesson_view_step"] = room.step
        st.session_state["room_followed_step"] = room.step
    return room


def follower(room: rooms.Room):
    """The teacher's lesson as a replay at the teacher's step: the same record objects in lists of
    its own (the teacher's lists are emptied when that session ends)."""
    teacher = room.lesson
    step = min(room.step, len(teacher.records) - 1)
    return replace(teacher, records=list(teacher.records[:step + 1]),
                   twin_records=list(teacher.twin_records[:step + 1]), traces=list(teacher.traces[:step + 1]),
                   token_texts=list(teacher.token_texts),
                   prompt_token_ids=list(teacher.prompt_token_ids), engine=None, twin=None, tokenizer=None,
                   replay=True, replay_position=step, stage_steps=[],
                   done_at_copy=teacher.finished and step == len(teacher.records) - 1)


def stop_following() -> None:
    code = st.session_state.get("room_code")
    room = rooms.find(code) if code else None
    if room is not None:
        rooms.leave(room)
    for key in ("room_code", "room_version", "room_followed_step", "room_sent", "lesson", "lesson_view_step"):
        st.session_state.pop(key, None)


def take_over() -> None:
    """Run the room's prompt and settings to the room's step on this session's own engine."""
    room = rooms.find(st.session_state.get("room_code", ""))
    if room is None:
        stop_following()
        return
    teacher, step = room.lesson, room.step
    stop_following()
    sampling = teacher.settings.sampling
    st.session_state.update({
        "lesson_prompt": teacher.settings.prompt, "lesson_max_tokens": sampling.max_tokens,
        "lesson_greedy": sampling.temperature == 0, "lesson_seed": sampling.seed or 0})
    if sampling.temperature:
        st.session_state.update({"lesson_temperature": sampling.temperature, "lesson_top_k": sampling.top_k,
                                 "lesson_top_p": sampling.top_p})
    ls.on_prompt_edit()
    ls.run_to_step(step)


def student_bar(room: rooms.Room) -> None:
    """The banner, Take over and Leave, the room's open question, and the ticker that follows."""
    a, b, c = st.columns([4, 1, 1], vertical_alignment="center")
    a.info(f"**Following room {room.code}.** The teacher moves the lesson; pick any view below, it moves only "
           "your screen.", icon=":material/groups:")
    b.button("Take over", on_click=take_over, width="stretch",
             help="Copy the lesson at this step into a lesson of your own, and go on alone.")
    c.button("Leave", on_click=stop_following, width="stretch")
    question = room.open_question
    if question is not None:
        sent = st.session_state.get("room_sent") == question.id
        with st.form("room_question", border=True):
            st.markdown(f"**The teacher asks:** {question.text}")
            st.number_input(f"Your answer ({question.unit})", min_value=0.0, step=1.0, value=None, key="room_answer")
            if st.form_submit_button("Send my answer" if not sent else "Change my answer"):
                value = st.session_state.get("room_answer")
                refusal = "Type a number first." if value is None else rooms.answer(room, question.id, value)
                if refusal:
                    st.error(refusal)
                else:
                    st.session_state["room_sent"] = question.id
                    st.success("Sent. The answer shows when the teacher reveals it.")
    last = next((q for q in reversed(room.questions) if q.revealed), None)
    if last is not None and question is None:
        mine = last.answers.get(rooms.session_id())
        said = "you did not answer" if mine is None else f"you said {mine:,.0f}"
        st.caption(f"Revealed: {last.text} The engine holds **{last.answer:,.0f} {last.unit}**; {said}; "
                   f"{len(last.answers)} answered.")

    @st.fragment(run_every=1.0)
    def follow():
        now = rooms.find(room.code)
        if now is not None:
            rooms.seen(now)  # still following
        if now is None or now.version != st.session_state.get("room_version"):
            st.rerun(scope="app")

    follow()


# ---- the teacher's panel ------------------------------------------------------------------------
def teacher_panel(lesson, step: int) -> None:
    """Open or close the room, its code, link and QR code, who follows, and the questions' answers."""
    room = rooms.teachers_room(PAGE)
    if room is not None and room.lesson is not lesson:  # a new lesson (Prefill again): the room shows it
        room.lesson = lesson
    if room is None:
        if st.button("Open a room for the class", icon=":material/groups:"):
            try:
                rooms.open_room(lesson, PAGE)
            except ValueError as error:
                st.error(str(error))
                return
            st.rerun()
        st.caption("Students who open the room's link see this lesson, step by step, on their own screens, "
                   "and answer your predict-then-reveal questions there.")
        return
    rooms.publish(room, step)
    _sync_questions(room, lesson)
    link = f"{base_url()}/{PAGE}?room={room.code}"
    left, right = st.columns([1, 3])
    left.html(f"<div style='width:160px'>{qr_svg(link)}</div>")
    with right:
        st.markdown(f"### Room **{room.code}**")
        st.code(link, language=None)
        if room.questions:
            st.download_button("Download the room's answers (JSON)", json.dumps(rooms.answers_table(room), indent=1),
                               file_name=f"kvviz-room-{room.code}.json", mime="application/json", on_click="ignore")
        if st.button("Close the room"):
            rooms.close_room(room)
            st.rerun()
    room_status(room.code)


@st.fragment(run_every=2.0)
def room_status(code: str) -> None:
    """Who follows and who answered, redrawn every two seconds on the teacher's page."""
    room = rooms.find(code)
    if room is None:
        st.caption("The room has closed.")
        return
    st.caption(f"{room.following()} of {len(room.students)} students following now "
               f"(at most {rooms.setting('KVVIZ_ROOM_STUDENTS')}).")
    for question in room.questions[-3:]:
        room_results(question)


def room_results(question: rooms.RoomQuestion) -> None:
    """How many answered, and on reveal the answers beside the engine's."""
    answers = sorted(question.answers.values())
    if not question.revealed:
        st.caption(f"“{question.text}” {len(answers)} answered so far; the answers show at the reveal.")
        return
    right = [a for a in answers if abs(a - question.answer) <= 0.01 * max(abs(question.answer), 1)]
    st.markdown(f"**Room's answers** to “{question.text}” The engine: **{question.answer:,.0f} {question.unit}**; "
                f"{len(right)} of {len(answers)} answered within 1%.")
    if answers:
        counts: dict[str, int] = {}
        for a in answers:
            counts[f"{a:,.0f}"] = counts.get(f"{a:,.0f}", 0) + 1
        st.bar_chart({"answers": counts}, horizontal=True, height=min(60 + 28 * len(counts), 320),
                     x_label="students", y_label=question.unit)


def _sync_questions(room: rooms.Room, lesson) -> None:
    for question in st.session_state.get("lesson_questions", []):
        question_id = f"{question.asked_at}_{question.kind}"
        refusal = rooms.ask(room, question_id, question.text, question.unit, question.target)
        if refusal:
            st.caption(refusal)
        if not question.revealed:
            predict.reveal(question, lesson)
        if question.revealed:
            rooms.reveal(room, question_id, question.answer)


def qr_svg(text: str) -> str:
    """The link as a QR code, an SVG drawn here (no image host)."""
    image = qrcode.make(text, image_factory=qrcode.image.svg.SvgPathImage, border=2)
    svg = image.to_string(encoding="unicode")
    return svg.replace("<svg ", "<svg style='width:100%;height:auto' ", 1)


def base_url() -> str:
    """This app's address as the teacher's browser sees it, without the page's name."""
    parts = urlsplit(st.context.url or "http://localhost:8501")
    path = parts.path.rstrip("/")
    if path.endswith("/" + PAGE) or path == PAGE:
        path = path[:-len(PAGE)].rstrip("/")
    return f"{parts.scheme}://{parts.netloc}{path}"


def reset(state) -> None:
    """Another model loaded: the room followed belongs to the old one."""
    drop(state, KEYS)
