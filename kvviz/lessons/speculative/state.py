"""Session state, callbacks and token chips of the "Speculative decoding" lesson."""

from __future__ import annotations

import html

import streamlit as st

from kvviz.engine import EngineError
from kvviz.lessons.speculative.figures import ACCEPTED, MODEL, REJECTED
from kvviz.lessons.speculative.file import export_speculative, import_speculative
from kvviz.lessons.speculative.logic import DEFAULT_PROMPT, DraftStep, SpeculativeLesson
from kvviz.ui import live_lessons
from kvviz.ui.common import bound_export, current_model, drop, show_file_settings
from kvviz.ui.stage import chosen_step

KEY = "lesson_speculative"
DRAFTS, MAX_TOKENS, BLOCK_SIZES = (1, 8), (8, 128), (2, 16)  # what the sliders offer
PROMPT_BOX_CHARS = 20_000  # the longest prompt a replayed file puts into the prompt box
KEYS = frozenset({KEY, "spec_view", "spec_view_step", "spec_error",  # reset() drops them when another model loads
                  "spec_upload_error"})
INPUTS = ("spec_",)  # the other spec_* widgets (the uploader too) stay


def lesson() -> SpeculativeLesson | None:
    return st.session_state.get(KEY)


def on_start() -> None:
    state = st.session_state
    state.pop("spec_error", None)
    try:
        new = SpeculativeLesson.start(current_model(), state.get("spec_prompt", DEFAULT_PROMPT),
                                      int(state.get("spec_k", 4)), int(state.get("spec_max_tokens", 48)),
                                      int(state.get("spec_block_size", 4)))
    except EngineError as error:
        state["spec_error"] = str(error)
        return
    refusal = live_lessons.admit(new)  # its two engines count against the server's live lessons
    if refusal is not None:
        state["spec_error"] = refusal
        return
    try:
        new.step()  # the prefill: the first token, no drafts yet
    except EngineError as error:  # the model's logits are NaN or infinite: the engine stopped the request
        state["spec_error"] = str(error)
        return
    state[KEY] = new
    state["spec_view"] = 0


def on_step(count: int = 1) -> None:
    current = lesson()
    if current is None:
        on_start()
        return
    try:
        for _ in range(count):
            if not current.step():
                break
    except EngineError as error:  # NaN or infinite logits midway: the run keeps the passes it has
        st.session_state["spec_error"] = str(error)
    st.session_state["spec_view"] = len(current.records) - 1


def on_look_back() -> None:
    """Keep the pass the slider shows outside the widget, so it survives a visit to another page.
    The slider counts passes from 1; "spec_view" is the index of the pass's record."""
    st.session_state["spec_view"] = st.session_state["spec_view_step"] - 1


def on_stage_step() -> None:
    """The stage moved to another pass in the browser: the views below follow it."""
    current, chosen = lesson(), chosen_step("spec_stage")
    if current is not None and chosen is not None:
        st.session_state["spec_view"] = min(int(chosen), len(current.records) - 1)


def exporter():
    """The export button's function: the run as a lesson file, opening at the pass in view."""
    return bound_export(lesson(), "spec_view", export_speculative)


def replay(data: bytes) -> None:
    """Replay an uploaded run (raises LessonFileError, and then the current run stays)."""
    run, view = import_speculative(data)
    asked = run.settings
    controls = {"spec_k": (asked["num_speculative"], *DRAFTS), "spec_max_tokens": (asked["max_tokens"], *MAX_TOKENS),
                "spec_block_size": (asked["block_size"], *BLOCK_SIZES)}
    if len(asked["prompt"]) <= PROMPT_BOX_CHARS:  # a file's text is untrusted: the box takes a prompt's worth
        controls["spec_prompt"] = (asked["prompt"], None, None)
    show_file_settings(controls)
    st.session_state[KEY], st.session_state["spec_view"] = run, view
    st.session_state.pop("spec_error", None)


def reset(state) -> None:
    """Forget this lesson's run when another model loads: it belongs to the model it ran on."""
    drop(state, KEYS)


def _chip(text: str, color: str, title: str, struck: bool = False) -> str:
    label = html.escape(text).replace("\n", "⏎").replace(" ", "&nbsp;") or "&nbsp;"
    line = "text-decoration:line-through;" if struck else ""
    return (f"<span title='{title}' style='background:{color};color:white;border-radius:6px;padding:2px 6px;"
            f"margin:2px;display:inline-block;font-family:monospace;font-size:1.15rem;{line}'>{label}</span>")


def draft_chips(row: DraftStep, decode, context: list[int]) -> str:
    """The end of the context (grey), the accepted drafts (green), the token the model chose
    itself (blue), then the rejected drafts (red, struck: rolled back)."""
    chips = [_chip(decode([t]), "#9CA3AF", "context") for t in context[-6:]]
    chips += [_chip(decode([t]), ACCEPTED, "draft accepted") for t in row.draft_token_ids[:row.num_accepted]]
    chips += [_chip(decode([t]), MODEL, "the model's own token") for t in row.added_token_ids[row.num_accepted:]]
    chips += [_chip(decode([t]), REJECTED, "draft rejected: rolled back", struck=True)
              for t in row.draft_token_ids[row.num_accepted:]]
    return "<div style='line-height:2.2'>" + "".join(chips) + "</div>"
