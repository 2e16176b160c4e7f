"""The lecture's path on screen: st.navigation's pages, Previous / Next links, the home page's list.

All of it reads kvviz.lessons.lecture.LECTURE, so the sidebar, the links and the home page can
never disagree about the order of the lessons.
"""

from __future__ import annotations

import streamlit as st

from kvviz.lessons import lecture


def pages() -> list:
    """The st.Page objects app.py hands to st.navigation, in lecture order."""
    return [st.Page(lesson.path, title=lesson.title, icon=lesson.icon, default=index == 0)
            for index, lesson in enumerate(lecture.LECTURE)]


def previous_next(title: str) -> None:
    """Previous / Next links around the page called `title` (page_link works without the sidebar)."""
    index = lecture.index_of(title)
    if index is None:
        return
    previous, following = lecture.neighbours(title)
    left, middle, right = st.columns([2, 1, 2])
    if previous is not None:
        left.page_link(previous.path, label=f"Previous: {previous.title}", icon=":material/arrow_back:")
    middle.caption(f"Lesson {index} of {len(lecture.LECTURE) - 1}" if index else "Start")
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


def taught_in(key: str, words: str) -> str:
    """The label of a forward link: `words` are used on this page before the lesson `key` teaches them."""
    lesson = lecture.by_key(key)
    return f"{words}: taught in {lesson.title} (lesson {lecture.LECTURE.index(lesson)})"


def taught_later(key: str, words: str) -> None:
    """One line linking forward to the lesson that teaches `words`, for a page that uses them first."""
    st.page_link(lecture.by_key(key).path, label=taught_in(key, words), icon=":material/north_east:")


def lecture_table() -> None:
    """The home page's list: every lesson after this one, in order, with its line and its minutes."""
    total = sum(lesson.minutes for lesson in lecture.LECTURE)
    rows = []
    for number, lesson in enumerate(lecture.LECTURE[1:], start=1):
        rows.append(f"{number}. **{lesson.title}** (about {lesson.minutes} min): {lesson.summary}")
    st.markdown("\n".join(rows))
    st.caption(f"About {total} minutes in all. Each page ends with links to the previous and the next one.")
