"""Paged cache and batching in a room (kvviz.lessons.room_view): the copy a student follows, and Take over."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import streamlit as st

from kvviz.lessons import stepped
from kvviz.lessons.paged_batching.logic import PagedLesson
from kvviz.lessons.prefill_decode import predict
from kvviz.rooms.types import RoomQuestion


def follower(teacher: PagedLesson, step: int) -> PagedLesson:
    """The teacher's run as a replay at `step`: its records and texts up to there, and the stage's steps
    the teacher's page already built (a step's drawing never changes once it ran), in lists of its own."""
    return replace(teacher, engine=None, records=list(teacher.records[:step + 1]),
                   texts=list(teacher.texts[:step + 1]), request_ids=dict(teacher.request_ids),
                   prompt_lengths=dict(teacher.prompt_lengths),
                   stage_steps=list(teacher.stage_steps[:step + 1]), room_answers=[])


def take_over(lesson: stepped.Stepped, teacher: PagedLesson, step: int, slot, started: Callable) -> None:
    """The teacher's requests and pool run to `step` on this session's own engine (greedy: the same steps),
    counted by a bar with Stop in `slot`; `started()` once the first step ran."""
    st.session_state.update({
        "paged_requests_table": [{"prompt": spec.prompt, "arrives at step": spec.arrival_step,
                                  "max tokens": spec.max_tokens} for spec in teacher.specs],
        "paged_block_size": teacher.block_size, "paged_num_blocks": teacher.num_blocks,
        "paged_prefix": teacher.enable_prefix_caching})
    stepped.start(lesson)  # the first step
    if stepped.current(lesson) is not None:
        started()
        stepped.run_steps(lesson, step, slot, "Your own copy of the lesson")


def questions(lesson: PagedLesson, committed: list) -> list[RoomQuestion]:
    """"Which block comes next?" questions the teacher `committed`; answered by the first block the pool gives."""
    asked = []
    for question in committed:
        predict.reveal_block(question, lesson.records)
        asked.append(RoomQuestion(f"{question.asked_at}_{question.request_id}", question.text, "block id",
                                  question.answered_at if question.revealed else question.asked_at + 1,
                                  exact=True, answer=question.answer))
    return asked
