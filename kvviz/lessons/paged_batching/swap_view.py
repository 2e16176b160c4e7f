"""The Paged lesson's swap-or-recompute view: both preemption modes on the same tight pool."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from kvviz.engine.errors import EngineError
from kvviz.engine.kv_manager import KVCacheManager
from kvviz.lessons.paged_batching import swap as swap_lesson
from kvviz.lessons.paged_batching.events import event_words
from kvviz.lessons.paged_batching.state import request_specs
from kvviz.shapes import format_bytes
from kvviz.ui.common import current_model, kept_defaults, show_code
from kvviz.lessons.budget import click_seconds
from kvviz.ui.progress import StopBar, how_it_stopped
from kvviz.ui.session_keys import Keys, SessionState, Slot


TIMED_RUNS = 0  # timing repeats each mode several times: seconds of waiting per run on a small CPU


class SwapState(SessionState):
    """The swap tab's comparison (gone when another model loads) and its settings (kept while another page shows)."""

    run = Slot("paged_swap_run", clears=True)
    error = Slot("paged_swap_error", clears=True)
    comparing = Slot("paged_swap_comparing", clears=True)  # still there in the next run: Stop or the clock ended it
    requested = Slot("swap_requested")  # Compare was pressed: the page runs it in its script, where Stop reaches it
    num_blocks = Slot("paged_swap_num_blocks", default=12)
    max_tokens = Slot("paged_swap_max_tokens", default=32)
    timed_runs = Slot("paged_swap_timed_runs", default=TIMED_RUNS)


SWAP = SwapState()
KEYS = Keys(clears=SwapState.cleared_keys(),
            kept=(SWAP.key("num_blocks"), SWAP.key("max_tokens"), SWAP.key("timed_runs")))  # the run's settings


def _on_compare() -> None:
    SWAP.requested = True


def _compare() -> None:
    """Both modes, with a bar and Stop: a pool of 4 blocks and 64 tokens a request ran 75 s under load."""
    del SWAP.error
    timed = int(SWAP.timed_runs)
    slot = st.empty()
    bar = StopBar(slot, "paged_swap_stop", "Comparing swap and recompute", "Ends the comparison; the last one stays.",
                  budget_s=click_seconds())
    SWAP.comparing = True
    try:
        SWAP.run = swap_lesson.compare(
            current_model(), [spec.prompt for spec in request_specs()], block_size=8,
            num_blocks=int(SWAP.num_blocks), max_tokens=int(SWAP.max_tokens),
            runs=timed + 1 if timed else 1, progress=bar.move)
    except EngineError as error:
        SWAP.error = str(error)
    del SWAP.comparing
    slot.empty()


def _note_a_stopped_comparison() -> None:
    """A comparison that Stop or the clock ended keeps nothing of its own: say so, and what to change."""
    if SWAP.take("comparing", False):
        SWAP.error = (
            f"{how_it_stopped()} before both modes had run, so the comparison below (if any) is the last one that "
            "finished; fewer tokens per request or a larger pool make it shorter.")


def _time(run: swap_lesson.ModeRun) -> str:
    if not run.timed:
        return "not timed"
    low, high = run.spread_s
    return f"{run.median_s:.2f} s ({low:.2f}–{high:.2f})"


def swap_view() -> None:
    st.markdown(
        "When the pool runs out, a running request is **preempted**. *Recompute* frees its blocks and "
        "runs its tokens through the model again later; *swap* copies its blocks to CPU memory and back "
        "into fresh blocks when it resumes. The requests of the table above, greedy, block size 8:")
    kept_defaults({slot.key: slot.default for slot in (SwapState.num_blocks, SwapState.max_tokens,
                                                        SwapState.timed_runs)})
    a, b, c = st.columns(3)
    a.slider("Pool size (blocks)", 4, 64, key="paged_swap_num_blocks")
    b.slider("Tokens per request", 4, 64, key="paged_swap_max_tokens")
    c.number_input("Timed runs per mode", 0, 5, key="paged_swap_timed_runs",
                   help="0 (default): one run each, not timed, so the comparison comes back at once. "
                        "1-5: a warm-up run, then the median and spread of that many timed runs per mode.")
    st.button("Compare swap and recompute", on_click=_on_compare, type="primary", key="paged_swap_press")
    _note_a_stopped_comparison()
    if SWAP.take("requested", False):
        _compare()
    if SWAP.has("error"):
        st.error(SWAP.error)
    result: dict[str, swap_lesson.ModeRun] | None = SWAP.run
    if result is None:
        return
    recompute, swap = result["recompute"], result["swap"]
    rows = [{"mode": run.mode, "preemptions": run.preemptions, "tokens recomputed": run.recomputed_tokens,
             "bytes swapped out": format_bytes(run.bytes_out), "bytes swapped in": format_bytes(run.bytes_in),
             "fell back to recompute": run.swap_fallbacks, "time (median, min–max)": _time(run)}
            for run in (recompute, swap)]
    st.table(pd.DataFrame(rows).set_index("mode"))
    if swap.outputs == recompute.outputs:
        st.success(f"Outputs identical: all {len(swap.outputs)} requests, token for token.")
    else:
        st.error("The two modes produced different outputs.")
    if not recompute.preemptions:
        st.info("Nothing was preempted: make the pool smaller to see the difference.")
    labels = {rid: f"R{index + 1}" for index, rid in enumerate(swap.request_ids)}  # as the table above numbers them
    events = swap_lesson.swap_events(swap, labels)
    if events:
        st.markdown("**Swap events** (block ids in the pool, slots in CPU memory)")
        st.table(pd.DataFrame([dict(e, event=event_words(e["event"]), bytes=format_bytes(e["bytes"]))
                               for e in events]).set_index("step"))
    show_code(KVCacheManager.swap_out, KVCacheManager.swap_in,
              caption="The KV manager moves a victim's blocks to the swap space and back.")
