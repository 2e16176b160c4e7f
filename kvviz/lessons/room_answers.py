"""A room's answers to a question, beside the engine's: the sentence, the chart, and those a lesson file
carries (kvviz.lessons.room_view says how a room works)."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from kvviz.ui import rooms
from kvviz.ui.text import plain


def results(text: str, unit: str, engine: float, answers: list[float], exact: bool) -> None:
    """A revealed question: how many answered, how many were right, and the answers beside the engine's."""
    right = rooms.right_answers(answers, engine, exact)
    st.markdown(f"**Room's answers** to “{plain(text)}” The engine: **{engine:,.0f} {plain(unit)}**; "
                f"{right} of {len(answers)} answered {'exactly that' if exact else 'within 1%'}.")
    if answers:
        st.plotly_chart(answers_chart(unit, engine, answers, exact), width="stretch",
                        config={"displayModeBar": False})


ANSWER_BARS = 12  # distinct answers drawn one bar each; more are counted by how far they are from the engine's


def answer_rows(engine: float, answers: list[float], exact: bool) -> list[tuple[str, int, bool]]:
    """The chart's bars, top to bottom: (label, students, right). Up to ANSWER_BARS distinct answers each get
    a bar; more (a room of 60, a file's 1,000) are counted by their distance from the engine's answer."""
    distinct = sorted(set(answers))
    if len(distinct) <= ANSWER_BARS:
        return [(f"{a:,.0f}", answers.count(a), rooms.right_answers([a], engine, exact) == 1) for a in distinct]
    scale = max(abs(engine), 1)
    bands = [("right" if exact else "within 1% (right)", None), ("within 10%", 0.1), ("within a factor of 2", 1.0),
             ("further off", float("inf"))]
    counts = [0] * len(bands)
    for a in answers:
        if rooms.right_answers([a], engine, exact):
            counts[0] += 1
        else:
            off = abs(a - engine) / scale
            counts[next(i for i, (_, most) in enumerate(bands) if most is not None and off <= most)] += 1
    return [(label, count, index == 0) for index, ((label, _), count) in enumerate(zip(bands, counts))]


def answers_chart(unit: str, engine: float, answers: list[float], exact: bool):
    """A horizontal bar per answer (or band of answers), green where right, its count written on it, tall
    enough for a projector: 48 px a bar."""
    rows = answer_rows(engine, answers, exact)
    figure = go.Figure(go.Bar(
        y=[label for label, _, _ in rows], x=[count for _, count, _ in rows], orientation="h",
        marker_color=["#2e9e5b" if good else "#9aa5b1" for _, _, good in rows],
        text=[f"{count} student{'s' if count != 1 else ''}" for _, count, _ in rows], textposition="auto",
        hovertemplate="%{y}: %{x} students<extra></extra>"))
    most = max(count for _, count, _ in rows)
    figure.update_layout(height=110 + 48 * len(rows), margin={"l": 10, "r": 10, "t": 10, "b": 50}, bargap=0.25,
                         xaxis={"title": {"text": "students"}, "dtick": 1 if most <= 10 else None,
                                "rangemode": "tozero", "tickfont": {"size": 14}},
                         yaxis={"title": {"text": unit}, "type": "category", "automargin": True,
                                "tickfont": {"size": 15}},
                         font={"size": 15})
    return figure


FILE_CHARTS = 3  # a file's room answers drawn at once; more are picked one at a time


def file_answers(lesson) -> None:
    """A replayed lesson's room answers, as the teacher saw them (a file written in a room)."""
    if not lesson.room_answers:
        return
    with st.expander(f"The room's answers ({len(lesson.room_answers)} questions, from the file)",
                     icon=":material/groups:"):
        shown = lesson.room_answers
        if len(shown) > FILE_CHARTS:  # one chart at a time: a file may hold 100 questions, each rerun drew them all
            labels = [f"{i + 1}. {row.question[:80]} (room {row.room})" for i, row in enumerate(shown)]
            pick = st.selectbox("Question", range(len(shown)), index=len(shown) - 1, format_func=labels.__getitem__,
                                key="file_room_question")  # a selectbox shows its options as text
            shown = [shown[min(pick, len(shown) - 1)]]
        for row in shown:  # the file's text, shown as text (no link or image from a crafted file)
            if row.engine is None:
                st.caption(f"Room {plain(row.room)}: “{plain(row.question)}” {len(row.answers)} answered; the file "
                           "was written before the reveal.")
            else:  # results() shows the text through plain(), and the chart's axis takes it as it is
                results(f"{row.question} (room {row.room}, step {row.step})", row.unit, row.engine, row.answers,
                        row.exact)
