"""Speculative decoding in a room (kvviz.lessons.room_view): the copy a student follows, and Take over."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import streamlit as st

from kvviz.lessons import stepped
from kvviz.lessons.speculative.logic import SpeculativeLesson


def follower(teacher: SpeculativeLesson, step: int) -> SpeculativeLesson:
    """The teacher's run as a replay at pass `step`. At the newest pass, plain decoding as far as it
    has got (it goes on after the drafts' run has finished); else the same number of plain passes.
    The stage's passes the teacher's page already built come along (a pass's drawing never changes)."""
    newest = step == len(teacher.records) - 1
    return replace(teacher, engine=None, plain=None, records=list(teacher.records[:step + 1]),
                   plain_records=list(teacher.plain_records if newest else teacher.plain_records[:step + 1]),
                   texts=dict(teacher.texts), prompt_token_ids=list(teacher.prompt_token_ids),
                   settings=dict(teacher.settings), released=False,
                   stage_steps=list(teacher.stage_steps[:step + 1]), room_answers=[])


def take_over(lesson: stepped.Stepped, teacher: SpeculativeLesson, step: int, slot, started: Callable) -> None:
    """The teacher's prompt and settings run to pass `step` on this session's own engines (greedy: the same
    passes), counted by a bar with Stop in `slot`; `started()` once the prefill pass ran."""
    asked = teacher.settings
    st.session_state.update({"spec_prompt": asked["prompt"], "spec_k": asked["num_speculative"],
                             "spec_max_tokens": asked["max_tokens"], "spec_block_size": asked["block_size"]})
    stepped.start(lesson)  # the prefill pass
    if stepped.current(lesson) is not None:
        started()
        stepped.run_steps(lesson, step, slot, "Your own copy of the lesson")


def progress(lesson: SpeculativeLesson) -> int:
    """Plain decoding's passes: they go on at the same newest pass once the drafts' run is done."""
    return len(lesson.plain_records)
