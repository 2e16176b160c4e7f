"""Putting it together: what the lesson is (kvviz.lessons.lesson.Lesson), for kvviz.lessons.lecture. It keeps its
inputs only, which stay when a model loads."""

from kvviz.lessons.lesson import Lesson

LESSON = Lesson("putting_it_together", "Putting it together", ":material/checklist:",
                "Which cache and which strategy for a script, a chat server and a long-context job, with this "
                "model's bill.", 3, prefix="together_")
