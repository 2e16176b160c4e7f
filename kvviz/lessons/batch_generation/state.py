"""Session state of the "Batch generation" page: build the workload, run it with a live view.

Results live in st.session_state under "batch_run" and "batch_compare_run" (loading another
model clears them, as it clears every lesson); widgets under "batch_*". The run and the comparison
are started by buttons in the page, not in callbacks, because their progress bars (and the run's
live charts) must sit in the page where the button is, and their Stop buttons interrupt a script
run, never a callback.
"""

from __future__ import annotations

import time
from dataclasses import replace

import streamlit as st

from kvviz.engine.config import EngineConfig
from kvviz.engine.model_parts import model_parts
from kvviz.engine.sampling import SamplingParams
from kvviz.lessons.batch_generation import figures
from kvviz.lessons.batch_generation.logic import (
    BatchResult,
    BatchSettings,
    batch_seconds,
    compare_with_transformers,
    live_summary,
    run_batch,
    within_context,
)
from kvviz.ui.common import current_model, page_sampling
from kvviz.lessons.budget import click_seconds, says
from kvviz.ui.progress import StopBar, how_it_stopped
from kvviz.ui.session_keys import Keys
from kvviz.ui.text import plain
from kvviz.vllm.backend import batch_on_vllm, find_python
from kvviz.workloads import MAX_UPLOAD_BYTES, Workload, WorkloadError, synthetic_workload, upload_workload

SYNTHETIC, UPLOAD = "Synthetic workload", "Upload a file"
# the engine's own defaults, but a small running set and token budget, so a class sees requests wait
PAGE_ENGINE = EngineConfig(max_num_seqs=16, max_num_batched_tokens=256)
PAGE_SAMPLING = SamplingParams(temperature=0.8, top_k=40, top_p=0.95, seed=0, ignore_eos=True)  # when not greedy
KEYS = Keys(clears=frozenset({"batch_run", "batch_compare_run", "batch_vllm_run", "batch_error", "batch_compare_error",
                  "batch_vllm_error", "batch_upload_parsed",  # the upload is parsed with the model's tokenizer
                  "batch_comparing", "batch_compare_stopped", "batch_running", "batch_run_stopped"}))
DEFAULTS = {"batch_source": SYNTHETIC, "batch_count": 16, "batch_prompt_len": (8, 32), "batch_output_len": (16, 32),
            "batch_prefix": 32, "batch_seed": PAGE_SAMPLING.seed, "batch_greedy": True,
            "batch_temperature": PAGE_SAMPLING.temperature, "batch_top_k": PAGE_SAMPLING.top_k,
            "batch_top_p": PAGE_SAMPLING.top_p, "batch_ignore_eos": PAGE_SAMPLING.ignore_eos,
            "batch_block_size": PAGE_ENGINE.block_size, "batch_num_blocks": 0,  # 0: room for every request
            "batch_prefix_caching": PAGE_ENGINE.enable_prefix_caching, "batch_max_num_seqs": PAGE_ENGINE.max_num_seqs,
            "batch_max_batched_tokens": PAGE_ENGINE.max_num_batched_tokens, "batch_hf_batch_size": 16}
POOL_BLOCKS_MOST = 65_536  # the pool field's top; what the prompts can fill and memory holds are checked on Run
LIVE_EVERY_S = 0.5  # redraw the live charts this often (the bar moves at most every BAR_EVERY_S)


def setting(key: str):
    return st.session_state.get(key, DEFAULTS[key])


def result() -> BatchResult | None:
    return st.session_state.get("batch_run")


def comparison():
    return st.session_state.get("batch_compare_run")


def error() -> str | None:
    return st.session_state.get("batch_error")


def settings() -> BatchSettings:
    """The page's controls as an EngineConfig and a SamplingParams."""
    engine = replace(PAGE_ENGINE, block_size=int(setting("batch_block_size")),
                     num_blocks=int(setting("batch_num_blocks")) or None,
                     enable_prefix_caching=bool(setting("batch_prefix_caching")),
                     max_num_seqs=int(setting("batch_max_num_seqs")),
                     max_num_batched_tokens=int(setting("batch_max_batched_tokens")))
    sampling = SamplingParams(seed=int(setting("batch_seed")), ignore_eos=bool(setting("batch_ignore_eos")))
    return BatchSettings(engine, page_sampling(setting, "batch_", sampling))


def workload() -> Workload:
    """The workload the controls describe; raises WorkloadError with one sentence."""
    lm = current_model()
    output_len = tuple(setting("batch_output_len"))
    if setting("batch_source") == UPLOAD:
        upload = st.session_state.get("batch_upload")
        if upload is None or not hasattr(upload, "getvalue"):  # nothing, or a file just removed
            raise WorkloadError("No file is uploaded yet; upload a .txt or .jsonl file of prompts, "
                                "or switch to a synthetic workload.")
        if upload.size > MAX_UPLOAD_BYTES:  # said from its size, before its bytes are copied out
            raise WorkloadError(f"{upload.name} is {upload.size / 2**20:.1f} MiB, more than the "
                                f"{MAX_UPLOAD_BYTES // 2**20} MiB limit; upload fewer prompts.")
        # parse and tokenize a file once, not on every rerun of the page
        key = (upload.file_id, output_len, int(setting("batch_seed")), lm.name)
        cached = st.session_state.get("batch_upload_parsed")
        if cached is None or cached[0] != key:
            try:
                parsed = upload_workload(lm.tokenizer, upload.name, upload.getvalue(), output_len, key[2])
            except WorkloadError as problem:
                parsed = problem
            cached = (key, parsed)
            st.session_state["batch_upload_parsed"] = cached
        if isinstance(cached[1], WorkloadError):
            raise cached[1]
        return cached[1]
    vocab_size = lm.model.get_output_embeddings().weight.shape[0]
    return synthetic_workload(lm.tokenizer, vocab_size, int(setting("batch_count")), tuple(setting("batch_prompt_len")),
                              output_len, int(setting("batch_prefix")), int(setting("batch_seed")))


def on_new_upload() -> None:
    """Another prompt file: the results on the page ran the old prompts, so they go. A file that
    cannot be used changes nothing: its sentence shows and the session keeps its results."""
    try:
        workload()
    except WorkloadError:
        return
    for key in ("batch_run", "batch_compare_run", "batch_vllm_run", "batch_error", "batch_compare_error",
                "batch_vllm_error"):
        st.session_state.pop(key, None)


def upload_summary() -> tuple[str | None, str | None]:
    """(what the uploaded file holds, as markdown that shows its name as typed, or the sentence
    saying why it cannot be used)."""
    try:
        work = workload()
    except WorkloadError as problem:
        return None, str(problem)
    return f"{plain(work.name)}: {len(work)} prompts, {sum(map(len, work.prompts)):,} prompt tokens.", None


def run(progress_slot, live_slot) -> None:
    """Run the batch, moving a progress bar and redrawing live charts; keep the result or one sentence.

    A Stop button sits under the bar. Pressing it (or any widget) interrupts this script run at the
    bar's next move, within one engine step, and so does the clock past one click's budget (the estimate
    the bar starts with may be wrong); "batch_running" then tells the next run of the page how far it
    got, and the stopped run is not kept."""
    for key in ("batch_error", "batch_run_stopped"):
        st.session_state.pop(key, None)
    lm = current_model()
    try:
        work, chosen = workload(), settings()
        num_blocks = chosen.pool_blocks(lm, work)  # a pool the prompts can fill and memory holds, or a sentence
        # sized once: the live view and the engine agree
        chosen = replace(chosen, engine=replace(chosen.engine, num_blocks=num_blocks))
        seconds = batch_seconds(lm, work, chosen)
    except ValueError as problem:  # WorkloadError, kvviz.lessons.budget.WorkTooLarge
        st.session_state["batch_error"] = str(problem)
        return
    bar = StopBar(progress_slot, "batch_run_stop", f"Estimated about {seconds:,.0f} s on this server, "
                  f"{says(next(lm.model.parameters()).device, 'batch')}; starting {len(work)} requests",
                  "Ends the run at its next step; a stopped run is not kept.", estimate_s=seconds,
                  budget_s=click_seconds())
    st.session_state["batch_running"] = (0, len(work))
    last_draw, sampled = [0.0], [0]
    to_sample = max(1, within_context(work, model_parts(lm).max_context)[0].num_output_tokens)

    def on_step(num_finished, num_total, points):
        point, now = points[-1], time.perf_counter()
        st.session_state["batch_running"] = (num_finished, num_total)
        sampled[0] += point.tokens_sampled  # the bar goes as the tokens do: requests finish in bursts
        bar.move(min(sampled[0] / to_sample, 1.0), f"{num_finished} of {num_total} requests finished · step "
                 f"{point.step} · {point.running} running, {point.waiting} waiting")
        if now - last_draw[0] >= LIVE_EVERY_S:
            last_draw[0] = now
            with live_slot.container():
                draw_live(points, num_blocks, num_total)

    try:
        outcome = run_batch(lm, work, chosen, progress=on_step)
    except ValueError as problem:  # WorkloadError, EngineError, kvviz.lessons.budget.WorkTooLarge: before the work
        st.session_state.pop("batch_running", None)
        st.session_state["batch_error"] = str(problem)
        progress_slot.empty()
        live_slot.empty()
        return
    st.session_state.pop("batch_running", None)  # ended, not stopped
    st.session_state["batch_run"] = outcome
    for key in ("batch_compare_run", "batch_compare_stopped"):  # they compared other prompts
        st.session_state.pop(key, None)
    progress_slot.empty()
    live_slot.empty()


def draw_live(points, num_blocks: int, num_requests: int) -> None:
    now = live_summary(points)
    m = st.columns(4)
    m[0].metric("Output tokens/s so far", f"{now['tokens_per_s']:,.0f}",
                help="Output tokens ÷ seconds since the run started, drawing these charts included.")
    m[1].metric("Running / waiting", f"{now['running']} / {now['waiting']}")
    m[2].metric("Blocks in use", f"{now['blocks_used']} of {num_blocks}")
    m[3].metric("Preemptions", now["preemptions"])
    st.plotly_chart(figures.timeline(points, num_blocks, num_requests), width="stretch",
                    key=f"batch_live_{len(points)}")


def _on_last_batch(run, result_key: str, error_key: str, no_batch: str) -> None:
    """run(the last batch's result): keep what it returns under result_key, or one sentence under error_key."""
    st.session_state.pop(error_key, None)
    done = result()
    if done is None:
        st.session_state[error_key] = no_batch
        return
    try:
        st.session_state[result_key] = run(done)
    except ValueError as problem:
        st.session_state[error_key] = str(problem)


def compare(slot) -> None:
    """Run the last batch's prompts through kvviz and transformers generate, greedy, and time both,
    under a progress bar and a Stop button in `slot`. It runs in the page's script, not in a
    callback, so that pressing Stop (or any widget) interrupts it at the bar's next move, between
    two timed runs; "batch_comparing" then tells the next run of the page how far it got."""
    for key in ("batch_compare_error", "batch_compare_stopped"):
        st.session_state.pop(key, None)
    bar = StopBar(slot, "batch_compare_stop", "Estimating the work",
                  "A comparison needs all its runs, so nothing of this one is kept.", budget_s=click_seconds())

    def progress(done: int, total: int, text: str) -> None:
        if done == 0:  # the work starts: the last comparison is being replaced
            st.session_state.pop("batch_compare_run", None)
        st.session_state["batch_comparing"] = (done, total)
        bar.move(done / total, f"{text} ({done} of {total} runs done)", every_s=0.0)

    def compared(done: BatchResult):
        lm = current_model()
        outcome = compare_with_transformers(lm, done.workload, done.settings, int(setting("batch_hf_batch_size")),
                                            progress=progress, estimated=lambda seconds: bar.expect(
                                                seconds, says(next(lm.model.parameters()).device, "compare")))
        bar.move(1.0, "Compared", every_s=0.0)  # a run stopped meanwhile ends here, storing nothing
        return outcome

    _on_last_batch(compared, "batch_compare_run", "batch_compare_error",
                   "Run the batch first; the comparison uses its prompts.")
    st.session_state.pop("batch_comparing", None)  # ended, not stopped
    slot.empty()


def note_a_stopped_run() -> None:
    """A run that a widget interrupted is not kept: say how far it got, and what the results below are."""
    if "batch_running" in st.session_state:
        done, total = st.session_state.pop("batch_running")
        shown = (" The results below are from the last run that finished." if "batch_run" in st.session_state
                 else "")
        st.session_state["batch_run_stopped"] = (
            f"{how_it_stopped()} after {done} of {total} requests had finished; a stopped run is not kept.{shown} "
            "Press **Run the batch** to start again.")


def run_stopped() -> str | None:
    return st.session_state.get("batch_run_stopped")


def note_a_stopped_comparison() -> None:
    """A comparison that a widget interrupted keeps nothing (its medians need every run): say how far it got."""
    if "batch_comparing" in st.session_state:
        done, total = st.session_state.pop("batch_comparing")
        st.session_state["batch_compare_stopped"] = (
            f"{how_it_stopped()} after {done} of {total} runs: a comparison needs all of them for its medians, "
            "so none is shown. Press **Run both and compare** to start again.")


def compare_stopped() -> str | None:
    return st.session_state.get("batch_compare_stopped")


def vllm_available() -> bool:

    return find_python() is not None


def vllm_run():
    return st.session_state.get("batch_vllm_run")


def on_vllm() -> None:
    """Run the last batch's prompts, sampling and limits on vLLM, and compare the outputs."""

    _on_last_batch(lambda done: batch_on_vllm(current_model(), done.workload, done.settings,
                                              [o.token_ids for o in done.outputs]),
                   "batch_vllm_run", "batch_vllm_error", "Run the batch first; vLLM runs its prompts.")
