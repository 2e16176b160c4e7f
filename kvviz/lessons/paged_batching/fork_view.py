"""The Paged lesson's fork view: one prompt, n samples, shared blocks and copy-on-write."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from kvviz.engine.errors import EngineError
from kvviz.engine.kv_manager import KVCacheManager
from kvviz.lessons.paged_batching import figures as paged_batching_figures
from kvviz.lessons.paged_batching import fork as fork_lesson
from kvviz.lessons.paged_batching import fork_figures
from kvviz.lessons.paged_batching.stage import fork_stage_data
from kvviz.shapes import format_bytes
from kvviz.ui import presenter
from kvviz.ui.common import current_model, kept_defaults, show_code
from kvviz.ui.session_keys import Keys, SessionState, Slot
from kvviz.ui.stage import chosen_step, show_stage
from kvviz.ui.text import plain

DEFAULT_PROMPT = "JULIET:\nO Romeo, Romeo, wherefore art thou Romeo?"  # 13 tokens: a partly filled last block


class ForkState(SessionState):
    """The fork tab's run (gone when another model loads) and its settings (kept while another page shows)."""

    run = Slot("paged_fork_run", clears=True)
    error = Slot("paged_fork_error", clears=True)
    view_step = Slot("paged_fork_view_step", default=0, clears=True)
    prompt = Slot("paged_fork_prompt", default=DEFAULT_PROMPT)
    n = Slot("paged_fork_n", default=4)
    block_size = Slot("paged_fork_block_size", default=4)
    max_tokens = Slot("paged_fork_max_tokens", default=12)


FORK = ForkState()
KEYS = Keys(clears=ForkState.cleared_keys(),
            kept=(FORK.key("prompt"), FORK.key("n"), FORK.key("block_size"), FORK.key("max_tokens")))  # its settings


def _on_fork() -> None:
    del FORK.error
    try:
        FORK.run = fork_lesson.run_fork(current_model(), FORK.prompt, n=int(FORK.n), max_tokens=int(FORK.max_tokens),
                                        block_size=int(FORK.block_size))
    except EngineError as error:
        FORK.error = str(error)
        return
    FORK.view_step = 0


def _on_stage_step() -> None:
    """The stage moved to another step in the browser: the views below follow it."""
    run, chosen = FORK.run, chosen_step("paged_fork_stage")
    if run is not None and chosen is not None:
        FORK.view_step = min(int(chosen), len(run.records) - 1)


def fork_view() -> None:
    st.markdown(
        "Ask for **n samples of one prompt** (`SamplingParams(n=...)`). The prompt runs through the "
        "model once; then the request **forks**: every sample points at the same prompt blocks "
        "(reference count n). A sample that is about to write into a shared, partly filled block "
        "first gets its own copy (**copy-on-write**); full blocks stay shared to the end.")
    kept_defaults({slot.key: slot.default for slot in (ForkState.prompt, ForkState.n, ForkState.block_size,
                                                        ForkState.max_tokens)})
    st.text_area("Prompt", key="paged_fork_prompt", height=90)  # a text area keeps the line break
    a, b, c = st.columns(3)
    a.slider("Samples (n)", 2, 8, key="paged_fork_n")
    b.slider("Block size (tokens)", 2, 16, key="paged_fork_block_size")
    c.slider("Tokens per sample", 2, 32, key="paged_fork_max_tokens")
    st.button("Fork", on_click=_on_fork, type="primary", key="paged_fork_press")
    if FORK.has("error"):
        st.error(FORK.error)
    run: fork_lesson.ForkRun | None = FORK.run
    if run is None:
        st.info("Press **Fork**: the engine prefills the prompt once and samples n continuations.")
        return
    last = len(run.records) - 1
    # the stage: the samples' block tables into one pool, a shared block splitting at copy-on-write
    show_stage(fork_stage_data(run, min(FORK.view_step, last),
                               presenter.is_on()), key="paged_fork_stage", on_step=_on_stage_step)
    step = st.slider("Step", 0, last, key="paged_fork_view_step")
    facts = fork_lesson.summary(run, step)
    m = st.columns(4)
    m[0].metric("Shared blocks", facts["shared_blocks"],
                f"ref count up to {facts['max_ref_cnt']}" if facts["shared_blocks"] else None,
                delta_color="off", delta_arrow="off")
    m[1].metric("Copies (copy-on-write)", facts["copies"], format_bytes(facts["copied_bytes"]) + " copied",
                delta_color="off", delta_arrow="off")
    m[2].metric("Blocks held now", facts["blocks_now"], f"{facts['separate_blocks_now']} if independent",
                delta_color="off", delta_arrow="off")
    m[3].metric("Saved now", format_bytes(facts["bytes_saved_now"]), f"{facts['blocks_saved_now']} blocks",
                delta_color="off", delta_arrow="off",
                help=f"{facts['blocks_now']} blocks against {facts['separate_blocks_now']} for {facts['n']} "
                     f"independent requests, {format_bytes(run.bytes_per_block)} a block. The {facts['n'] - 1} "
                     f"extra samples save the prompt's {facts['full_prompt_blocks']} full blocks each; "
                     "a partly filled last prompt block is copied by all writers but one, so the saving can fall "
                     "at the first decode step.")
    st.caption(f"Peak so far, the most blocks held at once up to this step: {facts['peak_blocks']} "
               f"({format_bytes(facts['peak_blocks'] * run.bytes_per_block)}) for the {facts['n']} samples "
               f"sharing the prompt, {facts['separate_peak_blocks']} "
               f"({format_bytes(facts['separate_peak_blocks'] * run.bytes_per_block)}) for {facts['n']} "
               "independent requests.")
    record = run.records[step]
    left, right = st.columns([3, 2])
    with left:
        if facts["blocks_now"]:
            st.plotly_chart(paged_batching_figures.block_tables(record, run.labels, run.block_size), width="stretch",
                            key="paged_fork_tables")
        else:
            st.info(f"Every sample finished at step {step}: their blocks went back to the pool "
                    "(green: free, but their prefix stays cached).")
        st.plotly_chart(paged_batching_figures.pool_grid(run.pool_blocks(step), run.short_labels), width="stretch",
                        key="paged_fork_pool")
    with right:
        held = [fork_lesson.blocks_held(run, s) for s in range(last + 1)]
        st.plotly_chart(fork_figures.fork_memory(held, run.bytes_per_block), width="stretch", key="paged_fork_memory")
        copied = fork_lesson.copies(run, step)
        st.markdown("**Copies so far**")
        st.table(pd.DataFrame([dict(c, bytes=format_bytes(c["bytes"])) for c in copied] or
                              [{"step": "—", "sample": "no copy yet"}]).set_index("step"))
    texts = [plain(text) for text in run.texts]  # a model's text: st.table reads its cells as markdown
    st.table(pd.DataFrame({"sample": list(run.labels.values()), "text": texts}).set_index("sample"))
    show_code(KVCacheManager.fork, KVCacheManager._copy_on_write,
              caption="The KV manager shares the parent's blocks, and copies one before a sample writes into it.")
