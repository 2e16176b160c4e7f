"""Session state and callbacks of the "Paged cache and batching" lesson."""

from __future__ import annotations

import streamlit as st

from kvviz.lessons import stepped
from kvviz.lessons.paged_batching import room
from kvviz.lessons.paged_batching.file import export_paged, import_paged
from kvviz.lessons.paged_batching.logic import DEFAULT_REQUESTS, PagedLesson, RequestSpec
from kvviz.lessons.paged_batching.stage import stage_data
from kvviz.lessons.room_view import InRoom
from kvviz.ui.common import current_model
from kvviz.ui.session_keys import Keys, SessionState, Slot

BLOCK_SIZES, POOL_SIZES = (2, 32), (2, 128)  # what the sliders offer
DEFAULT_TABLE = [{"prompt": p, "arrives at step": a, "max tokens": m} for p, a, m in DEFAULT_REQUESTS]
DEFAULTS = {"paged_block_size": 8, "paged_num_blocks": 40, "paged_prefix": True}  # the pool's settings


class PagedState(SessionState):
    """The page's own inputs beside its run's (STEPS.state): the requests' table and the question's request."""

    editor = Slot("paged_editor", default={})  # the table's edits, as Streamlit's data editor keeps them
    requests_table = Slot("paged_requests_table", default=DEFAULT_TABLE)  # the table with them applied
    question_request = Slot("paged_question_request")  # the request a question asks about


PAGED = PagedState()


def request_specs() -> list[RequestSpec]:
    rows = PAGED.requests_table
    specs = []
    for row in rows:
        prompt = row.get("prompt") or ""
        if not str(prompt).strip():
            continue
        specs.append(RequestSpec(str(prompt).replace("\\n", "\n"), int(row.get("arrives at step") or 0),
                                 int(row.get("max tokens") or 16)))
    return specs


def _setting(key: str):
    return st.session_state.get(key, DEFAULTS[key])


class PagedSteps(stepped.Stepped, InRoom):
    """The paged pool taken an engine step at a time; a room follows it, and its page asks questions."""

    keys = stepped.StepKeys("paged_", view="paged_view_step", asks=True, extra=(PagedState.question_request.key,))
    page, file_name = "paged_batching", "kvviz-paged-batching.json"

    def new(self) -> PagedLesson:
        return PagedLesson.start(current_model(), request_specs(), int(_setting("paged_block_size")),
                                 int(_setting("paged_num_blocks")), bool(_setting("paged_prefix")))

    def step(self, run: PagedLesson) -> bool:
        return run.step() is not None

    def export(self, run: PagedLesson, step: int) -> str:
        return export_paged(run, step)

    def read_file(self, data: bytes) -> tuple[PagedLesson, int]:
        return import_paged(data)

    def file_settings(self, run: PagedLesson) -> dict:
        """The controls a replayed file sets, with what each control offers."""
        return {"paged_block_size": (run.block_size, *BLOCK_SIZES),
                "paged_num_blocks": (run.num_blocks, *POOL_SIZES),
                "paged_prefix": (run.enable_prefix_caching, None, None)}

    def follower(self, run: PagedLesson, step: int) -> PagedLesson:
        return room.follower(run, step)

    def take_over(self, run: PagedLesson, step: int, slot, started) -> None:
        room.take_over(self, run, step, slot, started)

    def stage_data(self, run: PagedLesson, step: int, presenter: bool) -> dict:
        return stage_data(run, step, presenter)

    def questions(self, run: PagedLesson) -> list:
        return room.questions(run, self.state.get("questions", []))


STEPS = PagedSteps()
KEYS = Keys(clears=STEPS.cleared_keys())  # the other paged_* widgets (the uploader too) stay


def paged() -> PagedLesson | None:
    return stepped.current(STEPS)
