"""A progress bar with a Stop button, for a click whose work runs in the page's script.

    bar = StopBar(slot, "strategies_run_stop", "Estimated about 20 s", "Keep the strategies measured so far.")
    bar.move(0.4, "sliding window: free run, token 12 of 32")   # "... · about 9 s left at this run's pace"

The work runs in the page's script, not in a button's callback: pressing Stop (or any widget) asks
Streamlit for a new run of the page, and Streamlit interrupts this one at its next message to the
browser, which is the bar's next move. So a long click moves its bar at least once per unit of work
(a step, a run), and keeps what it measured so far in st.session_state as it goes, for the next run
of the page to find and say what was kept.
"""

from __future__ import annotations

import time

import streamlit as st

BAR_EVERY_S = 0.1  # move the bar at most this often: each move is a message to the browser


class StopBar:
    """st.progress with a Stop button under it, drawn in `slot` (an st.empty())."""

    def __init__(self, slot, stop_key: str, text: str, stop_help: str):
        with slot.container():
            self.bar = st.progress(0.0, text=text)
            st.button("Stop", key=stop_key, icon=":material/stop:", help=stop_help)
        self.moved = 0.0
        self.started = time.perf_counter()

    def move(self, fraction: float, text: str, every_s: float = BAR_EVERY_S, left: bool = True) -> None:
        """Move the bar to `fraction` (0 to 1) saying `text`, unless it moved under every_s ago; with `left`,
        the seconds left as this run has gone so far, once a second of it has run (the estimate made
        before it started was the server's recent pace; this is the run's own)."""
        now = time.perf_counter()
        if now - self.moved >= every_s:
            self.moved = now
            fraction, elapsed = min(max(fraction, 0.0), 1.0), now - self.started
            if left and 0.0 < fraction < 1.0 and elapsed >= 1.0:
                text = f"{text} · about {elapsed * (1 - fraction) / fraction:,.0f} s left at this run's pace"
            self.bar.progress(fraction, text=text)


def estimated_bar(slot, estimate, how: str, error_key: str, stop_key: str, stop_help: str) -> StopBar | None:
    """The bar of a click whose work is estimated before it starts (`how`: kvviz.lessons.budget.says):
    estimate() gives its seconds, or raises
    ValueError (kvviz.lessons.budget.WorkTooLarge past the budget) whose sentence goes under error_key, and
    then no bar is drawn (None) and nothing should run."""
    try:
        seconds = estimate()
    except ValueError as error:
        st.session_state[error_key] = str(error)
        return None
    return StopBar(slot, stop_key, f"Estimated about {seconds:,.0f} s on this server, {how}; starting", stop_help)
