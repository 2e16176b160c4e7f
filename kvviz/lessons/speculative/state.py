"""Session state, callbacks and token chips of the "Speculative decoding" lesson."""

from __future__ import annotations

import html

import streamlit as st

from kvviz.lessons import stepped
from kvviz.lessons.room_view import InRoom
from kvviz.lessons.speculative import room
from kvviz.lessons.speculative.figures import ACCEPTED, MODEL, REJECTED
from kvviz.lessons.speculative.file import export_speculative, import_speculative
from kvviz.lessons.speculative.logic import DEFAULT_PROMPT, DraftStep, SpeculativeLesson
from kvviz.lessons.speculative.stage import stage_data
from kvviz.ui.common import current_model
from kvviz.ui.session_keys import Keys

DRAFTS, MAX_TOKENS, BLOCK_SIZES = (1, 8), (8, 128), (2, 16)  # what the sliders offer
PROMPT_BOX_CHARS = 20_000  # the longest prompt a replayed file puts into the prompt box
DEFAULTS = {"spec_prompt": DEFAULT_PROMPT, "spec_k": 4, "spec_max_tokens": 48, "spec_block_size": 4}


def _setting(key: str):
    return st.session_state.get(key, DEFAULTS[key])


class SpeculativeSteps(stepped.Stepped, InRoom):
    """Speculative decoding taken a forward pass at a time; a room follows it."""

    # the slider counts passes from 1 and has a key of its own; "spec_view" is the index of the pass's record
    keys = stepped.StepKeys("spec_", view="spec_view", slider="spec_view_step")
    page, file_name, admit = "speculative", "kvviz-speculative.json", True

    def new(self) -> SpeculativeLesson:
        return SpeculativeLesson.start(current_model(), _setting("spec_prompt"), int(_setting("spec_k")),
                                       int(_setting("spec_max_tokens")), int(_setting("spec_block_size")))

    def step(self, run: SpeculativeLesson) -> bool:
        return run.step()

    def export(self, run: SpeculativeLesson, step: int) -> str:
        return export_speculative(run, step)

    def read_file(self, data: bytes) -> tuple[SpeculativeLesson, int]:
        return import_speculative(data)

    def file_settings(self, run: SpeculativeLesson) -> dict:
        """The controls a replayed file sets, with what each control offers."""
        asked = run.settings
        controls = {"spec_k": (asked["num_speculative"], *DRAFTS),
                    "spec_max_tokens": (asked["max_tokens"], *MAX_TOKENS),
                    "spec_block_size": (asked["block_size"], *BLOCK_SIZES)}
        if len(asked["prompt"]) <= PROMPT_BOX_CHARS:  # a file's text is untrusted: the box takes a prompt's worth
            controls["spec_prompt"] = (asked["prompt"], None, None)
        return controls

    def follower(self, run: SpeculativeLesson, step: int) -> SpeculativeLesson:
        return room.follower(run, step)

    def take_over(self, run: SpeculativeLesson, step: int, slot, started) -> None:
        room.take_over(self, run, step, slot, started)

    def stage_data(self, run: SpeculativeLesson, step: int, presenter: bool) -> dict:
        return stage_data(run, step, presenter)

    def progress(self, run: SpeculativeLesson) -> int:
        return room.progress(run)


STEPS = SpeculativeSteps()
KEYS = Keys(clears=STEPS.cleared_keys(),  # the other spec_* widgets (the uploader too) stay
            kept=("spec_prompt", "spec_k", "spec_max_tokens", "spec_block_size"))  # the run's settings


def lesson() -> SpeculativeLesson | None:
    return stepped.current(STEPS)


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
