"""Session state of the "Batch generation" page: build the workload, run it with a live view.

Results live in st.session_state under the slots of BatchState (BATCH; loading another
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
from kvviz.ui.session_keys import Keys, SessionState, Slot
from kvviz.ui.text import plain
from kvviz.vllm.backend import batch_on_vllm, find_python
from kvviz.workloads import MAX_UPLOAD_BYTES, Workload, WorkloadError, synthetic_workload, upload_workload

SYNTHETIC, UPLOAD = "Synthetic workload", "Upload a file"
# the engine's own defaults, but a small running set and token budget, so a class sees requests wait
PAGE_ENGINE = EngineConfig(max_num_seqs=16, max_num_batched_tokens=256)
PAGE_SAMPLING = SamplingParams(temperature=0.8, top_k=40, top_p=0.95, seed=0, ignore_eos=True)  # when not greedy


class BatchState(SessionState):
    """What the Batch generation page keeps; a run's results go when another model loads."""

    run = Slot("batch_run", clears=True)  # the last batch's BatchResult
    compare_run = Slot("batch_compare_run", clears=True)  # kvviz against transformers generate
    vllm_run = Slot("batch_vllm_run", clears=True)  # the same batch on vLLM
    error = Slot("batch_error", clears=True)  # one sentence each
    compare_error = Slot("batch_compare_error", clears=True)
    vllm_error = Slot("batch_vllm_error", clears=True)
    upload = Slot("batch_upload")  # the uploader's file
    upload_parsed = Slot("batch_upload_parsed", clears=True)  # parsed with the model's tokenizer
    running = Slot("batch_running", clears=True)  # (requests finished, all) of a run under way
    run_stopped = Slot("batch_run_stopped", clears=True)  # what a stopped run leaves: one sentence
    comparing = Slot("batch_comparing", clears=True)  # (runs done, all) of a comparison under way
    compare_stopped = Slot("batch_compare_stopped", clears=True)
    greedy = Slot("batch_greedy", default=True)  # the sampling's Greedy box


BATCH = BatchState()
KEYS = Keys(clears=BatchState.cleared_keys())
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
    return BATCH.run


def comparison():
    return BATCH.compare_run


def error() -> str | None:
    return BATCH.error


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
        upload = BATCH.upload
        if upload is None or not hasattr(upload, "getvalue"):  # nothing, or a file just removed
            raise WorkloadError("No file is uploaded yet; upload a .txt or .jsonl file of prompts, "
                                "or switch to a synthetic workload.")
        if upload.size > MAX_UPLOAD_BYTES:  # said from its size, before its bytes are copied out
            raise WorkloadError(f"{upload.name} is {upload.size / 2**20:.1f} MiB, more than the "
                                f"{MAX_UPLOAD_BYTES // 2**20} MiB limit; upload fewer prompts.")
        # parse and tokenize a file once, not on every rerun of the page
        key = (upload.file_id, output_len, int(setting("batch_seed")), lm.name)
        cached = BATCH.upload_parsed
        if cached is None or cached[0] != key:
            try:
                parsed = upload_workload(lm.tokenizer, upload.name, upload.getvalue(), output_len, key[2])
            except WorkloadError as problem:
                parsed = problem
            cached = (key, parsed)
            BATCH.upload_parsed = cached
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
    BATCH.drop("run", "compare_run", "vllm_run", "error", "compare_error", "vllm_error")


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
    BATCH.drop("error", "run_stopped")
    lm = current_model()
    try:
        work, chosen = workload(), settings()
        num_blocks = chosen.pool_blocks(lm, work)  # a pool the prompts can fill and memory holds, or a sentence
        # sized once: the live view and the engine agree
        chosen = replace(chosen, engine=replace(chosen.engine, num_blocks=num_blocks))
        seconds = batch_seconds(lm, work, chosen)
    except ValueError as problem:  # WorkloadError, kvviz.lessons.budget.WorkTooLarge
        BATCH.error = str(problem)
        return
    bar = StopBar(progress_slot, "batch_run_stop", f"Estimated about {seconds:,.0f} s on this server, "
                  f"{says(next(lm.model.parameters()).device, 'batch')}; starting {len(work)} requests",
                  "Ends the run at its next step; a stopped run is not kept.", estimate_s=seconds,
                  budget_s=click_seconds())
    BATCH.running = (0, len(work))
    last_draw, sampled = [0.0], [0]
    to_sample = max(1, within_context(work, model_parts(lm).max_context)[0].num_output_tokens)

    def on_step(num_finished, num_total, points):
        point, now = points[-1], time.perf_counter()
        BATCH.running = (num_finished, num_total)
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
        del BATCH.running
        BATCH.error = str(problem)
        progress_slot.empty()
        live_slot.empty()
        return
    del BATCH.running  # ended, not stopped
    BATCH.run = outcome
    BATCH.drop("compare_run", "compare_stopped")  # they compared other prompts
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


def _on_last_batch(run, result: str, error: str, no_batch: str) -> None:
    """run(the last batch's result): keep what it returns in BATCH's slot `result`, or one sentence in `error`."""
    delattr(BATCH, error)
    done = BATCH.run
    if done is None:
        setattr(BATCH, error, no_batch)
        return
    try:
        setattr(BATCH, result, run(done))
    except ValueError as problem:
        setattr(BATCH, error, str(problem))


def compare(slot) -> None:
    """Run the last batch's prompts through kvviz and transformers generate, greedy, and time both,
    under a progress bar and a Stop button in `slot`. It runs in the page's script, not in a
    callback, so that pressing Stop (or any widget) interrupts it at the bar's next move, between
    two timed runs; "batch_comparing" then tells the next run of the page how far it got."""
    BATCH.drop("compare_error", "compare_stopped")
    bar = StopBar(slot, "batch_compare_stop", "Estimating the work",
                  "A comparison needs all its runs, so nothing of this one is kept.", budget_s=click_seconds())

    def progress(done: int, total: int, text: str) -> None:
        if done == 0:  # the work starts: the last comparison is being replaced
            del BATCH.compare_run
        BATCH.comparing = (done, total)
        bar.move(done / total, f"{text} ({done} of {total} runs done)", every_s=0.0)

    def compared(done: BatchResult):
        lm = current_model()
        outcome = compare_with_transformers(lm, done.workload, done.settings, int(setting("batch_hf_batch_size")),
                                            progress=progress, estimated=lambda seconds: bar.expect(
                                                seconds, says(next(lm.model.parameters()).device, "compare")))
        bar.move(1.0, "Compared", every_s=0.0)  # a run stopped meanwhile ends here, storing nothing
        return outcome

    _on_last_batch(compared, "compare_run", "compare_error",
                   "Run the batch first; the comparison uses its prompts.")
    del BATCH.comparing  # ended, not stopped
    slot.empty()


def note_a_stopped_run() -> None:
    """A run that a widget interrupted is not kept: say how far it got, and what the results below are."""
    if BATCH.has("running"):
        done, total = BATCH.take("running")
        shown = (" The results below are from the last run that finished." if BATCH.has("run")
                 else "")
        BATCH.run_stopped = (
            f"{how_it_stopped()} after {done} of {total} requests had finished; a stopped run is not kept.{shown} "
            "Press **Run the batch** to start again.")


def run_stopped() -> str | None:
    return BATCH.run_stopped


def note_a_stopped_comparison() -> None:
    """A comparison that a widget interrupted keeps nothing (its medians need every run): say how far it got."""
    if BATCH.has("comparing"):
        done, total = BATCH.take("comparing")
        BATCH.compare_stopped = (
            f"{how_it_stopped()} after {done} of {total} runs: a comparison needs all of them for its medians, "
            "so none is shown. Press **Run both and compare** to start again.")


def compare_stopped() -> str | None:
    return BATCH.compare_stopped


def vllm_available() -> bool:

    return find_python() is not None


def vllm_run():
    return BATCH.vllm_run


def on_vllm() -> None:
    """Run the last batch's prompts, sampling and limits on vLLM, and compare the outputs."""

    _on_last_batch(lambda done: batch_on_vllm(current_model(), done.workload, done.settings,
                                              [o.token_ids for o in done.outputs]),
                   "vllm_run", "vllm_error", "Run the batch first; vLLM runs its prompts.")
