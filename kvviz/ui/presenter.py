"""Presenter mode on every page: large type and charts, no sidebar, a way out, Previous / Next on top.

Turned on by the sidebar switch or by ?presenter=1 in the link; the "Leave presenter mode" button
(or removing the parameter) turns it off. app.py calls `presenter_mode` before each page runs.
"""

from __future__ import annotations

import copy

import plotly.graph_objects as go
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

CHART_SCALE = 1.45  # plotly font sizes in presenter mode, against the normal ones
CSS = """
<style>
  section[data-testid="stSidebar"], [data-testid="stSidebarCollapsedControl"],
  [data-testid="stExpandSidebarButton"] {display: none;}
  html, body, [data-testid="stAppViewContainer"] {font-size: 20px;}
  [data-testid="stMarkdownContainer"] p, [data-testid="stMarkdownContainer"] li {font-size: 1.2rem;}
  [data-testid="stMetricValue"], [data-testid="stMetricValue"] p {font-size: 2.2rem !important;}
  [data-testid="stMetricLabel"] p {white-space: normal; overflow: visible;}
  h1 {font-size: 2.6rem !important;}
  .stButton button p, [data-testid="stPageLink"] p {white-space: normal; font-size: 1.05rem;}
  [data-testid="stMainBlockContainer"] {padding-top: 1.5rem; max-width: 100%;}
</style>
"""


def is_on() -> bool:
    return bool(st.session_state.get("presenter"))


def _leave() -> None:
    st.session_state["presenter"] = False
    st.query_params.pop("presenter", None)


def presenter_mode(previous=None, following=None) -> bool:
    """The sidebar switch, the URL parameter, and in presenter mode the CSS and a top bar with links
    to the `previous` and `following` pages (objects with .path and .title, or None)."""
    if st.query_params.get("presenter") == "1" and not st.session_state.get("presenter_left"):
        st.session_state["presenter"] = True
    with st.sidebar:
        st.toggle("Presenter mode", key="presenter", on_change=_remember_choice,
                  help="Large type and charts, no sidebar; Previous / Next on top of each page. On Prefill and "
                       "decode, → is Next token and P is Play/Pause. Add ?presenter=1 to a link to open in "
                       "this mode.")
    if not is_on():
        st.query_params.pop("presenter", None)
        return False
    st.query_params["presenter"] = "1"
    st.html(CSS)
    _install_chart_scaling()
    left, middle, right = st.columns([2, 1.4, 2], vertical_alignment="center")
    if previous is not None:
        left.page_link(previous.path, label=f"Previous: {previous.title}", icon=":material/arrow_back:")
    middle.button("Leave presenter mode", on_click=_leave, icon=":material/close_fullscreen:", width="stretch")
    if following is not None:
        right.page_link(following.path, label=f"Next: {following.title}", icon=":material/arrow_forward:")
    return True


def _remember_choice() -> None:
    """A switch turned off by hand wins over the ?presenter=1 the link still carries."""
    st.session_state["presenter_left"] = not st.session_state.get("presenter")


def scaled_figure(figure: go.Figure, scale: float = CHART_SCALE) -> go.Figure:
    """A copy of `figure` with every font (layout, title, axes, legend, notes) `scale` times larger.
    Text inside fixed-size markers (block ids in cells) keeps its size: it must fit its square."""
    figure = go.Figure(copy.deepcopy(figure.to_dict()))
    layout = figure.layout
    base = layout.font.size or 12
    layout.font.size = round(base * scale)
    if layout.title.font.size:
        layout.title.font.size = round(layout.title.font.size * scale)
    fonts = [layout.legend.font, layout.legend.title.font, *(note.font for note in layout.annotations)]
    for axis in [key for key in layout.to_plotly_json() if key.startswith(("xaxis", "yaxis"))]:
        fonts += [layout[axis].tickfont, layout[axis].title.font]
    for font in fonts:
        if isinstance(font.size, (int, float)):  # a per-point list of sizes stays as it is
            font.size = round(font.size * scale)
    if layout.height:
        layout.height = round(layout.height * min(scale, 1.25))
    margin = layout.margin
    for side in ("l", "r", "t", "b"):
        if margin[side] is not None:
            margin[side] = round(margin[side] * scale)
    return figure


_plain_plotly_chart = DeltaGenerator.plotly_chart


def _presenter_plotly_chart(self, figure_or_data, *args, **kwargs):
    if is_on() and isinstance(figure_or_data, go.Figure):
        figure_or_data = scaled_figure(figure_or_data)
    return _plain_plotly_chart(self, figure_or_data, *args, **kwargs)


def _install_chart_scaling() -> None:
    """Streamlit has no per-session plotly font setting, so charts pass through `scaled_figure` while
    this session is in presenter mode (the check is per session; other sessions draw as before)."""
    if DeltaGenerator.plotly_chart is not _presenter_plotly_chart:
        DeltaGenerator.plotly_chart = _presenter_plotly_chart  # st.columns(...)[i].plotly_chart
        st.plotly_chart = _presenter_plotly_chart.__get__(st._main)  # st.plotly_chart was bound at import
