"""Speculative decoding: what the lesson is (kvviz.lessons.lesson.Lesson), for kvviz.lessons.lecture."""

from kvviz.lessons.lesson import Lesson
from kvviz.lessons.speculative import state

LESSON = Lesson("speculative", "Speculative decoding", ":material/fast_forward:",
                "Beyond the article: guess the next tokens from earlier text, check them all in one forward pass, "
                "and roll back the cache slots of the wrong guesses.", 6,
                prefix="spec_", parts=(state.KEYS,), stepped=state.STEPS)
