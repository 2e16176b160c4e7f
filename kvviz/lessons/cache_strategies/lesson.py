"""Cache strategies for kvviz.lessons.registry: its key prefix and its modules' keys."""

from kvviz.lessons.lesson_state import LessonState
from kvviz.lessons.cache_strategies import eviction_view, state

LESSON = LessonState("cache_strategies", "strategies_", (state.KEYS, eviction_view.KEYS))
