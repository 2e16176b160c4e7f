"""Session state and callbacks of the "Paged cache and batching" lesson."""

from __future__ import annotations

import streamlit as st

from kvviz.engine import EngineError
from kvviz.lessons.paged_batching.file import export_paged, import_paged
from kvviz.lessons.paged_batching.logic import DEFAULT_REQUESTS, PagedLesson, RequestSpec
from kvviz.ui.common import bound_export, current_model, drop, show_file_settings
from kvviz.ui.stage import chosen_step

KEYS = frozenset({"lesson_paged", "paged_view_step", "paged_error", "paged_questions", "paged_question_request",
                  "paged_upload_error"})  # the uploader itself is an input, kept
INPUTS = ("paged_",)  # the other paged_* widgets stay when another model loads
BLOCK_SIZES, POOL_SIZES = (2, 32), (2, 128)  # what the sliders offer
DEFAULT_TABLE = [{"prompt": p, "arrives at step": a, "max tokens": m} for p, a, m in DEFAULT_REQUESTS]


def paged() -> PagedLesson | None:
    return st.session_state.get("lesson_paged")


def request_specs() -> list[RequestSpec]:
    rows = st.session_state.get("paged_requests_table", DEFAULT_TABLE)
    specs = []
    for row in rows:
        prompt = row.get("prompt") or ""
        if not str(prompt).strip():
            continue
        specs.append(RequestSpec(str(prompt).replace("\\n", "\n"), int(row.get("arrives at step") or 0),
                                 int(row.get("max tokens") or 16)))
    return specs


def on_start() -> None:
    st.session_state.pop("paged_error", None)
    state = st.session_state
    try:
        lesson = PagedLesson.start(current_model(), request_specs(), int(state.get("paged_block_size", 8)),
                                   int(state.get("paged_num_blocks", 40)), bool(state.get("paged_prefix", True)))
    except EngineError as error:
        st.session_state["paged_error"] = str(error)
        return
    try:
        lesson.step()
    except EngineError as error:  # the model's logits are NaN or infinite: the engine stopped the requests
        st.session_state["paged_error"] = str(error)
        return
    st.session_state["lesson_paged"] = lesson
    st.session_state["paged_view_step"] = 0
    st.session_state["paged_questions"] = []  # they asked about the previous run's steps


def on_step(count: int = 1) -> None:
    lesson = paged()
    if lesson is None:
        on_start()
        return
    try:
        for _ in range(count):
            if lesson.step() is None:
                break
    except EngineError as error:  # NaN or infinite logits midway: the run keeps the steps it has
        st.session_state["paged_error"] = str(error)
    st.session_state["paged_view_step"] = len(lesson.records) - 1


def on_stage_step() -> None:
    """The stage moved to another step in the browser: the views below follow it."""
    current, chosen = paged(), chosen_step("paged_stage")
    if current is not None and chosen is not None:
        st.session_state["paged_view_step"] = min(int(chosen), len(current.records) - 1)


def exporter():
    """The export button's function: the run as a lesson file, opening at the step in view."""
    return bound_export(paged(), "paged_view_step", export_paged)


def replay(data: bytes) -> None:
    """Replay an uploaded run (raises LessonFileError, and then the current run stays)."""
    lesson, view_step = import_paged(data)
    show_file_settings({"paged_block_size": (lesson.block_size, *BLOCK_SIZES),
                        "paged_num_blocks": (lesson.num_blocks, *POOL_SIZES),
                        "paged_prefix": (lesson.enable_prefix_caching, None, None)})
    st.session_state["lesson_paged"] = lesson
    st.session_state["paged_view_step"] = view_step
    st.session_state["paged_questions"] = []
    st.session_state.pop("paged_error", None)


def reset(state) -> None:
    """Forget this lesson's run when another model loads: it belongs to the model it ran on."""
    drop(state, KEYS)
