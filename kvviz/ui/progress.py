"""A progress bar with a Stop button, for a click whose work runs in the page's script.

    bar = StopBar(slot, "strategies_run_stop", "Estimated about 20 s", "Keep the strategies measured so far.",
                  estimate_s=20.0, budget_s=30.0)
    bar.move(0.4, "sliding window: free run, token 12 of 32")   # "... · about 9 s left"

The work runs in the page's script, not in a button's callback: pressing Stop (or any widget) asks
Streamlit for a new run of the page, and Streamlit interrupts this one at its next message to the
browser, which is the bar's next move. So a long click moves its bar at least once per unit of work
(a step, a run), and keeps what it measured so far in st.session_state as it goes, for the next run
of the page to find and say what was kept.

The clock stops it the same way: a move past `budget_s` seconds (one click's budget) asks for that new
run itself, as Stop would, whatever the estimate made before the start said; the next run's sentence
about what was kept begins with `how_it_stopped()`, which then names the clock.
"""

from __future__ import annotations

import time

import streamlit as st

BAR_EVERY_S = 0.1  # move the bar at most this often: each move is a message to the browser
OUT_OF_TIME = "click_out_of_time"  # (seconds run, budget) of the last click the clock stopped, for how_it_stopped()


class StopBar:
    """st.progress with a Stop button under it, drawn in `slot` (an st.empty())."""

    def __init__(self, slot, stop_key: str, text: str, stop_help: str, estimate_s: float | None = None,
                 budget_s: float | None = None):
        with slot.container():
            self.bar = st.progress(0.0, text=text)
            st.button("Stop", key=stop_key, icon=":material/stop:", help=stop_help)
        self.moved = 0.0
        self.started = time.perf_counter()
        self.estimate_s = estimate_s  # made before the start, at the server's recent pace; None: none was made
        self.budget_s = budget_s  # the clock stops the click past it; None: the click keeps its own clock
        st.session_state.pop(OUT_OF_TIME, None)

    def move(self, fraction: float, text: str, every_s: float = BAR_EVERY_S, left: bool = True) -> None:
        """Move the bar to `fraction` (0 to 1) saying `text`, unless it moved under every_s ago; with `left`,
        the seconds left (seconds_left). Past the budget, before the end, stop the click instead, as Stop does."""
        now = time.perf_counter()
        elapsed = now - self.started
        if self.budget_s is not None and elapsed > self.budget_s and fraction < 1.0:  # done is done
            st.session_state[OUT_OF_TIME] = (elapsed, self.budget_s)
            st.rerun()  # ends this run of the page here, as a press of Stop would
        if now - self.moved >= every_s:
            self.moved = now
            fraction = min(max(fraction, 0.0), 1.0)
            if left and 0.0 < fraction < 1.0 and (elapsed >= 1.0 or self.estimate_s is not None):
                text = f"{text} · about {seconds_left(fraction, elapsed, self.estimate_s, self.budget_s):,.0f} s left"
            self.bar.progress(fraction, text=text)

    def expect(self, seconds: float, how: str) -> None:
        """The estimate, made once the click knows what it will run (`how`: kvviz.lessons.budget.says)."""
        self.estimate_s = seconds
        self.bar.progress(0.0, text=f"Estimated about {seconds:,.0f} s on this server, {how}; starting")



def seconds_left(fraction: float, elapsed: float, estimate_s: float | None, budget_s: float | None) -> float:
    """A click's seconds left, `fraction` of it done in `elapsed` s: its own pace (elapsed / fraction) weighed by
    how far it is, and the estimate made before the start for the rest, so that a first step doing more than
    its share (a reference run, a warm-up) moves the answer less than a run half done. Never past the budget,
    where the clock stops it."""
    own = elapsed * (1 - fraction) / fraction
    left = own if estimate_s is None else fraction * own + (1 - fraction) * max(estimate_s - elapsed, 0.0)
    return left if budget_s is None else min(left, max(budget_s - elapsed, 0.0))


def how_it_stopped() -> str:
    """How the sentence about a stopped click begins: "Stopped", or, when the clock stopped it, the seconds it ran
    and the budget (one use: the next click starts afresh)."""
    out_of_time = st.session_state.pop(OUT_OF_TIME, None)
    if out_of_time is None:
        return "Stopped"
    elapsed, budget = out_of_time
    return (f"Stopped by the clock at {elapsed:,.1f} s, past the {budget:,.0f} s one click may run on this server "
            "(the server was slower than its estimate),")


def estimated_bar(slot, estimate, how: str, error_key: str, stop_key: str, stop_help: str,
                  budget_s: float | None) -> StopBar | None:
    """The bar of a click whose work is estimated before it starts (`how`: kvviz.lessons.budget.says):
    estimate() gives its seconds, or raises
    ValueError (kvviz.lessons.budget.WorkTooLarge past the budget) whose sentence goes under error_key, and
    then no bar is drawn (None) and nothing should run; past budget_s seconds the clock stops it (StopBar)."""
    try:
        seconds = estimate()
    except ValueError as error:
        st.session_state[error_key] = str(error)
        return None
    return StopBar(slot, stop_key, f"Estimated about {seconds:,.0f} s on this server, {how}; starting", stop_help,
                   estimate_s=seconds, budget_s=budget_s)
