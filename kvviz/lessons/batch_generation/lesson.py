"""Batch generation: what the lesson is (kvviz.lessons.lesson.Lesson), for kvviz.lessons.lecture."""

from kvviz.lessons.batch_generation import state
from kvviz.lessons.lesson import Lesson

LESSON = Lesson("batch_generation", "Batch generation", ":material/dynamic_feed:",
                "Many prompts through the same engine with continuous batching, and its throughput.", 5,
                prefix="batch_", parts=(state.KEYS,))
