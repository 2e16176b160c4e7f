"""One stepped lesson: a run taken a step at a time, its stage, its files, its room and its toolbar.

Prefill and decode, Paged cache and batching and Speculative decoding each implement `Stepped` in a class
(its one object is their state module's STEPS): its page, its session keys, named once in `StepKeys`, how a
run starts and steps, and how its lesson files are written and read; their classes implement
kvviz.lessons.room_view.InRoom too, how a room follows them.
The callbacks and the page parts below serve all three; a page keeps its layout and what only its
lesson shows.
"""

from __future__ import annotations

import threading
import time
import weakref
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Protocol, runtime_checkable

import streamlit as st

from kvviz.engine.errors import EngineError
from kvviz.lessons import room_student, room_teacher
from kvviz.lessons.budget import click_seconds
from kvviz.lessons.files import MAX_LESSON_BYTES, LessonFileError
from kvviz.lessons.room_address import room_address
from kvviz.lessons.room_view import ROOM
from kvviz.lessons.uploads import file_buttons
from kvviz.rooms.types import Room
from kvviz.ui import live_lessons, presenter, rooms
from kvviz.ui.common import bound_export, show_file_settings
from kvviz.ui.progress import StopBar
from kvviz.ui.session_keys import SessionState, Slot, drop
from kvviz.ui.stage import chosen_step, show_stage

PLAY_DELAYS = {"slow": 1.5, "normal": 0.7, "fast": 0.25}  # seconds between Play's steps


@dataclass(frozen=True)
class StepKeys:
    """A stepped lesson's session-state keys. Those a run leaves go with Reset and with a model change."""

    prefix: str  # every key below starts with it: "lesson_", "paged_", "spec_"
    view: str  # the index of the step in view
    slider: str = ""  # the look-back slider, when it is not the view itself (one counting from 1)
    asks: bool = False  # a predict-then-reveal list under prefix + "questions"
    plays: bool = False  # a Play button (prefix + "playing", "last_tick", "ticker_inline", "speed")
    extra: tuple[str, ...] = ()  # other keys a run leaves behind

    # the keys named after the prefix
    run = property(lambda self: self.prefix + "run")  # the run: the lesson object
    error = property(lambda self: self.prefix + "error")  # the last refusal's one sentence
    stage = property(lambda self: self.prefix + "stage")  # the stage component
    upload = property(lambda self: self.prefix + "upload")  # the lesson-file uploader (and upload + "_error")
    questions = property(lambda self: self.prefix + "questions")
    playing = property(lambda self: self.prefix + "playing")
    last_tick = property(lambda self: self.prefix + "last_tick")  # when Play last stepped
    ticker_inline = property(lambda self: self.prefix + "ticker_inline")  # Play's fragment runs inside the page
    speed = property(lambda self: self.prefix + "speed")  # Play's speed picker
    # a step just ran: show the newest. No widget owns this key, so a browser message that carries the
    # look-back slider one step behind (Play at "fast") cannot pull the view back.
    stepped = property(lambda self: self.prefix + "stepped")
    run_to_end = property(lambda self: self.prefix + "run_to_end")  # Run to the end was pressed: the page runs it

    def run_keys(self) -> frozenset[str]:
        """What a run leaves: Reset drops it, and so does loading another model."""
        keys = {self.run, self.view, self.slider or self.view, self.error, self.upload + "_error", self.stepped,
                self.run_to_end, *self.extra}
        keys |= {self.questions} if self.asks else set()
        return frozenset(keys | ({self.playing} if self.plays else set()))


class StepState(SessionState):
    """A stepped lesson's run in this session, read and written under the keys its StepKeys names."""

    run = Slot()
    view = Slot()
    slider = Slot()
    error = Slot()
    questions = Slot()
    playing = Slot(default=False)
    last_tick = Slot(default=0.0)
    ticker_inline = Slot(default=False)
    speed = Slot(default="normal")
    stepped = Slot(default=False)
    run_to_end = Slot(default=False)

    def __init__(self, keys: StepKeys):
        self.keys = keys

    def key_for(self, name: str) -> str:
        return getattr(self.keys, name)


@runtime_checkable
class Stepped(Protocol):
    """What one stepped lesson implements for the controller, its files and the lecture: a class per lesson, its
    one object in the lesson's state module (STEPS). A room can follow it when its class implements
    kvviz.lessons.room_view.InRoom too."""

    keys: StepKeys
    page: str  # its key in the lecture (kvviz.lessons.lecture): its page's URL path, a room's page
    file_name: str  # what Export names the lesson file
    admit: bool = False  # counts against the server's live lessons (kvviz.ui.live_lessons)
    settings: frozenset[str] = frozenset()  # inputs a model change clears, Reset keeps

    @abstractmethod
    def new(self):
        """A run from the page's settings, not stepped yet (raises EngineError)."""

    @abstractmethod
    def step(self, run):
        """One step of `run`: falsy when it had no step left to take (raises EngineError)."""

    @abstractmethod
    def export(self, run, step: int) -> str:
        """The lesson file's JSON of `run`, with `step` in view."""

    @abstractmethod
    def read_file(self, data: bytes) -> tuple:
        """(the replayed run, its step in view) of a lesson file (raises LessonFileError)."""

    def first(self, run):
        """The run's first step (the prefill)."""
        return self.step(run)

    def file_settings(self, run) -> dict:
        """show_file_settings' controls for a replay."""
        return {}

    def last(self, run) -> int:
        """The newest step the views may show."""
        return len(run.records) - 1

    def done(self, run) -> bool:
        """No step left: Play stops."""
        return False

    def reveal(self, run, step: int) -> None:
        """A replay stepped by hand shows up to `step`."""

    def exportable(self, run) -> bool:
        return True

    @property
    def state(self) -> StepState:
        """This session's run of it: its run, step in view, error, Play (kvviz.ui.session_keys)."""
        return StepState(self.keys)

    def room_file(self, run) -> str:
        """The teacher's run as its lesson file's text, as a room in Redis carries it; LessonFileError past the
        size every process's replay of it would refuse (a lesson file's, MAX_LESSON_BYTES)."""
        text = self.export(run, 0)
        if len(text) > MAX_LESSON_BYTES:  # characters: never more than the bytes the replay counts
            raise LessonFileError(
                f"This lesson's file is {len(text) / 2**20:,.1f} MiB, more than the {MAX_LESSON_BYTES // 2**20} MiB a "
                "room carries to the class's other server processes; a room holds a shorter lesson (fewer tokens, "
                "or a smaller model).")
        return text

    def from_room_file(self, text):
        """A replay of a lesson file's text that a room carried (raises LessonFileError)."""
        return self.read_file(text)[0]

    def cleared_keys(self) -> frozenset[str]:
        """Every key a model change clears: the run's and the settings that fit one model."""
        return self.keys.run_keys() | self.settings


_STEPPING: dict[int, threading.Lock] = {}  # id(run) -> its lock, while the run lives
_STEPPING_GUARD = threading.Lock()


def stepping(run) -> threading.Lock:
    """The lock a run is stepped under. Stop (or any click) during a long run starts the page's next
    script run at once while the stopped one finishes the step it is in: without the lock the page drew
    the step before it and the next Next token showed two steps more (issue 33)."""
    with _STEPPING_GUARD:
        lock = _STEPPING.get(id(run))
        if lock is None:
            lock = _STEPPING[id(run)] = threading.Lock()
            weakref.finalize(run, _STEPPING.pop, id(run), None)
    return lock


# ---- callbacks -----------------------------------------------------------------------------------
def current(lesson: Stepped):
    """This session's run, or None (also when the server freed it while the session was away)."""
    run = lesson.state.run
    if run is not None and getattr(run, "released", False):
        del lesson.state.run
        return None
    return run


def start(lesson: Stepped) -> None:
    """A new run from the page's settings, with its first step; on an error the old run stays."""
    state, keys = lesson.state, lesson.keys
    del state.error
    try:
        run = lesson.new()
    except EngineError as error:
        state.error = str(error)
        return
    refusal = live_lessons.admit(run) if lesson.admit else None
    if refusal is not None:
        state.error = refusal
        return
    try:
        lesson.first(run)
    except EngineError as error:  # the model's logits are NaN or infinite: the engine stopped the request
        state.error = str(error)
        return
    state.run, state.view = run, 0
    if keys.asks:
        state.questions = []  # they asked about the previous run's steps


def step(lesson: Stepped, count: int = 1) -> None:
    """`count` steps (fewer when the run ends), the views on the newest; a first press starts a run.

    The session is read and written before the steps, so that a script run that Streamlit stops (at its
    next touch of st.session_state) stops between steps with the views already on the newest."""
    state, keys = lesson.state, lesson.keys
    run = current(lesson)
    if run is None:
        start(lesson)
        return
    playing = keys.plays and state.playing
    state.stepped = True  # the views show the newest step (step_in_view)
    try:
        for _ in range(count):
            with stepping(run):
                if not lesson.step(run):
                    break
    except EngineError as error:  # NaN or infinite logits midway: the run keeps the steps it has
        state.error = str(error)
        state.playing = False
    if playing and lesson.done(run):
        state.playing = False


def run_steps(lesson: Stepped, count: int, slot, what: str, most_seconds: float | None = None) -> None:
    """`count` steps one at a time, a bar with Stop in `slot` (an st.empty()) counting them as `what`;
    Stop keeps the steps taken (see kvviz.ui.progress). With `most_seconds`, it also ends once that much
    time has passed (the click's budget, measured, so a busy server stops as soon as a quiet one), and the
    lesson's error line says where and how to go on."""
    if count <= 0:
        return
    # Run to the end asks for up to RUN_TO_END_STEPS: its bar counts the steps taken, not "of 500" it never reaches
    bar = StopBar(slot, f"{lesson.keys.prefix}steps_stop", f"{what}: starting" if count >= RUN_TO_END_STEPS
                  else f"{what}: step 0 of {count:,}", "Ends at the step reached; the step buttons go on from there.")
    started = time.perf_counter()
    for done in range(count):
        run = current(lesson)
        if run is None or lesson.done(run):
            break
        if most_seconds is not None and time.perf_counter() - started > most_seconds:
            lesson.state.error = (
                f"Stopped after {done:,} steps and {most_seconds:,.0f} s, this server's budget for one click; "
                "press Run to the end again to go on.")
            break
        step(lesson)
        elapsed = time.perf_counter() - started
        bar.move((done + 1) / count, f"{what}: step {done + 1:,}, {elapsed:,.1f} s so far")
    slot.empty()


def request_run_to_end(lesson: Stepped) -> None:
    """Run to the end's callback: the page runs the steps in its script (run_to_end), where Stop reaches them."""
    lesson.state.run_to_end = True


def run_to_end(lesson: Stepped) -> None:
    """When Run to the end was pressed: step until the run ends, with a bar and Stop, within the click budget."""
    if lesson.state.take("run_to_end", False) and current(lesson) is not None:
        run_steps(lesson, RUN_TO_END_STEPS, st.empty(), "Running to the end", click_seconds())


RUN_TO_END_STEPS = 500


def toggle_play(lesson: Stepped) -> None:
    state = lesson.state
    state.playing = not state.playing
    if state.playing:  # the first step comes one beat after Play, like the rest
        state.last_tick = time.time()
    elif (run := current(lesson)) is not None:
        # Pause stops on the newest step. The ticker may have stepped in a run the browser never
        # drew, and the slider value sent with this press is then one step behind.
        state.view = lesson.last(run)


def stage_step(lesson: Stepped) -> None:
    """The stage moved to another step in the browser: the views below follow it, and moving by hand pauses."""
    keys = lesson.keys
    run, chosen = current(lesson), chosen_step(keys.stage)
    if run is None or chosen is None:
        return
    lesson.reveal(run, int(chosen))
    lesson.state.view = min(int(chosen), lesson.last(run))
    if keys.plays:
        lesson.state.playing = False


def look_back_moved(lesson: Stepped, base: int) -> None:
    """Keep the slider's step outside the widget, which Streamlit forgets while its page is away."""
    lesson.state.view = lesson.state.slider - base


def replay(lesson: Stepped, data: bytes) -> None:
    """Replay an uploaded lesson file (raises LessonFileError, and then the current run stays)."""
    state, keys = lesson.state, lesson.keys
    run, view = lesson.read_file(data)
    show_file_settings(lesson.file_settings(run))
    state.run, state.view = run, view
    if keys.asks:
        state.questions = []
    del state.error


def exporter(lesson: Stepped):
    """The export button's function (None before a run), bound as the page draws."""
    run = current(lesson)
    if run is not None and not lesson.exportable(run):
        return None
    return bound_export(run, lesson.keys.view, lesson.export)


_web_page: list = []  # kvviz.page.build.page_or_refusal, which app.py serves: kvviz.page imports the lessons


def serve_web_pages(make) -> None:
    """How a lesson file becomes one web page, make(lesson, file, link, tokenizer) (app.py passes
    kvviz.page.build.page_or_refusal; the lessons import no page builder)."""
    _web_page[:] = [make]


def web_page_maker(lesson: Stepped):
    """Download as a web page's function (None before a run, or where no page builder is served), bound as the
    page draws, as the export's is: the lesson file of the run on screen made into one page, or a page saying why
    it cannot be."""
    export = exporter(lesson)
    if export is None or not _web_page:
        return None
    link = f"{room_address(lesson.page)[0]}/{lesson.page}"  # this server, as a student's device reaches it
    tokenizer = getattr(current(lesson), "tokenizer", None)
    return lambda: _web_page[0](lesson, export(), link, tokenizer)


def reset_run(lesson: Stepped) -> None:
    """The Reset button: forget the run; the settings stay."""
    drop(st.session_state, lesson.keys.run_keys())


# ---- the page's shared parts -----------------------------------------------------------------------
def open_page(lesson: Stepped) -> Room | None:
    """Read a ?room=CODE link once; the room this session follows here (None when on its own)."""
    room_student.restore_from_query(lesson)
    room = room_student.followed_room(lesson)
    if ROOM.has("error"):
        st.error(ROOM.take("error"))
    return room


def header(title: str, run) -> None:
    """The lesson's title; a smaller one over a run, so the stage gets the height (none in presenter mode,
    whose top bar names the lessons)."""
    if run is None:
        st.title(title)
    elif not presenter.is_on():
        st.subheader(title, anchor=False)


def toolbar(lesson: Stepped, run, room, settings: Callable[[], None], settings_label: str,
            can_step: bool, start_help: str, popover_css: str = "") -> None:
    """Start, Step, Run to the end, Reset, and the settings: in full before a run, in a popover during one.
    A student's bar instead while following a room."""
    prefix = lesson.keys.prefix
    if run is None:
        settings()
        with st.container(key="lesson_controls"):  # where the skip link lands (kvviz.ui.skip_link)
            buttons = st.columns(4)
        buttons[0].button("Start", type="primary", on_click=start, args=(lesson,), width="stretch",
                          key=prefix + "start")
        buttons[1].button("Step", width="stretch", key=prefix + "step", disabled=True)
        buttons[2].button("Run to the end", width="stretch", key=prefix + "to_end", disabled=True)
    elif room is not None:  # a student: the teacher moves the run
        room_student.student_bar(lesson, room)
        return
    else:  # one toolbar row: the stage below gets the screen
        with st.container(key="lesson_controls"):
            buttons = st.columns([1, 1.5, 1, 2.3], vertical_alignment="bottom")
        buttons[0].button("Step", on_click=step, args=(lesson,), width="stretch", key=prefix + "step",
                          disabled=not can_step)
        buttons[1].button("Run to the end", on_click=request_run_to_end, args=(lesson,), width="stretch",
                          key=prefix + "to_end", disabled=not can_step)
    buttons[2 if run is not None else 3].button("Reset", on_click=reset_run, args=(lesson,), width="stretch",
                                                key=prefix + "reset")
    if run is not None:
        with buttons[3].popover(settings_label, icon=":material/tune:", width="stretch"):
            if popover_css:
                st.html(popover_css)
            settings()
            st.button("Start", type="primary", on_click=start, args=(lesson,), width="stretch",
                      key=prefix + "start", help=start_help)
        run_to_end(lesson)


def error(lesson: Stepped) -> None:
    if lesson.state.has("error"):
        st.error(lesson.state.error)


def player(lesson: Stepped, run) -> bool:
    """Play's beat: a fragment that steps once per beat while playing. Returns whether it plays."""
    playing = bool(lesson.state.playing)
    if not playing or run is None or lesson.done(run):
        return playing
    delay = PLAY_DELAYS[lesson.state.speed]

    @st.fragment(run_every=delay)
    def ticker():
        # Only the timer's reruns step. Stepping in the inline call too would st.rerun before the page below
        # is drawn, and when a step takes longer than the beat every full run would step again: the lesson
        # raced ahead on the server while the page never showed a new step.
        if lesson.state.ticker_inline or not lesson.state.playing:
            return
        if time.time() - lesson.state.last_tick >= delay * 0.9:
            step(lesson)
            lesson.state.last_tick = time.time()  # after the step: a slow step is not a beat
            st.rerun()

    lesson.state.ticker_inline = True
    ticker()
    lesson.state.ticker_inline = False
    return playing


def files(lesson: Stepped) -> None:
    """The export and replay buttons (kvviz.lessons.uploads)."""
    file_buttons(exporter(lesson), lesson.file_name, lesson.keys.upload, partial(replay, lesson),
                 web_page_maker(lesson))


def files_expander(lesson: Stepped) -> None:
    with st.expander("Export or replay a lesson"):
        files(lesson)


def step_in_view(lesson: Stepped, run, room, playing: bool = False) -> int:
    """The step the views show: the newest while playing, else the one chosen; a teacher's room follows it.

    Written back before the slider is drawn: the slider's maximum grows with every step, which gives
    it a new identity, and Streamlit would otherwise reset it to its first step."""
    with stepping(run):  # a stopped run of this page may be finishing its step
        last = lesson.last(run)
    chosen = lesson.state.get("view", last)
    shown = last if playing or lesson.state.take("stepped", False) else min(int(chosen), last)
    lesson.state.view = shown
    if room is None and not run.replay:
        room_teacher.publish(lesson, run, shown)  # followers move while this page draws
    return shown


def stage(lesson: Stepped, data: dict, room=None, sentence: str | None = None) -> None:
    """The stage component under its sentence (when the page has one): it steps in the browser and tells the
    server (stage_step). A follower's moves with the teacher's steps on its own (room_student.follow_stage)."""
    if room is not None:
        room_student.follow_stage(lesson, room.code, data, sentence, partial(followers_stage, lesson))
        return
    step_sentence(sentence)
    show_stage(data, key=lesson.keys.stage, on_step=partial(stage_step, lesson))


# The step's sentence sits in a box of a fixed height, so the stage under it stays in place from step to step
# however long a sentence grows (a four-line "Done." once pushed a projector's stage 150 px down); in presenter
# type it is 18 px, the stage's own size, and a longer one scrolls inside its box.
SENTENCE_CSS = """<style>
.st-key-step_sentence [data-testid='stAlertContainer'] {height: calc(LINES * 1.35 * 18px + 0.9rem + 2px);
  overflow-y: auto; box-sizing: border-box; padding: 0.45rem 0.9rem;}
.st-key-step_sentence [data-testid='stMarkdownContainer'] p {font-size: 18px !important; line-height: 1.35;}
@media (max-width: 640px) {  /* a phone scrolls the page, not the box: the whole sentence, however long */
  .st-key-step_sentence [data-testid='stAlertContainer'] {height: auto; overflow-y: visible;}
}
</style>"""


def step_sentence(sentence: str | None) -> None:
    """The step's sentence (markdown) over the stage, in its box of a fixed height; nothing when there is none."""
    if not sentence:
        return
    # two lines across a projector's whole width; three beside the sidebar, where the same sentence wraps sooner
    st.html(SENTENCE_CSS.replace("LINES", "2" if presenter.is_on() else "3"))
    with st.container(key="step_sentence"):
        st.success(sentence)


def followers_stage(lesson: Stepped, data: dict | bytes, sentence: str | None, step: int) -> None:
    step_sentence(sentence)
    show_stage(data, key=lesson.keys.stage, on_step=partial(follower_stage_step, lesson), step=step,
               on_lost=room_student.stage_lost)


def follower_stage_step(lesson: Stepped) -> None:
    """A follower stepped the stage: the views below follow it, in a whole page rerun (whose replay reaches
    the teacher's step: the stage may show steps the views' replay has not got yet)."""
    chosen = chosen_step(lesson.keys.stage)
    if chosen is not None:
        lesson.state.view = int(chosen)
    ROOM.full = True


def look_back(lesson: Stepped, shown: int, last: int, label: str, help: str, base: int = 0,
              disabled: bool = False) -> None:
    """A slider over the steps so far, counted from `base` (0, or 1 for passes), once there are two."""
    if last <= 0:
        return
    last = max(last, shown)  # a step a stopped run was finishing may have landed since the page counted its steps
    keys = lesson.keys
    if keys.slider:  # a slider of its own, kept in step with the view
        lesson.state.slider = shown + base
        st.slider(label, base, last + base, key=keys.slider, on_change=look_back_moved, args=(lesson, base),
                  help=help, disabled=disabled)
    else:
        st.slider(label, base, last + base, key=keys.view, help=help, disabled=disabled)


def room_panel(lesson: Stepped, run, shown: int, room) -> None:
    """A teacher's room, after the questions (a question asked this run reaches the room)."""
    if room is None and not run.replay and rooms.down() and rooms.teachers_room(lesson.page) is None:
        st.warning(rooms.down(), icon=":material/wifi_off:")  # no room while its server does not answer
    elif room is None and not run.replay:
        with st.expander("Show this lesson to the class (a room)", icon=":material/groups:",
                         expanded=rooms.teachers_room(lesson.page) is not None):
            room_teacher.teacher_panel(lesson, run, shown)

