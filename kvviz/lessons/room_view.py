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

from collections.abc import Callable
from dataclasses import dataclass

from kvviz.ui import rooms
from kvviz.ui.common import drop

KEYS = frozenset({"room_code", "room_seat", "room_seat_token", "room_query_done", "room_error", "room_state", "room_answer",
                  "room_sent", "room_sent_value", "room_followed_lesson", "room_stage", "room_full", "room_teachers_step",
                  "room_views_step", rooms.SESSION_KEY})
FALLBACK_S = 10.0  # a follower's stage asks on its own this often, should a wake be lost; it keeps the seat too
CAUGHT_UP = "The stage moves with the teacher; the views below stay where they are until you press **Catch up**."


@dataclass(frozen=True)
class RoomLesson:
    """What a lesson page gives its room."""

    page: str  # the lesson's key in the catalog: its page's URL path
    lesson_key: str  # session-state key of the lesson object
    step_key: str  # session-state key of the step in view (an index into its records)
    follower: Callable  # (teacher's lesson, step) -> a replay of it at that step, sharing no list with it
    take_over: Callable  # (teacher's lesson, step, slot, started) -> None: the same settings run to that step,
    # this session's own, a bar with Stop in slot (an st.empty()); started() once its first step ran
    questions: Callable = lambda lesson: []  # (teacher's lesson) -> list[room_types.RoomQuestion] asked on the page
    progress: Callable = lambda lesson: 0  # (lesson) -> a number that grows when followers must redraw the same step
    error_key: str = ""  # session-state key of the lesson's refusal (what Take over says when refused)
    files: object | None = None  # the lesson's kvviz.lessons.stepped.Stepped, whose files a room in Redis carries
    stage: Callable | None = None  # (lesson, step, presenter) -> the stage's data (kvviz.ui.stage)
    sentence: Callable = lambda lesson, step: None  # (lesson, step) -> the line over the stage, when the page has one

    def export_file(self, lesson) -> str:
        """The teacher's lesson as its lesson file's text, as a room in Redis carries it."""
        return self.files.export(lesson, 0)

    def read_file(self, text):
        """A replay of a lesson file's text (raises LessonFileError)."""
        return self.files.read_file(text)[0]


def reset(state) -> None:
    """Another model loaded: the room followed belongs to the old one."""
    drop(state, KEYS)
