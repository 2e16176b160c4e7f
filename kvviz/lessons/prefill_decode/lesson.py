"""Prefill and decode for kvviz.lessons.registry: its key prefix, its modules' keys and its stepped run."""

from kvviz.lessons.lesson_state import LessonState
from kvviz.lessons.prefill_decode import classroom, explain_views, state

LESSON = LessonState("prefill_decode", "lesson_", (state.KEYS, explain_views.KEYS, classroom.KEYS),
                     stepped=state.LESSON)
