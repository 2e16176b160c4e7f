"""A lesson in a room (kvviz.ui.rooms): the teacher's panel, and the students who follow.

Every engine-driven lesson gives its room a `RoomLesson`: where its run and its step in view live
in session state, a function that copies the teacher's lesson as a replay at a step, one that
runs the same settings to that step on the student's own engine (Take over), and the stage's data
and sentence of a step. A student's page opened with ?room=CODE (its seat is the session's own, never in the
link: a link passed on cannot take another student's seat) shows the teacher's lesson as that replay: every view works,
nothing runs a model, and the student picks views and tabs without moving anyone.

When the teacher steps, the room keeps one payload for every follower (`step_payload`: the stage's
data for the steps that moved, already JSON, and the step's sentence), and kvviz.ui.room_wake asks
each follower's session, from the server, to rerun one fragment (`follow_stage`): the stage and its
sentence, drawn from that payload. The rest of the page does not rerun: the views below show the
teacher's step as of the page's last rerun (or the step the student picked), and Catch up brings
them to the teacher's now. A new lesson, a question, a reveal and a closed room rerun the whole page. A link opened on another lesson's page goes to the
room's own page.
"""

from __future__ import annotations

import io
import json
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import plotly.graph_objects as go
import qrcode
import streamlit as st
from streamlit import config

from kvviz.lessons.files import RoomAnswers
from kvviz.lessons.registry import BY_KEY
from kvviz.ui import room_types, room_wake, rooms, streamlit_door
from kvviz.ui.common import drop, load_linked_model, session_source
from kvviz.ui.text import plain

KEYS = frozenset({"room_code", "room_seat", "room_seat_token", "room_query_done", "room_error", "room_state", "room_answer",
                  "room_sent", "room_sent_value", "room_followed_lesson", "room_stage", "room_full", "room_teachers_step",
                  "room_views_step", rooms.SESSION_KEY})
FALLBACK_S = 10.0  # a follower's stage asks on its own this often, should a wake be lost; it keeps the seat too
CAUGHT_UP = "The stage moves with the teacher; the views below stay where they are until you press **Catch up**."


@dataclass(frozen=True)
class RoomLesson:
    """What a lesson page gives its room."""

    page: str  # the lesson's key in the registry: its page's URL path
    lesson_key: str  # session-state key of the lesson object
    step_key: str  # session-state key of the step in view (an index into its records)
    follower: Callable  # (teacher's lesson, step) -> a replay of it at that step, sharing no list with it
    take_over: Callable  # (teacher's lesson, step, slot, started) -> None: the same settings run to that step,
    # this session's own, a bar with Stop in slot (an st.empty()); started() once its first step ran
    questions: Callable = lambda lesson: []  # (teacher's lesson) -> list[room_types.RoomQuestion] asked on the page
    progress: Callable = lambda lesson: 0  # (lesson) -> a number that grows when followers must redraw the same step
    error_key: str = ""  # session-state key of the lesson's refusal (what Take over says when refused)
    export: Callable | None = None  # (lesson) -> its lesson file's text: a room in Redis carries the lesson so
    read: Callable | None = None  # (file text) -> a replay of it (raises LessonFileError)
    stage: Callable | None = None  # (lesson, step, presenter) -> the stage's data (kvviz.ui.stage)
    sentence: Callable = lambda lesson, step: None  # (lesson, step) -> the line over the stage, when the page has one

    def __post_init__(self):
        if self.export is not None and self.read is not None:
            room_types.LESSON_FILES[self.page] = (self.export, self.read)


# ---- a student's page ----------------------------------------------------------------------------
def restore_from_query(kind: RoomLesson) -> None:
    """A link with ?room=CODE, read once per session: take a seat in that room, or say why not. A room
    of another lesson sends the student to that lesson's page, with the link. The seat is this
    session's (a reload is a new session: a new seat, the old one freed once idle)."""
    if st.session_state.get("room_query_done") or "room" not in st.query_params:
        return
    seat = session_seat()
    room = rooms.take_seat(st.query_params["room"], seat, rooms.session_id(), rooms.client_address())
    if not isinstance(room, str) and room.page != kind.page and room.page in BY_KEY:
        st.switch_page(BY_KEY[room.page].path, query_params={"room": room.code})
    st.session_state["room_query_done"] = True
    if isinstance(room, str):
        st.session_state["room_error"] = room
        return
    st.query_params.clear()  # the address is the room's link, whatever the link carried besides
    st.query_params["room"] = room.code
    st.session_state["room_code"], st.session_state["room_seat"] = room.code, seat
    st.session_state["lesson_query_done"] = True  # the room, not a Prefill and decode link's prompt, sets it


def session_seat() -> str:
    """This session's seat token, made on its first room link and kept while the session lives (across
    a switch to the room's page), never read from a link."""
    if not room_types.valid_seat(st.session_state.get("room_seat_token")):
        st.session_state["room_seat_token"] = rooms.new_seat()
    return st.session_state["room_seat_token"]


def follow_link_elsewhere(page_key: str) -> None:
    """A room link opened on a page without rooms (the Memory bill, say): take the seat and go to the
    room's lesson, whose page reads the link again and keeps the seat; or say in one sentence why not,
    and stay. Seats are taken (rate-limited like any link), never looked up, so a link is no way to
    test codes."""
    if "room" not in st.query_params or st.session_state.get("room_query_done") or \
            (page_key in BY_KEY and BY_KEY[page_key].rooms):
        return
    room = rooms.take_seat(st.query_params["room"], session_seat(), rooms.session_id(), rooms.client_address())
    if not isinstance(room, str) and room.page in BY_KEY:
        st.switch_page(BY_KEY[room.page].path, query_params={"room": room.code})
    st.session_state["room_query_done"] = True
    st.error(room if isinstance(room, str) else f"Room {room.code}'s lesson is not on this server's pages.")


def followed_room(kind: RoomLesson) -> room_types.Room | None:
    """The room of this page's lesson that this session follows, its lesson refreshed to the teacher's
    step; None when it follows none here (a closed room leaves a sentence and no lesson). The views
    start at the teacher's step (on joining, and with each new lesson); then they stay on the student's."""
    code = st.session_state.get("room_code")
    if code is None:
        return None
    room = rooms.find(code)
    if room is not None and room.page != kind.page:  # the student looks at another lesson: their own
        room_wake.forget()
        return None
    if room is None and rooms.down():  # the rooms' server went away: the replay stays, at its step
        copy, held = st.session_state.get(kind.lesson_key), st.session_state.get("room_stage", {}).get("step")
        if copy is not None and held is not None and \
                st.session_state.get(kind.step_key) == st.session_state.get("room_views_step"):  # views not moved
            st.session_state[kind.step_key] = min(held, len(copy.records) - 1)  # the step the stage last showed
        stop_following(kind, keep_lesson=True)
        st.session_state["room_error"] = (f"The class room server does not answer, so room {code} cannot be "
                                          "followed; the lesson stays at its step, and you can go on on your own.")
        return None
    if room is None or getattr(room.lesson, "released", False) or not getattr(room.lesson, "records", None):
        stop_following(kind)
        st.session_state["room_error"] = f"Room {code} has closed; you can run the lesson on your own here."
        return None
    if not rooms.seen(room, st.session_state.get("room_seat", "")) and not rooms.down():
        stop_following(kind)
        st.session_state["room_error"] = (f"Room {code} gave your seat to another student while your page was "
                                          "away; you can run the lesson on your own here.")
        return None
    st.session_state["room_state"] = page_state(room)
    st.session_state["room_stage"] = {"seen": room.payload.get("stage")}  # read before the step: never newer
    step = st.session_state["room_teachers_step"] = teachers_step(room)
    st.session_state[kind.lesson_key] = kind.follower(room.lesson, step)
    own = st.session_state.get(kind.step_key) != st.session_state.get("room_views_step")  # the student moved them
    if st.session_state.get("room_followed_lesson") != room_types.lesson_token(room.lesson) or not own:
        st.session_state[kind.step_key] = st.session_state["room_views_step"] = step
        st.session_state["room_followed_lesson"] = room_types.lesson_token(room.lesson)
    return room


def teachers_step(room: room_types.Room) -> int:
    return min(room.step, len(room.lesson.records) - 1)


def page_state(room: room_types.Room) -> tuple:
    """What only a whole page rerun shows: the lesson, the questions, the reveals."""
    return room_types.lesson_token(room.lesson), len(room.questions), sum(q.revealed for q in room.questions)


def stop_following(kind: RoomLesson, keep_lesson: bool = False) -> None:
    """Leave the room; its replay goes too, unless the student took it over (`keep_lesson`)."""
    code = st.session_state.get("room_code")
    room = rooms.find(code) if code else None
    if room is not None:
        rooms.leave(room, st.session_state.get("room_seat", ""))
    room_wake.forget()
    lesson_keys = () if keep_lesson else (kind.lesson_key, kind.step_key)
    for key in ("room_code", "room_seat", "room_state", "room_followed_lesson", "room_stage", "room_full",
                "room_teachers_step", "room_views_step", "room_sent", "room_sent_value", *lesson_keys):
        st.session_state.pop(key, None)
    st.query_params.pop("room", None)  # a reload does not join again


def catch_up(kind: RoomLesson) -> None:
    """The views below go to the teacher's step (the whole page reruns)."""
    room = rooms.find(st.session_state.get("room_code", ""))
    if room is not None:
        st.session_state[kind.step_key] = st.session_state["room_views_step"] = teachers_step(room)
    st.session_state["room_full"] = True


def take_over(kind: RoomLesson, slot) -> None:
    """The room's lesson at the room's step, run on this session's own engine, in the page's script: a bar
    with Stop in `slot` counts the steps. The student leaves the room once the first step ran, so Stop
    keeps the lesson at the step reached. Refused (the server's live lessons are at their limit, the
    budget): the student still follows the room, told why."""
    code = st.session_state.get("room_code", "")
    room = rooms.find(code)
    if room is None:
        stop_following(kind)
        return
    refused = load_linked_model(room.model, "The teacher's model") if room.model else None
    if refused:  # the student's own copy would run on another model: a different lesson, so none
        st.session_state["room_error"] = f"Take over needs the teacher's model; you still follow room {room.code}. {refused}"
        return
    st.session_state.pop(kind.lesson_key, None)  # the replay followed: the student's own run takes its place
    left = []
    kind.take_over(room.lesson, min(room.step, len(room.lesson.records) - 1), slot,
                   lambda: left.append(stop_following(kind, keep_lesson=True)))
    slot.empty()
    if not left:
        reason = st.session_state.pop(kind.error_key, "") if kind.error_key else ""
        st.session_state["room_error"] = (f"Take over could not start a lesson of your own, so you still follow "
                                          f"room {room.code}: {reason or 'try again in a while.'}")


def student_bar(kind: RoomLesson, room: room_types.Room) -> None:
    """The banner, Take over and Leave, and the room's open question (the page ends with `follow`)."""
    a, b, c = st.columns([4, 1, 1], vertical_alignment="center")
    a.info(f"**Following room {room.code}.** The teacher moves the lesson; pick any view below, it moves only "
           "your screen.", icon=":material/groups:")
    taking = b.button("Take over", width="stretch",
                      help="Copy the lesson at this step into a lesson of your own, and go on alone.")
    c.button("Leave", on_click=stop_following, args=(kind,), width="stretch")
    if taking:  # run here, not in a callback, so that its bar and Stop show while it runs
        take_over(kind, st.empty())
        st.rerun()
    question = room.open_question
    if question is not None:
        sent = st.session_state.get("room_sent") == question.id
        with st.form("room_question", border=True):
            st.markdown(f"**The teacher asks:** {question.text}")
            st.number_input(f"Your answer ({question.unit})", min_value=0.0, step=1.0, value=None, key="room_answer")
            if st.form_submit_button("Send my answer" if not sent else "Change my answer"):
                value = st.session_state.get("room_answer")
                seat = st.session_state.get("room_seat", "")
                refusal = "Type a number first." if value is None else rooms.answer(room, question.id, value, seat)
                if refusal:
                    st.error(refusal)
                else:
                    st.session_state.update(room_sent=question.id, room_sent_value=value)
                    sent = True
            if sent:  # on every run until the question closes, not only the one that sent it
                st.success(f"Sent: {st.session_state.get('room_sent_value', 0):,g} {question.unit}. The engine's answer "
                           "shows when the teacher reveals it; you can change yours until then.")
    last = next((q for q in reversed(room.questions) if q.revealed), None)
    if last is not None and question is None:
        mine = last.answers.get(st.session_state.get("room_seat", ""))
        said = "you did not answer" if mine is None else f"you said {mine:,.0f}"
        st.caption(f"Revealed: {last.text} The engine's answer is **{last.answer:,.0f} {last.unit}**; {said}; "
                   f"{len(last.answers)} answered.")


@st.fragment(run_every=FALLBACK_S)
def follow_stage(kind: RoomLesson, code: str, data: dict, sentence: str | None, draw: Callable) -> None:
    """A follower's stage and its sentence: drawn with the page (`data`, at the views' step), then alone
    each time kvviz.ui.room_wake wakes this fragment, from the room's payload (every follower shares it;
    the browser keeps the steps before). `draw(data, sentence, step)` shows them; data may be JSON bytes."""
    room_wake.follow(code)
    state = st.session_state
    if streamlit_door.whole_page_runs():
        state.pop("room_full", None)
        state.setdefault("room_stage", {"seen": None}).update(steps=len(data["steps"]), step=data["step"],
                                                               sentence=sentence)
        draw(data, sentence, data["step"])
        _catch_up_bar(kind, st.session_state.get("room_teachers_step", data["step"]))
        return
    room = rooms.find(code)
    if (state.pop("room_full", False) or room is None or not rooms.seen(room, state.get("room_seat", ""))
            or page_state(room) != state.get("room_state") or "steps" not in state.get("room_stage", {})):
        st.rerun(scope="app")  # what only the whole page shows moved (or the student chose a step)
    held, payload = state["room_stage"], room.payload
    if payload and payload["stage"] != held["seen"]:  # the teacher stepped: the steps that moved
        if payload["lesson"] != state.get("room_followed_lesson") or payload["steps_from"] > held["steps"]:
            st.rerun(scope="app")  # a wake was lost: this browser lacks steps the payload builds on
        held.update(steps=payload["step"] + 1, step=payload["step"], sentence=payload["sentence"],
                    seen=payload["stage"], drawn=payload["stage"])
        state[kind.lesson_key] = kind.follower(room.lesson, teachers_step(room))  # lists copied, no record: the
        # copy the student keeps should the room go, and what Catch up shows
        stage = payload["stage"]
    else:  # nothing new (the fallback's beat): the same picture, the browser's step kept. The last payload
        # again, not an empty one: should the browser never have drawn it (this run came first, or the run
        # that sent it stopped), it still has the steps that payload builds on
        stage = held.get("drawn") or json.dumps({"steps_from": held["steps"], "steps": [], "step": held["step"]})
    draw(stage.encode(), held["sentence"], held["step"])
    _catch_up_bar(kind, teachers_step(room))


def stage_lost() -> None:
    """The browser lacks the steps a payload builds on: the whole page draws the stage whole."""
    st.session_state["room_full"] = True


def _catch_up_bar(kind: RoomLesson, teachers: int) -> None:
    """One caption and Catch up, while the views below show another step than the teacher's."""
    if st.session_state.get(kind.step_key, teachers) != teachers:
        left, right = st.columns([5, 1], vertical_alignment="center")
        left.caption(CAUGHT_UP)
        right.button("Catch up", on_click=catch_up, args=(kind,), width="stretch", key="room_catch_up",
                     help="Show the teacher's step in the views below too.")


def step_payload(kind: RoomLesson, lesson, step: int, before: dict) -> dict:
    """The teacher's `step` as every follower draws it, built once: the stage's data for the steps that
    moved since the payload `before` (just this step when the teacher looked back or the lesson is new),
    as JSON text, and the step's sentence. Not the lesson again: each follower's browser holds the
    steps before. Plain JSON-able values, so that it can travel between processes."""
    replay = kind.follower(lesson, step)
    data = kind.stage(replay, step, False)
    token = room_types.lesson_token(lesson)
    first = min(before["step"] + 1, step) if before.get("lesson") == token else step
    data.pop("presenter", None)  # each follower's own (the browser keeps it)
    data["steps_from"], data["steps"] = first, data["steps"][first:]
    return {"lesson": token, "step": step, "progress": kind.progress(lesson), "steps_from": first,
            "sentence": kind.sentence(replay, step), "stage": json.dumps(data, separators=(",", ":"))}


# ---- the teacher's panel ------------------------------------------------------------------------
def publish(kind: RoomLesson, lesson, step: int) -> None:
    """The teacher's page knows its step: the room hears of it now, before the rest of the page draws,
    with the payload its followers draw (built only when the step moved)."""
    room = rooms.teachers_room(kind.page)
    if room is None:
        return
    rooms.show_lesson(room, lesson)
    progress = kind.progress(lesson)
    if (room.step, room.progress) != (step, progress) or not room.payload:
        rooms.publish(room, step, progress, step_payload(kind, lesson, step, room.payload))


def teacher_panel(kind: RoomLesson, lesson, step: int) -> None:
    """Open or close the room, its code, link and QR code, who follows, and the questions' answers."""
    room = rooms.teachers_room(kind.page)
    if room is None and rooms.down():  # stepped.room_panel says so above
        return
    if room is None:
        lost = rooms.lost_room()
        if lost:
            st.warning(f"Room {lost} is gone from the class room server (it restarted without its data, or the "
                       "room was deleted there); open a new room and give the class its new link.")
        if st.button("Open a room for the class", icon=":material/groups:"):
            try:
                rooms.open_room(lesson, kind.page, rooms.client_address(),
                                session_source())
            except ValueError as error:
                st.error(str(error))
                return
            st.rerun()
        st.caption("Students who open the room's link see this lesson, step by step, on their own screens, "
                   "and answer your predict-then-reveal questions there.")
        return
    publish(kind, lesson, step)  # a new run (Prefill or Start again): the room shows it
    _sync_questions(room, kind.questions(lesson))
    keep_answers(lesson, room)
    base, warning = room_address(kind.page)
    link = f"{base}/{kind.page}?room={room.code}"
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
    room_status(room.code)


def keep_answers(lesson, room: room_types.Room) -> None:
    """The room's questions and answers on the teacher's lesson, so its exported file holds them."""
    kept = [row for row in lesson.room_answers if row.room != room.code]
    lesson.room_answers = kept + [RoomAnswers(**row) for row in rooms.answers_table(room)]


@st.fragment(run_every=2.0)
def room_status(code: str) -> None:
    """Who follows and who answered, redrawn every two seconds on the teacher's page."""
    room = rooms.find(code)
    if room is None:
        st.caption(rooms.down() or "The room has closed.")
        return
    st.caption(f"{room.following()} of {rooms.seats(room)} students following now "
               f"(at most {room_types.setting('KVVIZ_ROOM_STUDENTS')}).")
    for question in room.questions[-3:]:
        answers = sorted(question.answers.values())
        if question.revealed:
            results(question.text, question.unit, question.answer, answers, question.exact)
        else:
            st.caption(f"“{question.text}” {len(answers)} answered so far; the answers show at the reveal.")


def results(text: str, unit: str, engine: float, answers: list[float], exact: bool) -> None:
    """A revealed question: how many answered, how many were right, and the answers beside the engine's."""
    right = rooms.right_answers(answers, engine, exact)
    st.markdown(f"**Room's answers** to “{plain(text)}” The engine: **{engine:,.0f} {plain(unit)}**; "
                f"{right} of {len(answers)} answered {'exactly that' if exact else 'within 1%'}.")
    if answers:
        st.plotly_chart(answers_chart(unit, engine, answers, exact), width="stretch",
                        config={"displayModeBar": False})


ANSWER_BARS = 12  # distinct answers drawn one bar each; more are counted by how far they are from the engine's


def answer_rows(engine: float, answers: list[float], exact: bool) -> list[tuple[str, int, bool]]:
    """The chart's bars, top to bottom: (label, students, right). Up to ANSWER_BARS distinct answers each get
    a bar; more (a room of 60, a file's 1,000) are counted by their distance from the engine's answer."""
    distinct = sorted(set(answers))
    if len(distinct) <= ANSWER_BARS:
        return [(f"{a:,.0f}", answers.count(a), rooms.right_answers([a], engine, exact) == 1) for a in distinct]
    scale = max(abs(engine), 1)
    bands = [("right" if exact else "within 1% (right)", None), ("within 10%", 0.1), ("within a factor of 2", 1.0),
             ("further off", float("inf"))]
    counts = [0] * len(bands)
    for a in answers:
        if rooms.right_answers([a], engine, exact):
            counts[0] += 1
        else:
            off = abs(a - engine) / scale
            counts[next(i for i, (_, most) in enumerate(bands) if most is not None and off <= most)] += 1
    return [(label, count, index == 0) for index, ((label, _), count) in enumerate(zip(bands, counts))]


def answers_chart(unit: str, engine: float, answers: list[float], exact: bool):
    """A horizontal bar per answer (or band of answers), green where right, its count written on it, tall
    enough for a projector: 48 px a bar."""
    rows = answer_rows(engine, answers, exact)
    figure = go.Figure(go.Bar(
        y=[label for label, _, _ in rows], x=[count for _, count, _ in rows], orientation="h",
        marker_color=["#2e9e5b" if good else "#9aa5b1" for _, _, good in rows],
        text=[f"{count} student{'s' if count != 1 else ''}" for _, count, _ in rows], textposition="auto",
        hovertemplate="%{y}: %{x} students<extra></extra>"))
    most = max(count for _, count, _ in rows)
    figure.update_layout(height=110 + 48 * len(rows), margin={"l": 10, "r": 10, "t": 10, "b": 50}, bargap=0.25,
                         xaxis={"title": {"text": "students"}, "dtick": 1 if most <= 10 else None,
                                "rangemode": "tozero", "tickfont": {"size": 14}},
                         yaxis={"title": {"text": unit}, "type": "category", "automargin": True, "tickfont": {"size": 15}},
                         font={"size": 15})
    return figure


FILE_CHARTS = 3  # a file's room answers drawn at once; more are picked one at a time


def file_answers(lesson) -> None:
    """A replayed lesson's room answers, as the teacher saw them (a file written in a room)."""
    if not lesson.room_answers:
        return
    with st.expander(f"The room's answers ({len(lesson.room_answers)} questions, from the file)",
                     icon=":material/groups:"):
        shown = lesson.room_answers
        if len(shown) > FILE_CHARTS:  # one chart at a time: a file may hold 100 questions, each rerun drew them all
            labels = [f"{i + 1}. {row.question[:80]} (room {row.room})" for i, row in enumerate(shown)]
            pick = st.selectbox("Question", range(len(shown)), index=len(shown) - 1, format_func=labels.__getitem__,
                                key="file_room_question")  # a selectbox shows its options as text
            shown = [shown[min(pick, len(shown) - 1)]]
        for row in shown:  # the file's text, shown as text (no link or image from a crafted file)
            if row.engine is None:
                st.caption(f"Room {plain(row.room)}: “{plain(row.question)}” {len(row.answers)} answered; the file "
                           "was written before the reveal.")
            else:  # results() shows the text through plain(), and the chart's axis takes it as it is
                results(f"{row.question} (room {row.room}, step {row.step})", row.unit, row.engine, row.answers,
                        row.exact)


def _sync_questions(room: room_types.Room, asked: list[room_types.RoomQuestion]) -> None:
    """The questions the teacher asked on the page go to the room, and their answers once the engine gave them."""
    for question in asked:
        refusal = rooms.ask(room, question.id, question.text, question.unit, question.target, question.exact)
        if refusal:
            st.caption(refusal)
        if question.revealed:
            rooms.reveal(room, question.id, question.answer, question.target)


def qr_png(text: str) -> bytes:
    """The link as a QR code, a PNG drawn here (no image host)."""
    buffer = io.BytesIO()
    qrcode.make(text, border=2, box_size=8).save(buffer, format="PNG")  # Pillow's image (Streamlit needs Pillow)
    return buffer.getvalue()


def room_address(page: str) -> tuple[str, str | None]:
    """This app's address as a student's device reaches it, without the page's name, and a sentence
    when there is none but the teacher's own (localhost). In order: KVVIZ_PUBLIC_URL, Streamlit's
    browser.serverAddress when set, this machine's LAN address, the address the teacher browsed to."""
    public = os.environ.get("KVVIZ_PUBLIC_URL", "").strip().rstrip("/")
    if public:
        return (public if "://" in public else f"http://{public}"), None
    path = "/" + config.get_option("server.baseUrlPath").strip("/") if config.get_option("server.baseUrlPath") else ""
    port = config.get_option("browser.serverPort") or config.get_option("server.port")
    host = config.get_option("browser.serverAddress")
    if not host or not config.is_manually_set("browser.serverAddress") or _local(host):
        host = lan_address()
    if host:
        return f"http://{host}:{port}{path}", None
    browsed = base_url(page)
    if not _local(urlsplit(browsed).hostname or "localhost"):
        return browsed, None
    return browsed, ("Students' devices cannot open this link (localhost, and no network address was found): "
                     "set KVVIZ_PUBLIC_URL to the address they reach this server at.")


def lan_address() -> str | None:
    """This machine's address on its network: the source address of a UDP socket connected towards a
    non-routable address (connecting a UDP socket sends no packet); None without a network."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))
            address = probe.getsockname()[0]
        except OSError:
            return None
    return None if _local(address) or address == "0.0.0.0" else address


def _local(host: str) -> bool:
    return host in ("localhost", "::1", "") or host.startswith("127.")


def base_url(page: str) -> str:
    """This app's address as the teacher's browser sees it, without the page's name."""
    parts = urlsplit(st.context.url or "http://localhost:8501")
    path = parts.path.rstrip("/")
    if path.endswith("/" + page) or path == page:
        path = path[:-len(page)].rstrip("/")
    return f"{parts.scheme}://{parts.netloc}{path}"


def reset(state) -> None:
    """Another model loaded: the room followed belongs to the old one."""
    drop(state, KEYS)
