"""A student's page in a room (kvviz.lessons.room_view says how a room works): the link read once, the seat,
the stage that follows the teacher's step woken from the server, Catch up, Take over, and the payload the
teacher's step is drawn from."""

from __future__ import annotations

import json
from collections.abc import Callable

import streamlit as st

from kvviz.lessons.lecture_index import by_key
from kvviz.lessons.room_view import CAUGHT_UP, FALLBACK_S, ROOM, FollowedLesson
from kvviz.rooms.types import Room, lesson_token, valid_seat
from kvviz.ui.stage import reported_step
from kvviz.ui import fair_share, room_wake, rooms, streamlit_door
from kvviz.ui.common import load_linked_model


# ---- a student's page ----------------------------------------------------------------------------
def restore_from_query(lesson: FollowedLesson) -> None:
    """A link with ?room=CODE, read once per session: take a seat in that room, or say why not. A room
    of another lesson sends the student to that lesson's page, with the link. The seat is this
    session's (a reload is a new session: a new seat, the old one freed once idle)."""
    if ROOM.query_done or "room" not in st.query_params:
        return
    seat = session_seat()
    room = rooms.take_seat(st.query_params["room"], seat, rooms.session_id())
    if not isinstance(room, str) and room.page != lesson.page and by_key(room.page) is not None:
        st.switch_page(by_key(room.page).path, query_params={"room": room.code})
    ROOM.query_done = True
    if isinstance(room, str):
        ROOM.error = room
        return
    st.query_params.clear()  # the address is the room's link, whatever the link carried besides
    st.query_params["room"] = room.code
    ROOM.code, ROOM.seat = room.code, seat
    st.session_state["lesson_query_done"] = True  # the room, not a Prefill and decode link's prompt, sets it


def session_seat() -> str:
    """This session's seat token, made on its first room link and kept while the session lives (across
    a switch to the room's page), never read from a link."""
    if not valid_seat(ROOM.seat_token):
        ROOM.seat_token = rooms.new_seat()
    return ROOM.seat_token


def follow_link_elsewhere(page_key: str) -> None:
    """A room link opened on a page without rooms (the Memory bill, say): take the seat and go to the
    room's lesson, whose page reads the link again and keeps the seat; or say in one sentence why not,
    and stay. Seats are taken (rate-limited like any link), never looked up, so a link is no way to
    test codes."""
    if "room" not in st.query_params or ROOM.query_done or \
            (by_key(page_key) is not None and by_key(page_key).rooms):
        return
    room = rooms.take_seat(st.query_params["room"], session_seat(), rooms.session_id())
    if not isinstance(room, str) and by_key(room.page) is not None:
        st.switch_page(by_key(room.page).path, query_params={"room": room.code})
    ROOM.query_done = True
    st.error(room if isinstance(room, str) else f"Room {room.code}'s lesson is not on this server's pages.")


def followed_room(lesson: FollowedLesson) -> Room | None:
    """The room of this page's lesson that this session follows, its lesson refreshed to the teacher's
    step; None when it follows none here (a closed room leaves a sentence and no lesson). The views
    start at the teacher's step (on joining, and with each new lesson); then they stay on the student's."""
    code = ROOM.code
    if code is None:
        return None
    room = rooms.find(code)
    if room is not None and room.page != lesson.page:  # the student looks at another lesson: their own
        room_wake.forget()
        return None
    if room is None and rooms.down():  # the rooms' server went away: the replay stays, at its step
        copy, held = lesson.state.run, reported_step(ROOM.stage)
        if copy is not None and held is not None and \
                lesson.state.view == ROOM.views_step:  # views not moved
            lesson.state.view = min(held, len(copy.records) - 1)  # the step the stage last showed
        stop_following(lesson, keep_lesson=True)
        ROOM.error = (f"The class room server does not answer, so room {code} cannot be "
                      "followed; the lesson stays at its step, and you can go on on your own.")
        return None
    if room is None or getattr(room.lesson, "released", False) or not getattr(room.lesson, "records", None):
        stop_following(lesson)
        ROOM.error = f"Room {code} has closed; you can run the lesson on your own here."
        return None
    if not rooms.seen(room, ROOM.seat) and not rooms.down():
        stop_following(lesson)
        ROOM.error = (f"Room {code} gave your seat to another student while your page was "
                      "away; you can run the lesson on your own here.")
        return None
    ROOM.state = page_state(room)
    ROOM.stage = {"seen": room.payload.get("stage")}  # read before the step: never newer
    step = ROOM.teachers_step = teachers_step(room)
    lesson.state.run = lesson.follower(room.lesson, step)
    own = lesson.state.view != ROOM.views_step  # the student moved them
    if ROOM.followed_lesson != lesson_token(room.lesson) or not own:
        lesson.state.view = ROOM.views_step = step
        ROOM.followed_lesson = lesson_token(room.lesson)
    return room


def teachers_step(room: Room) -> int:
    return min(room.step, len(room.lesson.records) - 1)


def page_state(room: Room) -> tuple:
    """What only a whole page rerun shows: the lesson, the questions, the reveals."""
    return lesson_token(room.lesson), len(room.questions), sum(q.revealed for q in room.questions)


def stop_following(lesson: FollowedLesson, keep_lesson: bool = False) -> None:
    """Leave the room; its replay goes too, unless the student took it over (`keep_lesson`)."""
    code = ROOM.code
    room = rooms.find(code) if code else None
    if room is not None:
        rooms.leave(room, ROOM.seat)
    room_wake.forget()
    ROOM.drop("code", "seat", "state", "followed_lesson", "stage", "full", "teachers_step", "views_step", "sent",
              "sent_value")
    if not keep_lesson:
        lesson.state.drop("run", "view")
    st.query_params.pop("room", None)  # a reload does not join again


def catch_up(lesson: FollowedLesson) -> None:
    """The views below go to the teacher's step (the whole page reruns)."""
    room = rooms.find(ROOM.code or "")
    if room is not None:
        lesson.state.view = ROOM.views_step = teachers_step(room)
    ROOM.full = True


def take_over(lesson: FollowedLesson, slot) -> None:
    """The room's lesson at the room's step, run on this session's own engine, in the page's script: a bar
    with Stop in `slot` counts the steps. The student leaves the room once the first step ran, so Stop
    keeps the lesson at the step reached. Refused (the server's live lessons are at their limit, the
    budget): the student still follows the room, told why."""
    code = ROOM.code or ""
    room = rooms.find(code)
    if room is None:
        stop_following(lesson)
        return
    refused = load_linked_model(room.model, "The teacher's model") if room.model else None
    if refused:  # the student's own copy would run on another model: a different lesson, so none
        ROOM.error = (f"Take over needs the teacher's model; you still follow room {room.code}. "
                      f"{refused}")
        return
    left = []
    with fair_share.TAKE_OVERS.turn() as mine:
        if not mine:
            ROOM.error = (
                f"{fair_share.TAKE_OVERS.at_once} other "
                f"student{'s are' if fair_share.TAKE_OVERS.at_once > 1 else ' is'} "
                f"taking over on this server right now, which is all it runs at once so the teacher's clicks stay "
                f"quick; you still follow room {room.code}, so press Take over again in a few seconds.")
            return
        del lesson.state.run  # the replay followed: the student's own run takes its place
        lesson.take_over(room.lesson, min(room.step, len(room.lesson.records) - 1), slot,
                              lambda: left.append(stop_following(lesson, keep_lesson=True)))
    slot.empty()
    if not left:
        reason = lesson.state.take("error", "")
        ROOM.error = (f"Take over could not start a lesson of your own, so you still follow "
                      f"room {room.code}: {reason or 'try again in a while.'}")


def student_bar(lesson: FollowedLesson, room: Room) -> None:
    """The banner, Take over and Leave, and the room's open question (the page ends with `follow`)."""
    a, b, c = st.columns([4, 1, 1], vertical_alignment="center")
    a.info(f"**Following room {room.code}.** The teacher moves the lesson; pick any view below, it moves only "
           "your screen.", icon=":material/groups:")
    taking = b.button("Take over", width="stretch",
                      help="Copy the lesson at this step into a lesson of your own, and go on alone.")
    c.button("Leave", on_click=stop_following, args=(lesson,), width="stretch")
    if taking:  # run here, not in a callback, so that its bar and Stop show while it runs
        take_over(lesson, st.empty())
        st.rerun()
    question = room.open_question
    if question is not None:
        sent = ROOM.sent == question.id
        with st.form("room_question", border=True):
            st.markdown(f"**The teacher asks:** {question.text}")
            st.number_input(f"Your answer ({question.unit})", min_value=0.0, step=1.0, value=None, key="room_answer")
            if st.form_submit_button("Send my answer" if not sent else "Change my answer"):
                value = ROOM.answer
                seat = ROOM.seat
                refusal = "Type a number first." if value is None else rooms.answer(room, question.id, value, seat)
                if refusal:
                    st.error(refusal)
                else:
                    ROOM.sent, ROOM.sent_value = question.id, value
                    sent = True
            if sent:  # on every run until the question closes, not only the one that sent it
                value = ROOM.sent_value  # 2,856,960 bytes, not 2.85696e+06
                shown = f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"
                st.success(f"Sent: {shown} {question.unit}. The engine's answer "
                           "shows when the teacher reveals it; you can change yours until then.")
    last = next((q for q in reversed(room.questions) if q.revealed), None)
    if last is not None and question is None:
        mine = last.answers.get(ROOM.seat)
        said = "you did not answer" if mine is None else f"you said {mine:,.0f}"
        st.caption(f"Revealed: {last.text} The engine's answer is **{last.answer:,.0f} {last.unit}**; {said}; "
                   f"{len(last.answers)} answered.")


@st.fragment(run_every=FALLBACK_S)
def follow_stage(lesson: FollowedLesson, code: str, data: dict, sentence: str | None, draw: Callable) -> None:
    """A follower's stage and its sentence: drawn with the page (`data`, at the views' step), then alone
    each time kvviz.ui.room_wake wakes this fragment, from the room's payload (every follower shares it;
    the browser keeps the steps before). `draw(data, sentence, step)` shows them; data may be JSON bytes."""
    room_wake.follow(code)
    if streamlit_door.whole_page_runs():
        del ROOM.full
        ROOM.setdefault("stage", {"seen": None}).update(steps=len(data["steps"]), step=data["step"],
                                                        sentence=sentence)
        draw(data, sentence, data["step"])
        _catch_up_bar(lesson, ROOM.get("teachers_step", data["step"]))
        return
    room = rooms.find(code)
    if (ROOM.take("full", False) or room is None or not rooms.seen(room, ROOM.seat)
            or page_state(room) != ROOM.state or "steps" not in (ROOM.stage or {})):
        st.rerun(scope="app")  # what only the whole page shows moved (or the student chose a step)
    held, payload = ROOM.stage, room.payload
    if payload and payload["stage"] != held["seen"]:  # the teacher stepped: the steps that moved
        if payload["lesson"] != ROOM.followed_lesson or payload["steps_from"] > held["steps"]:
            st.rerun(scope="app")  # a wake was lost: this browser lacks steps the payload builds on
        held.update(steps=payload["step"] + 1, step=payload["step"], sentence=payload["sentence"],
                    seen=payload["stage"], drawn=payload["stage"])
        lesson.state.run = lesson.follower(room.lesson, teachers_step(room))  # lists copied, no record: the
        # copy the student keeps should the room go, and what Catch up shows
        stage = payload["stage"]
    else:  # nothing new (the fallback's beat): the same picture, the browser's step kept. The last payload
        # again, not an empty one: should the browser never have drawn it (this run came first, or the run
        # that sent it stopped), it still has the steps that payload builds on
        stage = held.get("drawn") or json.dumps({"steps_from": held["steps"], "steps": [], "step": held["step"]})
    draw(stage.encode(), held["sentence"], held["step"])
    _catch_up_bar(lesson, teachers_step(room))


def stage_lost() -> None:
    """The browser lacks the steps a payload builds on: the whole page draws the stage whole."""
    ROOM.full = True


def _catch_up_bar(lesson: FollowedLesson, teachers: int) -> None:
    """One caption and Catch up, while the views below show another step than the teacher's."""
    if lesson.state.get("view", teachers) != teachers:
        left, right = st.columns([5, 1], vertical_alignment="center")
        left.caption(CAUGHT_UP)
        right.button("Catch up", on_click=catch_up, args=(lesson,), width="stretch", key="room_catch_up",
                     help="Show the teacher's step in the views below too.")


def step_payload(lesson: FollowedLesson, run, step: int, before: dict) -> dict:
    """The teacher's `step` as every follower draws it, built once: the stage's data for the steps that
    moved since the payload `before` (just this step when the teacher looked back or the lesson is new),
    as JSON text, and the step's sentence. Not the run again: each follower's browser holds the
    steps before. Plain JSON-able values, so that it can travel between processes."""
    replay = lesson.follower(run, step)
    data = lesson.stage_data(replay, step, False)
    token = lesson_token(run)
    first = min(before["step"] + 1, step) if before.get("lesson") == token else step
    data.pop("presenter", None)  # each follower's own (the browser keeps it)
    data["steps_from"], data["steps"] = first, data["steps"][first:]
    return {"lesson": token, "step": step, "progress": lesson.progress(run), "steps_from": first,
            "sentence": lesson.sentence(replay, step), "stage": json.dumps(data, separators=(",", ":"))}
