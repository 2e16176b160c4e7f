"""A batch job: many prompts through one engine, with a time series of what every step did.

    workload = synthetic_workload(lm.tokenizer, lm.vocab_size, count=16, prompt_len=(8, 32),
                                  output_len=(16, 32), shared_prefix=16)
    result = run_batch(lm, workload, BatchSettings(EngineConfig(block_size=16)))
    result.series[-1].blocks_used, result.rows()[0]["text"], result.to_jsonl()

The workload (kvviz.workloads) is either uploaded (a .txt file, one prompt per line, or a .jsonl
file, one {"prompt": ...} per line, as `python -m kvviz generate` reads them) or synthetic: slices
of the bundled model's held-out text, optionally all starting with the same tokens, so that
prefix caching has something to share. The engine's settings are an EngineConfig and the
sampling a SamplingParams, as everywhere else. `compare_with_transformers` runs the same prompts through
transformers' own `generate` (static, left-padded batches), reusing kvviz.bench.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field, replace
from time import perf_counter

from kvviz import bench
from kvviz.lessons.budget import ModelCost, Work, check_click, most_that_fits, stopwatch
from kvviz.engine.config import EngineConfig
from kvviz.engine.engine import Engine
from kvviz.engine.sampling import SamplingParams
from kvviz.engine.block_pool import BLOCK_BOOKKEEPING_BYTES
from kvviz.engine.device_memory import available_memory_bytes
from kvviz.engine.kv_cache import CacheShape
from kvviz.engine.model_parts import model_parts
from kvviz.shapes import format_bytes
from kvviz.throughput import busy_note, machine_load, output_tokens_per_s
from kvviz.workloads import Workload, WorkloadError, jsonl_lines, request_sampling


# ---- running -----------------------------------------------------------------------------
@dataclass(slots=True)
class BatchSettings:
    """The engine's settings and the sampling of one run.

    engine.num_blocks None: enough blocks for every request at its full length at once.
    sampling_params: every request's sampling; its max_tokens comes from the workload, and
    request i samples with seed + i, so that equal prompts need not give equal samples.
    """

    engine: EngineConfig = field(default_factory=EngineConfig)
    sampling_params: SamplingParams = field(default_factory=lambda: SamplingParams(seed=0, ignore_eos=True))

    def pool_blocks(self, lm, workload: Workload) -> int:
        """The pool's blocks: room for every request (num_blocks None), or the size asked for, once
        check_pool has found that the requests can fill it and memory holds it."""
        if self.engine.num_blocks is None:
            return auto_pool_blocks(lm, workload, self.engine.block_size)
        check_pool(lm, workload, self.engine.num_blocks, self.engine.block_size)
        return self.engine.num_blocks

    def sampling(self, max_tokens: int, request_index: int) -> SamplingParams:
        return request_sampling(self.sampling_params, request_index, max_tokens)


POOL_MEMORY_FRACTION = 0.45  # of free memory, the most a batch's pool may take


def auto_pool_blocks(lm, workload: Workload, block_size: int) -> int:
    """Room for every request at its full length at once, but no more than a share of free memory
    (a thousand long requests on a full-size model would not fit)."""
    return max(1, min(workload.blocks_needed(block_size), blocks_that_fit(lm, block_size)))


def block_bytes(lm, block_size: int) -> int:
    """One block: its tokens' keys and values in every layer, and its bookkeeping in host memory."""
    return block_size * CacheShape.from_model(model_parts(lm).model).bytes_per_token + BLOCK_BOOKKEEPING_BYTES


def blocks_that_fit(lm, block_size: int) -> int:
    device = next(model_parts(lm).model.parameters()).device
    return int(available_memory_bytes(device) * POOL_MEMORY_FRACTION) // block_bytes(lm, block_size)


def check_pool(lm, workload: Workload, num_blocks: int, block_size: int) -> None:
    """A pool asked for by size: no larger than the requests can fill, nor than memory holds; one
    sentence otherwise, before anything is allocated (the page's field reached 1,000,000 blocks:
    3.8 GB for two prompts, or one 12.3 GB allocation that failed)."""
    need = workload.blocks_needed(block_size)
    if num_blocks > need:
        raise WorkloadError(f"A pool of {num_blocks:,} blocks is more than these {len(workload)} requests can fill "
                            f"({need:,} blocks of {block_size} tokens hold every one at its full length); set "
                            f"{need:,} or fewer, or 0 for room for every request.")
    fit = blocks_that_fit(lm, block_size)
    if num_blocks > fit:
        raise WorkloadError(f"A pool of {num_blocks:,} blocks of {block_size} tokens takes "
                            f"{format_bytes(num_blocks * block_bytes(lm, block_size))}, more than the "
                            f"{POOL_MEMORY_FRACTION:.0%} of free memory a batch may take; set {fit:,} blocks or fewer.")


# ---- what a run costs, before it starts (kvviz.lessons.budget) --------------------------------------
def within_context(workload: Workload, max_context: int) -> tuple[Workload, int]:
    """The workload with each request's tokens to generate cut to what fits the model's context (the
    engine stops there: a request of 255 prompt tokens asking for 300 in a 512-token context gets
    257), and how many requests were cut."""
    room = [min(want, max_context - len(prompt)) for prompt, want in zip(workload.prompts, workload.max_tokens)]
    return replace(workload, max_tokens=room), sum(r < w for r, w in zip(room, workload.max_tokens))


def batch_work(lm, workload: Workload, settings: BatchSettings) -> Work:
    """The engine's forward passes for the batch: their FLOPs (kvviz.bench.model_flops) and their
    number, at least the decode steps shared by max_num_seqs requests at a time and the tokens over
    the token budget per step (preemptions add more)."""
    parts = model_parts(lm)
    work, _ = within_context(workload, parts.max_context)
    running = max(1, min(settings.engine.max_num_seqs, len(work)))
    steps = max(-(-work.num_output_tokens // running),
                -(-(work.num_prompt_tokens + work.num_output_tokens) // settings.engine.max_num_batched_tokens))
    return Work(bench.model_flops(parts.model, work), steps, step_scale=ModelCost.of(parts.model).step_scale,
                click="batch")


def batch_seconds(lm, workload: Workload, settings: BatchSettings) -> float:
    """The batch's estimated seconds on this server, or one sentence (WorkloadError, WorkTooLarge) saying why
    it cannot run: no prompts, or past one click's budget."""
    if not len(workload):
        raise WorkloadError("There are no prompts to run; upload a file or make a synthetic workload.")
    return check_click(batch_work(lm, workload, settings), next(model_parts(lm).model.parameters()).device,
                       f"This batch of {len(workload)} requests", "ask for fewer prompts or fewer tokens to generate, "
                       "or let more requests run at once")


def generate_work(model, workload: Workload, batch_size: int) -> Work:
    """transformers' generate in static, left-padded batches: every row of a batch runs its widest
    prompt and its longest output."""
    work = Work()
    for first in range(0, len(workload), batch_size):
        prompts, wants = workload.prompts[first:first + batch_size], workload.max_tokens[first:first + batch_size]
        width, new = max(map(len, prompts)), max(wants)
        padded = Workload("padded", [[0] * width] * len(prompts), [new] * len(prompts))
        work += Work(bench.model_flops(model, padded), passes=new)  # generate's own passes: FLOPs only
    return work


@dataclass(slots=True)
class StepPoint:
    """One engine step of the run, for the charts over time."""

    step: int
    time_s: float  # since the run started, at the end of this step
    step_s: float
    tokens_run: int  # prompt and generated tokens through the model this step
    tokens_sampled: int  # new tokens this step
    tokens_per_s: float  # tokens_sampled / step_s
    running: int
    waiting: int
    finished: int  # so far
    blocks_used: int
    preemptions: int  # this step
    prefix_hit_tokens: int  # prompt tokens found in the prefix cache this step
    ran_ids: list[int] = field(default_factory=list)  # requests with tokens in this step's forward pass


@dataclass
class BatchResult:
    workload: Workload
    settings: BatchSettings
    model_name: str
    num_blocks: int
    seconds: float
    series: list[StepPoint]
    outputs: list  # kvviz.engine.RequestOutput, in the workload's order
    stats: dict = field(default_factory=dict)  # the engine's counters

    @property
    def output_tokens(self) -> int:
        return sum(len(o.token_ids) for o in self.outputs)

    @property
    def tokens_per_s(self) -> float:
        """Over the wall time, with whatever the caller did between steps (drawing, for one)."""
        return output_tokens_per_s(self.output_tokens, self.seconds)

    @property
    def engine_seconds(self) -> float:
        """The engine's own time in its steps (schedule, forward pass, sample), drawing left out."""
        return sum(p.step_s for p in self.series)

    @property
    def engine_tokens_per_s(self) -> float:
        """kvviz.throughput's definition, over the engine's step time."""
        return output_tokens_per_s(self.output_tokens, self.engine_seconds)

    @property
    def preemptions(self) -> int:
        return sum(p.preemptions for p in self.series)

    @property
    def prefix_hit_tokens(self) -> int:
        return self.stats.get("cached_tokens", 0)

    @property
    def hit_rate(self) -> float:
        return self.prefix_hit_tokens / max(self.stats.get("prompt_tokens", 0), 1)

    def rows(self) -> list[dict]:
        """One row per request, for the results table and the download."""
        return [{"request": i, "prompt (end)": _tail(text), "prompt tokens": len(out.prompt_token_ids),
                 "generated tokens": len(out.token_ids), "prefix-cache tokens": out.num_cached_tokens,
                 "preemptions": out.num_preemptions, "finish": out.finish_reason, "text": out.text}
                for i, (text, out) in enumerate(zip(self.workload.texts, self.outputs))]

    def to_jsonl(self) -> str:
        """One JSON object a line, the fields of `python -m kvviz generate --out`."""
        return "".join(jsonl_lines(self.workload.texts, self.outputs))


def _tail(text: str, width: int = 30) -> str:
    """The end of a prompt: synthetic prompts share their start, so the end tells them apart."""
    text = text.replace("\n", " ")
    return text if len(text) <= width else "…" + text[-width:]


def run_batch(lm, workload: Workload, settings: BatchSettings | None = None, progress=None) -> BatchResult:
    """Generate every request of the workload in one engine, recording a StepPoint per step.

    progress: optional callable(num_finished, num_total, points) after every step.
    Raises kvviz.EngineError (a ValueError) for a request the pool or the model cannot hold, and
    WorkloadError or kvviz.lessons.budget.WorkTooLarge for a pool or a batch past its bounds, before any work.
    """
    settings = settings or BatchSettings()
    num_blocks = settings.pool_blocks(lm, workload) if len(workload) else 0
    batch_seconds(lm, workload, settings)
    work, device = batch_work(lm, workload, settings), next(model_parts(lm).model.parameters()).device
    timing = stopwatch(work, device)  # reported when every request is done: budget.Pace
    engine = Engine(lm, settings.engine, num_blocks=num_blocks)
    params = [settings.sampling(n, i) for i, n in enumerate(workload.max_tokens)]
    points: list[StepPoint] = []
    start = perf_counter()

    def watch(num_finished, num_total, record):
        status = [r.status for r in record.requests]
        sampled = len(record.sampled)
        points.append(StepPoint(
            step=record.step, time_s=perf_counter() - start, step_s=record.step_s,
            tokens_run=record.num_tokens_run, tokens_sampled=sampled,
            tokens_per_s=sampled / record.step_s if record.step_s > 0 else 0.0,
            running=status.count("running"), waiting=status.count("waiting"), finished=num_finished,
            blocks_used=engine.pool.num_blocks - record.num_free_blocks,  # sliding layers: the full group's
            preemptions=sum(e.kind == "preempt" for e in record.events),
            prefix_hit_tokens=sum(len(e.block_ids) for e in record.events if e.kind == "prefix_hit")
            * engine.block_size,
            ran_ids=sorted({c.request_id for c in record.chunks})))
        if progress is not None:
            progress(num_finished, num_total, points)

    outputs = engine.generate(workload.prompts, params, progress=watch)
    seconds = perf_counter() - start
    timing()
    name = getattr(lm, "name", type(lm).__name__)
    return BatchResult(workload, settings, name, engine.pool.num_blocks, seconds, points, outputs, dict(engine.stats))


# ---- against transformers ----------------------------------------------------------------
COMPARE_REPEATS = 3  # timed runs of each side, after one warm-up of each
WARMUP_TOKENS = 4  # a warm-up's tokens per request: first-call costs are paid in the first steps
AGREE_WITHIN = 0.10  # consecutive clicks should agree this closely; a wider spread of single runs is said


@dataclass(slots=True)
class TransformersComparison:
    """kvviz and transformers `generate` on the same prompts, greedy, every request to its length:
    each side warmed up once, then timed COMPARE_REPEATS times, the two sides taking turns, so that
    a busy moment of the machine falls on both. Each SystemRun keeps its median time and, in
    details["all_seconds"], every run's."""

    kvviz: bench.SystemRun
    transformers: bench.SystemRun
    agreement: bench.Agreement
    hf_batch_size: int
    load_before: float | None = None  # the machine's 1-minute load average when the runs started
    cut_requests: int = 0  # requests whose tokens to generate were cut to the model's context, on both sides
    max_context: int = 0
    batch_requests: int = 0  # the batch's requests, of which the first agreement.num_requests were compared

    @property
    def speedup(self) -> float:
        """The ratio of the median output tokens per second, kvviz over transformers."""
        return self.kvviz.tokens_per_s / self.transformers.tokens_per_s if self.transformers.tokens_per_s else 0.0

    @property
    def speedup_range(self) -> tuple[float, float]:
        """The lowest and highest ratio any pairing of one kvviz run with one transformers run gives.

        Worked in tokens per second, the same arithmetic as speedup, so the median's ratio lies
        inside the range to the last bit of a float."""
        ours = [output_tokens_per_s(self.kvviz.output_tokens, s) for s in self.kvviz.details["all_seconds"]]
        theirs = [output_tokens_per_s(self.transformers.output_tokens, s)
                  for s in self.transformers.details["all_seconds"]]
        if not min(theirs):
            return 0.0, 0.0
        return min(ours) / max(theirs), max(ours) / min(theirs)

    def busy_note(self) -> str | None:
        """One sentence when the times say the machine was busy, else None."""
        return busy_note([self.kvviz.details["all_seconds"], self.transformers.details["all_seconds"]],
                         self.load_before)

    def spread_note(self) -> str | None:
        """One sentence, beside the headline, when single runs paired put the ratio more than
        AGREE_WITHIN either side of the median's: then the next click may well show another figure."""
        low, high = self.speedup_range
        if self.speedup * (1 - AGREE_WITHIN) <= low and high <= self.speedup * (1 + AGREE_WITHIN):
            return None
        load = f" (load {self.load_before:.1f} on {os.cpu_count()} cores)" if self.load_before is not None else ""
        return (f"Single runs paired gave {low:.2f}× to {high:.2f}×, more than {AGREE_WITHIN:.0%} either side of "
                f"the medians' {self.speedup:.2f}×: the machine is busy{load}, so the next click may show any "
                "figure in that range.")

    def throughputs_note(self, live: BatchResult) -> str:
        """What each tokens/s on the page counts, where the live run's figure and these disagree."""
        return (f"Two throughputs, two things counted: the {live.engine_tokens_per_s:,.0f} tokens/s at the top "
                "counts one run's engine steps while the page drew its charts (the first run after loading also "
                f"warms up); kvviz's {self.kvviz.tokens_per_s:,.0f} tokens/s here is the median of "
                f"{len(self.kvviz.details['all_seconds'])} warm runs, nothing drawn.")

    def rows(self) -> list[dict]:
        return [{"system": run.name, "median seconds": run.seconds,
                 "all runs (s)": ", ".join(f"{s:.2f}" for s in run.details["all_seconds"]),
                 "output tokens": run.output_tokens, "tokens generated": run.generated_tokens,
                 "output tokens/s": run.tokens_per_s,
                 "slowest run tokens/s": output_tokens_per_s(run.output_tokens, max(run.details["all_seconds"])),
                 "fastest run tokens/s": output_tokens_per_s(run.output_tokens, min(run.details["all_seconds"]))}
                for run in (self.kvviz, self.transformers)]

    def table(self) -> list[dict]:
        """rows() for the page: short headers, every value rounded with its unit, so that the table
        fits 1280 px in presenter type; the fastest and slowest runs are the chart's bars."""
        return [{"system": run.name, "output tokens/s": f"{run.tokens_per_s:,.0f} tokens/s",
                 "median run": f"{run.seconds:.2f} s",
                 "each run": ", ".join(f"{s:.2f} s" for s in run.details["all_seconds"]),
                 "output tokens": f"{run.output_tokens:,}", "generated": f"{run.generated_tokens:,}"}
                for run in (self.kvviz, self.transformers)]


def generate_twin(model):
    """The same module for transformers' `generate`, with its own generation config (no EOS, so
    every request runs to its length, as the engine's ignore_eos does). A shallow copy: it shares
    every weight, so a full-size model is not held twice. Outside the engine's forward, kvviz's
    attention function hands over to transformers' SDPA, so `generate` runs as usual."""
    twin = copy.copy(model)
    twin.generation_config = copy.deepcopy(model.generation_config)
    twin.generation_config.eos_token_id = None
    twin.generation_config.pad_token_id = bench.pad_token_id(model)
    return twin


def compare_with_transformers(lm, workload: Workload, settings: BatchSettings | None = None,
                              hf_batch_size: int = 16, repeats: int = COMPARE_REPEATS,
                              progress=None, estimated=None) -> TransformersComparison:
    """Run the workload greedily in kvviz's engine and in transformers `generate`: one untimed
    warm-up of each on the first two requests (WARMUP_TOKENS each), then `repeats` timed runs of each,
    in turns.

    Both sides generate no further than the model's context (kvviz stops there; transformers would
    run on past it, and the two would do different work): requests asking for more are cut, and
    counted in `cut_requests`. The whole comparison's work is estimated first (kvviz.lessons.budget):
    past one click's budget it compares the batch's first requests, as many as fit (a deep model at the
    page's defaults; `batch_requests` keeps the batch's size), timing each side fewer times (not under
    two, a spread to show) when not even two requests fit, and refuses when they still do not.

    progress: optional callable(done, total, text), called before each of the 2 + 2 x repeats runs;
    estimated: optional callable(seconds), told the whole comparison's estimate before the first."""
    settings = settings or BatchSettings()
    if not len(workload):
        raise WorkloadError("There are no prompts to run; upload a file or make a synthetic workload.")
    if hf_batch_size < 1:
        raise WorkloadError(f"The transformers batch size must be at least 1, not {hf_batch_size}.")
    parts = model_parts(lm)
    model = parts.model
    num_blocks = settings.pool_blocks(lm, workload)  # as the batch ran
    asked = workload
    workload, cut = within_context(asked, parts.max_context)
    first_two, batch_requests = workload.head(2), len(workload)
    warmup = replace(first_two, max_tokens=[min(WARMUP_TOKENS, tokens) for tokens in first_two.max_tokens])
    runs, device = max(1, repeats), next(model.parameters()).device

    def work(requests: int, runs: int) -> Work:
        compared = workload.head(requests)
        return replace(batch_work(lm, warmup, settings) + generate_work(model, warmup, hf_batch_size)
                       + (batch_work(lm, compared, settings) + generate_work(model, compared, hf_batch_size)) * runs,
                       click="compare")

    while True:  # past the budget: the first requests that fit; fewer timed runs (not under two) when two do not
        fits = most_that_fits(lambda requests, runs=runs: work(requests, runs).seconds(device), batch_requests, 2)
        if fits >= 2 or runs <= min(2, repeats):
            break
        runs -= 1
    if 2 <= fits < batch_requests:
        workload, cut = within_context(asked.head(fits), parts.max_context)
    elif fits < 2:
        runs = max(1, repeats)  # not even two requests fit: the refusal names the whole comparison
    seconds = check_click(work(len(workload), runs), device,
                          f"Comparing {len(workload)} requests {runs} times each way",
                          "compare a smaller batch: run one with fewer prompts or fewer tokens to generate first")
    if estimated is not None:
        estimated(seconds)
    timing = stopwatch(work(len(workload), runs), device)  # reported when every run is done: budget.Pace
    twin = generate_twin(model)
    total = 2 + 2 * runs

    def about_to(done: int, text: str) -> None:
        if progress is not None:
            progress(done, total, text)

    load_before = machine_load()
    about_to(0, "Warming up kvviz on the first two prompts")
    bench.run_kvviz(model, warmup, settings.engine, num_blocks=num_blocks)  # first-call costs are nobody's speed
    about_to(1, "Warming up transformers generate on the first two prompts")
    bench.run_hf_generate(twin, warmup, hf_batch_size)
    ours, theirs = [], []
    for index in range(runs):
        about_to(2 + 2 * index, f"Timing kvviz, run {index + 1} of {runs}")
        ours.append(bench.run_kvviz(model, workload, settings.engine, num_blocks=num_blocks))
        about_to(3 + 2 * index, f"Timing transformers generate, run {index + 1} of {runs}")
        theirs.append(bench.run_hf_generate(twin, workload, hf_batch_size))
    timing()
    kvviz, transformers = (bench.median_run(runs) for runs in (ours, theirs))
    return TransformersComparison(kvviz, transformers, bench.compare_outputs(kvviz.outputs, transformers.outputs),
                                  hf_batch_size, load_before, cut, parts.max_context, batch_requests)


def live_summary(points: list[StepPoint]) -> dict:
    """What a run in progress has done so far, for the live counters."""
    last, elapsed = points[-1], points[-1].time_s
    return {"tokens_per_s": output_tokens_per_s(sum(p.tokens_sampled for p in points), elapsed),
            "running": last.running, "waiting": last.waiting, "blocks_used": last.blocks_used,
            "preemptions": sum(p.preemptions for p in points), "finished": last.finished}
