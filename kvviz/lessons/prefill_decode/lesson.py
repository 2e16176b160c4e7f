"""Prefill and decode: what the lesson is (kvviz.lessons.lesson.Lesson), for kvviz.lessons.lecture."""

from kvviz.lessons.lesson import Lesson
from kvviz.lessons.prefill_decode import classroom, explain_views, state

LESSON = Lesson("prefill_decode", "Prefill and decode", ":material/play_circle:",
                "A real model fills its cache with the prompt, then adds one token per step; where K, V and Q "
                "come from, the causal triangle, and why decode is memory-bound.", 15,
                prefix="lesson_", parts=(state.KEYS, explain_views.KEYS, classroom.KEYS), stepped=state.STEPS)
