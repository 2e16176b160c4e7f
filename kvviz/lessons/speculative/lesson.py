"""Speculative decoding for kvviz.lessons.registry: its key prefix, its modules' keys and its stepped run."""

from kvviz.lessons.lesson_state import LessonState
from kvviz.lessons.speculative import state

LESSON = LessonState("speculative", "spec_", (state.KEYS,), stepped=state.LESSON)
