"""Model lab: what the lesson is (kvviz.lessons.lesson.Lesson), for kvviz.lessons.lecture. It keeps its inputs
only, which stay when a model loads."""

from kvviz.lessons.lesson import Lesson

LESSON = Lesson("model_lab", "Model lab", ":material/science:",
                "Build a model of any size and time a decode step against context, cache on and off.", 5,
                prefix="lab_")
