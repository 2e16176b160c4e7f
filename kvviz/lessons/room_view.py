"""A lesson in a room (kvviz.ui.rooms): the teacher's panel, and the students who follow.

Every engine-driven lesson's class (a kvviz.lessons.stepped.Stepped) implements `InRoom` too: a method that
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

from abc import abstractmethod
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from kvviz.ui import rooms
from kvviz.ui.session_keys import Keys, SessionState, Slot



class RoomState(SessionState):
    """The room this session follows (or teaches) on a lesson's page; all of it goes when another model loads."""

    code = Slot("room_code", clears=True)  # the room followed
    seat = Slot("room_seat", default="", clears=True)  # this session's seat in it
    seat_token = Slot("room_seat_token", clears=True)  # the seat made on the session's first room link
    query_done = Slot("room_query_done", clears=True)  # the ?room= link was read
    error = Slot("room_error", clears=True)  # one sentence: why the room cannot be followed
    state = Slot("room_state", clears=True)  # what only a whole page rerun shows (room_student.page_state)
    answer = Slot("room_answer", clears=True)  # the answer box
    sent = Slot("room_sent", clears=True)  # the question answered, and the answer sent
    sent_value = Slot("room_sent_value", default=0, clears=True)
    followed_lesson = Slot("room_followed_lesson", clears=True)  # the token of the teacher's lesson followed
    stage = Slot("room_stage", clears=True)  # the stage the follower's fragment drew last
    full = Slot("room_full", clears=True)  # the next fragment run reruns the whole page
    teachers_step = Slot("room_teachers_step", clears=True)
    views_step = Slot("room_views_step", clears=True)  # the step the views were put on, not the student's choice
    session = Slot(rooms.SESSION_KEY, clears=True)  # this session's name in rooms (kvviz.ui.rooms)


ROOM = RoomState()
KEYS = Keys(clears=RoomState.cleared_keys())
FALLBACK_S = 10.0  # a follower's stage asks on its own this often, should a wake be lost; it keeps the seat too
CAUGHT_UP = "The stage moves with the teacher; the views below stay where they are until you press **Catch up**."


@runtime_checkable
class InRoom(Protocol):
    """What a stepped lesson's class (kvviz.lessons.stepped.Stepped) implements too so that a room can follow it.
    Its keys, page and lesson files are the Stepped's own."""

    @abstractmethod
    def follower(self, run, step: int):
        """The teacher's run as a replay at `step`, sharing no list with it."""

    @abstractmethod
    def take_over(self, run, step: int, slot, started: Callable) -> None:
        """The teacher's settings run to `step`, this session's own, a bar with Stop in slot (an st.empty());
        started() once its first step ran."""

    @abstractmethod
    def stage_data(self, run, step: int, presenter: bool) -> dict:
        """The stage's data (kvviz.ui.stage) at `step`."""

    def questions(self, run) -> list:
        """The questions (kvviz.rooms.types.RoomQuestion) asked on the teacher's page."""
        return []

    def progress(self, run) -> int:
        """A number that grows when followers must redraw the same step."""
        return 0

    def sentence(self, run, step: int) -> str | None:
        """The line over the stage, when the page has one."""
        return None


class RoomKeys(Protocol):
    """The session keys a room reads and writes on a lesson's page."""

    @property
    def run(self) -> str: ...  # the run: the teacher's copy, on a student's page

    @property
    def view(self) -> str: ...  # the step in view

    @property
    def error(self) -> str: ...  # the lesson's refusal, which Take over quotes


class FollowedLesson(InRoom, Protocol):
    """What a room needs of a lesson (a stepped lesson's class implementing InRoom; room_student and room_teacher,
    which stepped.py imports, read it through this)."""

    @property
    def page(self) -> str: ...  # its key in the lecture

    @property
    def keys(self) -> RoomKeys: ...

    @property
    def state(self): ...  # its run's session state (kvviz.lessons.stepped.StepState): run, view, error
