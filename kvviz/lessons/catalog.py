"""The lessons as a list: their pages, titles, summaries and lecture order, and what each can do.

Navigation, the home page, the sources page, lesson files (whose `lesson` field is a key here) and rooms
read it; it imports no lesson, so every part of kvviz.lessons can. What owns each lesson's session state
is kvviz.lessons.registry, above the lessons, which imports them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Lesson:
    key: str  # its folder under kvviz/lessons/, its page script's stem, a lesson file's `lesson` field
    title: str
    icon: str
    summary: str  # one line for the home page
    minutes: int  # about how long it takes in class
    replays: bool = False  # exports and replays lesson files
    rooms: bool = False  # a teacher can open a room on it; its page reads a room link itself

    @property
    def path(self) -> str:
        """The page script, as st.Page and st.page_link take it."""
        return f"lessons/{self.key}.py"


# The article's arc first (prefill and decode, the bill, paging, strategies, putting it together), each
# lesson after the ones whose words it uses; Speculative decoding goes beyond the article, and the
# sources close the list. A word used before its lesson links forward (navigation.taught_later).
LECTURE = (
    Lesson("home", "What kvviz teaches", ":material/school:",
           "The idea in one paragraph and the path through the lessons.", 2),
    Lesson("prefill_decode", "Prefill and decode", ":material/play_circle:",
           "A real model fills its cache with the prompt, then adds one token per step; where K, V and Q "
           "come from, the causal triangle, and why decode is memory-bound.", 15, replays=True, rooms=True),
    Lesson("memory_bill", "Memory bill", ":material/calculate:",
           "What the cache weighs, what fits on a GPU, and what GQA, MQA, MLA, sliding windows and "
           "tensor parallelism change.", 8),
    Lesson("model_lab", "Model lab", ":material/science:",
           "Build a model of any size and time a decode step against context, cache on and off.", 5),
    Lesson("paged_batching", "Paged cache and batching", ":material/grid_view:",
           "Blocks, block tables and prefix sharing: how several requests share one pool without waste.", 8,
           replays=True, rooms=True),
    Lesson("batch_generation", "Batch generation", ":material/dynamic_feed:",
           "Many prompts through the same engine with continuous batching, and its throughput.", 5),
    Lesson("cache_strategies", "Cache strategies", ":material/compare_arrows:",
           "Dynamic, static, sliding-window and quantized caches side by side: bytes, time and output.", 6,
           replays=True),
    Lesson("putting_it_together", "Putting it together", ":material/checklist:",
           "Which cache and which strategy for a script, a chat server and a long-context job, with this "
           "model's bill.", 3),
    Lesson("speculative", "Speculative decoding", ":material/fast_forward:",
           "Beyond the article: guess the next tokens from earlier text, check them all in one forward pass, "
           "and roll back the cache slots of the wrong guesses.", 6, replays=True, rooms=True),
    Lesson("sources", "Where this comes from", ":material/menu_book:",
           "The papers and code each lesson rests on, with links.", 2),
)
BY_KEY = {lesson.key: lesson for lesson in LECTURE}


def index_of(title: str) -> int | None:
    """Index in LECTURE of the page with this title (None if it is not a lesson)."""
    return next((i for i, lesson in enumerate(LECTURE) if lesson.title == title), None)


def neighbours(title: str) -> tuple[Lesson | None, Lesson | None]:
    """The lessons before and after the page called `title` (None at either end, or off the list)."""
    index = index_of(title)
    if index is None:
        return None, None
    return (LECTURE[index - 1] if index > 0 else None), (LECTURE[index + 1] if index + 1 < len(LECTURE) else None)
