"""Paged cache and batching: what the lesson is (kvviz.lessons.lesson.Lesson), for kvviz.lessons.lecture."""

from kvviz.lessons.lesson import Lesson
from kvviz.lessons.paged_batching import fork_view, state, swap_view

LESSON = Lesson("paged_batching", "Paged cache and batching", ":material/grid_view:",
                "Blocks, block tables and prefix sharing: how several requests share one pool without waste.", 8,
                prefix="paged_", parts=(state.KEYS, fork_view.KEYS, swap_view.KEYS), stepped=state.STEPS)
