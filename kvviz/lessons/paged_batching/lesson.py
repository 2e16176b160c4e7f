"""Paged cache and batching for kvviz.lessons.registry: its key prefix, its modules' keys and its stepped run."""

from kvviz.lessons.lesson_state import LessonState
from kvviz.lessons.paged_batching import fork_view, state, swap_view

LESSON = LessonState("paged_batching", "paged_", (state.KEYS, fork_view.KEYS, swap_view.KEYS),
                     stepped=state.LESSON)
