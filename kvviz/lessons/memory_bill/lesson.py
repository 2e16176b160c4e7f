"""Memory bill: what the lesson is (kvviz.lessons.lesson.Lesson), for kvviz.lessons.lecture. It keeps its inputs
only, which stay when a model loads."""

from kvviz.lessons.lesson import Lesson

LESSON = Lesson("memory_bill", "Memory bill", ":material/calculate:",
                "What the cache weighs, what fits on a GPU, and what GQA, MQA, MLA, sliding windows and "
                "tensor parallelism change.", 8, prefix="bill_")
