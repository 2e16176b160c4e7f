"""Presenter mode on every page: large type and charts, no sidebar, a way out, Previous / Next on top.

Turned on by the sidebar switch or by ?presenter=1 in the link; the "Leave presenter mode" button
(or removing the parameter) turns it off. app.py calls `presenter_mode` before each page runs.
Every Plotly chart, in either mode, passes through `scaled_figure`: no chart text under 16 px in
presenter mode or 12 px in normal mode, at a projector's 1280x720 (tests/browser/test_browser_fonts.py).
"""

from __future__ import annotations

import math

import plotly.graph_objects as go
import streamlit as st

from kvviz.ui import streamlit_door
from kvviz.ui.session_keys import SessionState, Slot

CHART_SCALE = 1.45  # plotly font sizes in presenter mode, against the normal ones
PRESENTER_LEAST_PX, NORMAL_LEAST_PX = 16, 12  # no chart text under this on a 1280x720 projector, per mode
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
  [data-testid="stMainBlockContainer"] {padding-top: 0.6rem; max-width: 100%;}
</style>
"""

# Every control shows where the keyboard is: a 3 px ring of 6.7:1 against white (Streamlit's own is a faint
# translucent halo, under 3:1 on a red button), and small grey text darkened to 4.5:1 or more (axe-core found
# inactive tab labels, captions and help text below it on 9 of 11 pages).
ACCESSIBLE_CSS = """<style>
button:focus-visible, a:focus-visible, input:focus-visible, textarea:focus-visible, summary:focus-visible,
[role="tab"]:focus-visible, [role="slider"]:focus-visible, [role="radio"]:focus-visible,
[role="checkbox"]:focus-visible, [role="switch"]:focus-visible, [role="combobox"]:focus-visible,
[tabindex]:focus-visible { outline: 3px solid #1D4ED8 !important; outline-offset: 2px !important; }
[data-testid="stCaptionContainer"] { opacity: 1 !important; }  /* Streamlit fades captions to 0.6 */
[data-testid="stCaptionContainer"], [data-testid="stCaptionContainer"] * { color: #4B5563 !important; }
button[role="tab"] p { color: #374151; }
button[role="tab"][aria-selected="true"] p { color: #B91C1C; }
</style>"""

# While the server runs the page's script (Streamlit marks its app element "running") for more than 0.6 s, a
# tab at the top of the window says so, large enough for the back of a room (rem: larger in presenter
# mode). Shorter runs (a hover's echo, a follower's beat) show nothing.
BUSY_CSS = """
<style>
  [data-testid="stApp"][data-test-script-state="running"]::after {
    content: "The server is working…"; position: fixed; top: 0; left: 50%; transform: translateX(-50%);
    z-index: 1000100; padding: 0.1rem 1rem 0.2rem; line-height: 1.2; border-radius: 0 0 0.7rem 0.7rem;
    pointer-events: none;
    background: #B42318; color: #FFFFFF; font-weight: 600; font-size: 1rem; font-family: sans-serif;
    opacity: 0; animation: kvviz-busy 1.2s ease-in-out 0.6s infinite alternate;
  }
  @keyframes kvviz-busy { from { opacity: 1; } to { opacity: 0.6; } }
</style>
"""


class PresenterState(SessionState):
    """Presenter mode in this session: the app's own keys, which stay when another model loads."""

    on = Slot("presenter")  # the sidebar's switch
    left = Slot("presenter_left")  # turned off by hand: wins over the ?presenter=1 the link still carries


PRESENTER = PresenterState()


def is_on() -> bool:
    return bool(PRESENTER.on)


def _leave() -> None:
    PRESENTER.on = False
    st.query_params.pop("presenter", None)


def presenter_mode(previous=None, following=None) -> bool:
    """The sidebar switch, the URL parameter, and in presenter mode the CSS and a top bar with links
    to the `previous` and `following` pages (objects with .path and .title, or None)."""
    _install_legible_charts()
    if st.query_params.get("presenter") == "1" and not PRESENTER.left:
        PRESENTER.on = True
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
    left, middle, right = st.columns([2, 1.4, 2], vertical_alignment="center")
    if previous is not None:
        left.page_link(previous.path, label=f"Previous: {previous.title}", icon=":material/arrow_back:")
    middle.button("Leave presenter mode", on_click=_leave, icon=":material/close_fullscreen:", width="stretch")
    if following is not None:
        right.page_link(following.path, label=f"Next: {following.title}", icon=":material/arrow_forward:")
    return True


def _remember_choice() -> None:
    """A switch turned off by hand wins over the ?presenter=1 the link still carries."""
    PRESENTER.left = not PRESENTER.on


def scaled_figure(figure: go.Figure, scale: float = CHART_SCALE, least: int = PRESENTER_LEAST_PX) -> go.Figure:
    """A copy of `figure` with every font (layout, title, axes, legend, notes, colour bars) `scale` times
    larger and none under `least` px. Text inside fixed-size markers (block ids in cells) is not scaled,
    only raised to `least`: it must fit its square. A font the figure leaves unset is set here: Streamlit's
    chart theme would draw tick labels and legends at 0.8 of the page's type, under 16 px in presenter mode."""
    # to_dict() is already a deep copy, and its values passed plotly's validators once: a second pass
    # took 4 of the 11 ms a chart spent here, on every chart of every page run
    figure = go.Figure(figure.to_dict(), _validate=False)
    layout = figure.layout
    base = max(round((layout.font.size or 12) * scale), least)
    layout.font.size = base
    small = max(round(0.8 * base), least)  # what an unset tick label or legend gets

    def grow(font, unset) -> None:
        if isinstance(font.size, (int, float)):
            font.size = max(round(font.size * scale), least)
        elif font.size is None and unset is not None:  # a per-point list of sizes stays as it is
            font.size = unset

    grow(layout.title.font, None)
    grow(layout.legend.font, small)
    grow(layout.legend.title.font, small)
    for note in layout.annotations:
        grow(note.font, base)

    def grow_axis(axis) -> None:
        grow(axis.tickfont, small)
        grow(axis.title.font, None)
        if axis.exponentformat == "power":  # Plotly draws the exponent of 10² at 70 % of the tick label's size
            axis.tickfont.size = max(axis.tickfont.size, math.ceil(least / 0.7))

    figure.for_each_xaxis(grow_axis)
    figure.for_each_yaxis(grow_axis)
    for trace in figure.data:
        for name in ("textfont", "insidetextfont", "outsidetextfont"):
            font = getattr(trace, name, None)
            if font is not None and isinstance(font.size, (int, float)):
                font.size = max(font.size, least)
        colorbar = getattr(trace, "colorbar", None)
        if colorbar is not None and getattr(trace, "showscale", None) is not False:
            grow(colorbar.tickfont, small)
            grow(colorbar.title.font, small)
    # a bar's or a slice's label that would have to shrink under `least` to fit is hidden instead
    layout.uniformtext.minsize = max(layout.uniformtext.minsize or 0, least)
    layout.uniformtext.mode = layout.uniformtext.mode or "hide"
    if layout.height and scale > 1:
        layout.height = round(layout.height * min(scale, 1.25))
    margin = layout.margin
    for side in ("l", "r", "t", "b"):
        if margin[side] is not None:
            margin[side] = round(margin[side] * scale)
    return figure


def _legible_plotly_chart(plain, self, figure_or_data, *args, **kwargs):
    if isinstance(figure_or_data, go.Figure):
        figure_or_data = (scaled_figure(figure_or_data) if is_on()
                          else scaled_figure(figure_or_data, 1.0, NORMAL_LEAST_PX))
    return plain(self, figure_or_data, *args, **kwargs)


def _install_legible_charts() -> None:
    """Streamlit has no per-session plotly font setting, so every chart passes through `scaled_figure`:
    larger in a session in presenter mode, and in every session with no text under its mode's least size."""
    st.plotly_chart = streamlit_door.wrap_plotly_chart(_legible_plotly_chart, st._main)
