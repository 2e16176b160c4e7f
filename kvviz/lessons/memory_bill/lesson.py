"""Memory bill for kvviz.lessons.registry: its key prefix: its inputs only, which stay when a model loads."""

from kvviz.lessons.lesson_state import LessonState

LESSON = LessonState("memory_bill", "bill_")
