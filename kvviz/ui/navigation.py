"""The lecture's path: every page in teaching order, with what it shows and about how long it takes.

app.py registers these pages with st.navigation, the home page lists them, and every page ends
with Previous / Next links built from the same list, so the three can never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st


@dataclass(frozen=True)
class Lesson:
    path: str
    title: str
    icon: str
    summary: str  # one line for the home page
    minutes: int  # about how long it takes in class


LECTURE = [
    Lesson("lessons/home.py", "What kvviz teaches", ":material/school:",
           "The idea in one paragraph and the path through the lessons.", 2),
    Lesson("lessons/prefill_decode.py", "Prefill and decode", ":material/play_circle:",
           "A real model fills its cache with the prompt, then adds one token per step; where K, V and Q "
           "come from, the causal triangle, and why decode is memory-bound.", 15),
    Lesson("lessons/memory_bill.py", "Memory bill", ":material/calculate:",
           "What the cache weighs, what fits on a GPU, and what GQA, MQA, MLA, sliding windows and "
           "tensor parallelism change.", 8),
    Lesson("lessons/model_lab.py", "Model lab", ":material/science:",
           "Build a model of any size and time a decode step against context, cache on and off.", 5),
    Lesson("lessons/paged_batching.py", "Paged cache and batching", ":material/grid_view:",
           "Blocks, block tables and prefix sharing: how several requests share one pool without waste.", 8),
    Lesson("lessons/speculative.py", "Speculative decoding", ":material/fast_forward:",
           "Guess the next tokens from earlier text, check them all in one forward pass, and roll back "
           "the cache slots of the wrong guesses.", 6),
    Lesson("lessons/cache_strategies.py", "Cache strategies", ":material/compare_arrows:",
           "Dynamic, static, sliding-window and quantized caches side by side: bytes, time and output.", 6),
    Lesson("lessons/batch_generation.py", "Batch generation", ":material/dynamic_feed:",
           "Many prompts through the same engine with continuous batching, and its throughput.", 5),
    Lesson("lessons/sources.py", "Where this comes from", ":material/menu_book:",
           "The papers and code each lesson rests on, with links.", 2),
]


def pages() -> list:
    """The st.Page objects app.py hands to st.navigation, in lecture order."""
    return [st.Page(lesson.path, title=lesson.title, icon=lesson.icon, default=index == 0)
            for index, lesson in enumerate(LECTURE)]


def index_of(title: str) -> int | None:
    """Index in LECTURE of the page with this title (None if it is not a lesson)."""
    return next((i for i, lesson in enumerate(LECTURE) if lesson.title == title), None)


def neighbours(index: int) -> tuple[Lesson | None, Lesson | None]:
    previous = LECTURE[index - 1] if index > 0 else None
    following = LECTURE[index + 1] if index + 1 < len(LECTURE) else None
    return previous, following


def previous_next(title: str) -> None:
    """Previous / Next links around the page called `title` (page_link works without the sidebar)."""
    index = index_of(title)
    if index is None:
        return
    previous, following = neighbours(index)
    left, middle, right = st.columns([2, 1, 2])
    if previous is not None:
        left.page_link(previous.path, label=f"Previous: {previous.title}", icon=":material/arrow_back:")
    middle.caption(f"Lesson {index} of {len(LECTURE) - 1}" if index else "Start")
    if following is not None:
        right.page_link(following.path, label=f"Next: {following.title}", icon=":material/arrow_forward:")


# the keyed container sits in a layout wrapper, which is the flex item of the page's column
FOOTER_CSS = ("<style>[data-testid='stLayoutWrapper']:has(> .st-key-lecture_footer), .st-key-lecture_footer "
              "{order: 10000;} .st-key-lecture_footer {border-top: 1px solid rgba(128,128,128,.35); "
              "padding-top: .6rem; margin-top: 1rem;}</style>")


def footer_container():
    """A container that CSS moves below everything the page draws, so it ends pages that stop early."""
    st.html(FOOTER_CSS)
    return st.container(key="lecture_footer")


def lecture_table() -> None:
    """The home page's list: every lesson after this one, in order, with its line and its minutes."""
    total = sum(lesson.minutes for lesson in LECTURE)
    rows = []
    for number, lesson in enumerate(LECTURE[1:], start=1):
        rows.append(f"{number}. **{lesson.title}** (about {lesson.minutes} min): {lesson.summary}")
    st.markdown("\n".join(rows))
    st.caption(f"About {total} minutes in all. Each page ends with links to the previous and the next one.")
