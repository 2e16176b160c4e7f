"""Batch generation for kvviz.lessons.registry: its key prefix and its modules' keys."""

from kvviz.lessons.lesson_state import LessonState
from kvviz.lessons.batch_generation import state

LESSON = LessonState("batch_generation", "batch_", (state.KEYS,))
