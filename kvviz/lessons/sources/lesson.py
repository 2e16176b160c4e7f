"""Where this comes from for kvviz.lessons.registry: its key prefix (its page keeps no state)."""

from kvviz.lessons.lesson_state import LessonState

LESSON = LessonState("sources", "sources_")
