"""A lesson in a room (kvviz.ui.rooms): the teacher's panel, and the students who follow.

Every engine-driven lesson's Stepped (kvviz.lessons.stepped) carries a `RoomPart`: a function that
copies the teacher's run as a replay at a step, one that runs the same settings to that step on the
student's own engine (Take over), and the stage's data and sentence of a step; where its run and its
step in view live in session state, its page and its lesson files are the Stepped's. A student's page
opened with ?room=CODE (its seat is the session's own, never in the link: a link passed on cannot take
another student's seat) shows the teacher's lesson as that replay: every view works, nothing runs a
model, and the student picks views and tabs without moving anyone.

When the teacher steps, the room keeps one payload for every follower (`step_payload`: the stage's
data for the steps that moved, already JSON, and the step's sentence), and kvviz.ui.room_wake asks
each follower's session, from the server, to rerun one fragment (`follow_stage`): the stage and its
sentence, drawn from that payload. The rest of the page does not rerun: the views below show the
teacher's step as of the page's last rerun (or the step the student picked), and Catch up brings
them to the teacher's now. A new lesson, a question, a reveal and a closed room rerun the whole page. A
link opened on another lesson's page goes to the room's own page.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from kvviz.ui import rooms
from kvviz.ui.session_keys import Keys

KEYS = Keys(clears=frozenset({"room_code", "room_seat", "room_seat_token", "room_query_done", "room_error",
                              "room_state", "room_answer", "room_sent", "room_sent_value", "room_followed_lesson",
                              "room_stage", "room_full", "room_teachers_step", "room_views_step", rooms.SESSION_KEY}))
FALLBACK_S = 10.0  # a follower's stage asks on its own this often, should a wake be lost; it keeps the seat too
CAUGHT_UP = "The stage moves with the teacher; the views below stay where they are until you press **Catch up**."


@dataclass(frozen=True)
class RoomPart:
    """What a stepped lesson (kvviz.lessons.stepped.Stepped, its `room`) adds so that a room can follow it.
    Its keys, page and lesson files are the Stepped's own."""

    follower: Callable  # (teacher's run, step) -> a replay of it at that step, sharing no list with it
    take_over: Callable  # (lesson: Stepped, teacher's run, step, slot, started) -> None: the same settings run to
    # that step, this session's own, a bar with Stop in slot (an st.empty()); started() once its first step ran
    stage: Callable  # (run, step, presenter) -> the stage's data (kvviz.ui.stage)
    questions: Callable = lambda run: []  # (teacher's run) -> list[kvviz.rooms.types.RoomQuestion] asked on the page
    progress: Callable = lambda run: 0  # (run) -> a number that grows when followers must redraw the same step
    sentence: Callable = lambda run, step: None  # (run, step) -> the line over the stage, when the page has one


class RoomKeys(Protocol):
    """The session keys a room reads and writes on a lesson's page."""

    @property
    def run(self) -> str: ...  # the run: the teacher's copy, on a student's page

    @property
    def view(self) -> str: ...  # the step in view

    @property
    def error(self) -> str: ...  # the lesson's refusal, which Take over quotes


class FollowedLesson(Protocol):
    """What a room needs of a lesson (kvviz.lessons.stepped.Stepped is one; room_student and room_teacher, which
    stepped.py imports, read it through this)."""

    @property
    def page(self) -> str: ...  # its key in the catalog

    @property
    def keys(self) -> RoomKeys: ...

    @property
    def room(self) -> RoomPart | None: ...
