"""Prefill and decode in a room (kvviz.lessons.room_view): the copy a student follows and the questions it sees
(Take over is the state module's PrefillSteps.take_over: it runs the lesson as the page does)."""

from __future__ import annotations

from dataclasses import replace

from kvviz.lessons.prefill_decode import predict
from kvviz.lessons.prefill_decode.inputs import RUN
from kvviz.lessons.prefill_decode.logic import PrefillLesson
from kvviz.rooms.types import RoomQuestion


def follower(teacher: PrefillLesson, step: int) -> PrefillLesson:
    """The teacher's lesson as a replay at `step`: the same record objects in lists of its own (the
    teacher's lists are emptied when that session ends), and the stage's steps the teacher's page
    already built (a step's drawing never changes once it ran)."""
    return replace(teacher, records=list(teacher.records[:step + 1]),
                   twin_records=list(teacher.twin_records[:step + 1]), traces=list(teacher.traces[:step + 1]),
                   token_texts=list(teacher.token_texts),
                   prompt_token_ids=list(teacher.prompt_token_ids), engine=None, twin=None, tokenizer=None,
                   replay=True, replay_position=step, stage_steps=list(teacher.stage_steps[:step + 1]),
                   room_answers=[],
                   done_at_copy=teacher.finished and step == len(teacher.records) - 1)


def questions(lesson: PrefillLesson) -> list[RoomQuestion]:
    """The predict-then-reveal questions the teacher asked, answered once the lesson reached their step."""
    asked = []
    for question in RUN.get("questions", []):
        predict.reveal(question, lesson)
        asked.append(RoomQuestion(f"{question.asked_at}_{question.kind}", question.text, question.unit,
                                  question.target, answer=question.answer))
    return asked
