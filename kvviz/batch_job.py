"""A batch job: many prompts through one engine, with a time series of what every step did.

    workload = synthetic_workload(lm.tokenizer, lm.vocab_size, count=16, prompt_len=(8, 32),
                                  output_len=(16, 32), shared_prefix=16)
    result = run_batch(lm, workload, BatchSettings(block_size=16))
    result.series[-1].blocks_used, result.rows()[0]["text"], result.to_jsonl()

The workload is either uploaded (a .txt file, one prompt per line, or a .jsonl file, one
{"prompt": ...} per line, as `python -m kvviz generate` reads them) or synthetic: slices of the
bundled model's held-out text, optionally all starting with the same tokens, so that prefix
caching has something to share. `compare_with_transformers` runs the same prompts through
transformers' own `generate` (static, left-padded batches), reusing kvviz.bench.
"""

from __future__ import annotations

import copy
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter

from kvviz import bench
from kvviz.cli import parse_prompts
from kvviz.engine import Engine, SamplingParams
from kvviz.engine.model_parts import model_parts
from kvviz.engine.scheduler import blocks_needed
from kvviz.throughput import output_tokens_per_s

MAX_UPLOAD_BYTES = 2 * 1024 * 1024  # a classroom's prompt file, not a dataset
MAX_UPLOAD_PROMPTS = 1024  # prompts in one uploaded file
MAX_JOB_TOKENS = 200_000  # prompt tokens plus tokens to generate, over the whole job
UPLOAD_LIMITS = (f"at most {MAX_UPLOAD_BYTES // 2**20} MiB and {MAX_UPLOAD_PROMPTS:,} prompts, "
                 f"{MAX_JOB_TOKENS:,} tokens in all (prompts plus outputs)")
UPLOAD_SUFFIXES = (".txt", ".jsonl")


class BatchJobError(ValueError):
    """A workload or setting the batch job refuses; the message is one sentence saying what to do."""


# ---- workloads ---------------------------------------------------------------------------
@dataclass(slots=True)
class BatchWorkload:
    """Prompts as token ids (what the engine runs), their text (what people read), and lengths."""

    source: str  # "synthetic" or the uploaded file's name
    prompts: list[list[int]]
    texts: list[str]
    max_tokens: list[int]  # tokens to generate, per request

    def __len__(self) -> int:
        return len(self.prompts)

    def blocks_needed(self, block_size: int) -> int:
        """Blocks to hold every request at its full length at once (no sharing)."""
        return sum(blocks_needed(len(p) + n, block_size) for p, n in zip(self.prompts, self.max_tokens))

    def to_bench(self) -> bench.Workload:
        return bench.Workload(self.source, self.prompts, self.max_tokens)


def _check_range(what: str, low: int, high: int) -> None:
    if low < 1 or high < low:
        raise BatchJobError(f"The {what} range must start at 1 or more and not end below its start, "
                            f"not {low} to {high}.")


def draw_lengths(count: int, output_len: tuple[int, int], seed: int) -> list[int]:
    """Tokens to generate per request, uniform in output_len (inclusive)."""
    _check_range("output length", *output_len)
    rng = random.Random(seed + 1)
    return [rng.randint(*output_len) for _ in range(count)]


def synthetic_workload(tokenizer, vocab_size: int, count: int = 16, prompt_len: tuple[int, int] = (8, 32),
                       output_len: tuple[int, int] = (16, 32), shared_prefix: int = 0,
                       seed: int = 0, text: str | None = None) -> BatchWorkload:
    """`count` prompts: `shared_prefix` tokens common to all, then each its own part of a length
    drawn uniformly from prompt_len. Tokens are slices of real text when there is a tokenizer
    (default: the bundled model's held-out text), random ids otherwise."""
    if count < 1:
        raise BatchJobError(f"Ask for at least one prompt, not {count}.")
    _check_range("prompt length", *prompt_len)
    if shared_prefix < 0:
        raise BatchJobError(f"The shared prefix must be 0 or more tokens, not {shared_prefix}.")
    rng = random.Random(seed)
    if tokenizer is not None:
        from kvviz.gqa import default_heldout_text

        corpus = tokenizer(text if text is not None else default_heldout_text(), verbose=False)["input_ids"]
    else:
        corpus = [rng.randrange(vocab_size) for _ in range(20_000)]
    longest = shared_prefix + prompt_len[1]
    if len(corpus) <= longest:
        raise BatchJobError(f"The text has {len(corpus)} tokens, too few for {longest}-token prompts; "
                            "ask for shorter prompts.")

    def piece(length: int) -> list[int]:
        start = rng.randrange(len(corpus) - length)
        return list(corpus[start:start + length])

    prefix = piece(shared_prefix) if shared_prefix else []
    prompts = [prefix + piece(rng.randint(*prompt_len)) for _ in range(count)]
    texts = [tokenizer.decode(p) if tokenizer is not None else " ".join(map(str, p)) for p in prompts]
    return BatchWorkload("synthetic", prompts, texts, draw_lengths(count, output_len, seed))


def parse_upload(name: str, data: bytes) -> list[str]:
    """The prompts of an uploaded .txt or .jsonl file; refuses big, binary or empty files."""
    file_name = Path(name).name or "the upload"
    suffix = Path(file_name).suffix.lower()
    if suffix not in UPLOAD_SUFFIXES:
        raise BatchJobError(f"{file_name} is not a .txt or .jsonl file; upload prompts as text, one per line, "
                            "or as JSON lines like {\"prompt\": \"...\"}.")
    if len(data) > MAX_UPLOAD_BYTES:
        raise BatchJobError(f"{file_name} is {len(data) / 2**20:.1f} MiB, more than the "
                            f"{MAX_UPLOAD_BYTES // 2**20} MiB limit; upload fewer prompts.")
    try:
        decoded = data.decode("utf-8")
    except UnicodeDecodeError:
        decoded = None
    if decoded is None or "\x00" in decoded:
        raise BatchJobError(f"{file_name} is not UTF-8 text; upload a plain-text .txt or .jsonl file.")
    # the command line's parser, so the app and `python -m kvviz generate` accept the same files
    try:
        prompts = parse_prompts(decoded, file_name)
    except ValueError as error:
        raise BatchJobError(str(error)) from None
    if len(prompts) > MAX_UPLOAD_PROMPTS:
        raise BatchJobError(f"{file_name} holds {len(prompts):,} prompts, more than the {MAX_UPLOAD_PROMPTS:,} "
                            "one job takes; split it into smaller files.")
    return prompts


def upload_workload(tokenizer, name: str, data: bytes, output_len: tuple[int, int] = (16, 32),
                    seed: int = 0) -> BatchWorkload:
    prompts = parse_upload(name, data)
    if tokenizer is None:
        raise BatchJobError("This model has no tokenizer, so it cannot read text prompts; "
                            "use a synthetic workload instead.")
    token_ids = [tokenizer(p)["input_ids"] for p in prompts]
    empty = next((i for i, t in enumerate(token_ids) if not t), None)
    if empty is not None:
        raise BatchJobError(f"Prompt {empty + 1} of {Path(name).name} has no tokens; remove it or add text.")
    output_lens = draw_lengths(len(prompts), output_len, seed)
    total = sum(map(len, token_ids)) + sum(output_lens)
    if total > MAX_JOB_TOKENS:
        raise BatchJobError(f"{Path(name).name} makes a job of {total:,} tokens (prompts plus outputs), more than "
                            f"the {MAX_JOB_TOKENS:,} allowed; upload fewer or shorter prompts, or ask for fewer tokens.")
    return BatchWorkload(Path(name).name, token_ids, prompts, output_lens)


# ---- running -----------------------------------------------------------------------------
@dataclass(slots=True)
class BatchSettings:
    """Pool and sampling settings of one run (num_blocks 0: enough for every request at once)."""

    block_size: int = 16
    num_blocks: int = 0
    enable_prefix_caching: bool = True
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    ignore_eos: bool = True

    def pool_blocks(self, lm, workload: BatchWorkload) -> int:
        return self.num_blocks or auto_pool_blocks(lm, workload, self.block_size)

    def sampling(self, max_tokens: int, request_index: int) -> SamplingParams:
        # each request its own seed, so that equal prompts need not give equal samples
        return SamplingParams(max_tokens=max_tokens, temperature=self.temperature, top_k=self.top_k,
                              top_p=self.top_p, seed=self.seed + request_index, ignore_eos=self.ignore_eos)


def auto_pool_blocks(lm, workload: BatchWorkload, block_size: int, memory_fraction: float = 0.45) -> int:
    """Room for every request at its full length at once, but no more than a share of free memory
    (a thousand long requests on a full-size model would not fit)."""
    from kvviz.engine.kv_cache import CacheShape
    from kvviz.models import available_memory_bytes

    model = model_parts(lm).model
    block_bytes = block_size * CacheShape.from_model(model).bytes_per_token
    fit = int(available_memory_bytes(next(model.parameters()).device) * memory_fraction) // block_bytes
    return max(1, min(workload.blocks_needed(block_size), fit))


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
    workload: BatchWorkload
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
        return "".join(json.dumps({"prompt": text, "text": out.text, "token_ids": out.token_ids,
                                   "finish_reason": out.finish_reason,
                                   "num_cached_tokens": out.num_cached_tokens}) + "\n"
                       for text, out in zip(self.workload.texts, self.outputs))


def _tail(text: str, width: int = 30) -> str:
    """The end of a prompt: synthetic prompts share their start, so the end tells them apart."""
    text = text.replace("\n", " ")
    return text if len(text) <= width else "…" + text[-width:]


def run_batch(lm, workload: BatchWorkload, settings: BatchSettings | None = None, progress=None) -> BatchResult:
    """Generate every request of the workload in one engine, recording a StepPoint per step.

    progress: optional callable(num_finished, num_total, points) after every step.
    Raises kvviz.EngineError (a ValueError) for a request the pool or the model cannot hold.
    """
    settings = settings or BatchSettings()
    if not len(workload):
        raise BatchJobError("There are no prompts to run; upload a file or make a synthetic workload.")
    engine = Engine(lm, block_size=settings.block_size, num_blocks=settings.pool_blocks(lm, workload),
                    enable_prefix_caching=settings.enable_prefix_caching, max_num_seqs=settings.max_num_seqs,
                    max_num_batched_tokens=settings.max_num_batched_tokens, record_blocks=False)
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
            blocks_used=engine.num_blocks - record.num_free_blocks,
            preemptions=sum(e.kind == "preempt" for e in record.events),
            prefix_hit_tokens=sum(len(e.block_ids) for e in record.events if e.kind == "prefix_hit")
            * engine.block_size,
            ran_ids=sorted({c.request_id for c in record.chunks})))
        if progress is not None:
            progress(num_finished, num_total, points)

    outputs = engine.generate(workload.prompts, params, progress=watch)
    seconds = perf_counter() - start
    name = getattr(lm, "name", type(lm).__name__)
    return BatchResult(workload, settings, name, engine.num_blocks, seconds, points, outputs, dict(engine.stats))


# ---- against transformers ----------------------------------------------------------------
@dataclass(slots=True)
class TransformersComparison:
    """kvviz and transformers `generate` on the same prompts, greedy, every request to its length."""

    kvviz: bench.SystemRun
    transformers: bench.SystemRun
    agreement: bench.Agreement
    hf_batch_size: int

    @property
    def speedup(self) -> float:
        """kvviz's output tokens per second over transformers'."""
        return self.kvviz.tokens_per_s / self.transformers.tokens_per_s if self.transformers.tokens_per_s else 0.0

    def rows(self) -> list[dict]:
        return [{"system": run.name, "seconds": run.seconds, "output tokens": run.output_tokens,
                 "tokens generated": run.generated_tokens, "output tokens/s": run.tokens_per_s}
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


def compare_with_transformers(lm, workload: BatchWorkload, settings: BatchSettings | None = None,
                              hf_batch_size: int = 16) -> TransformersComparison:
    """Run the workload greedily in kvviz's engine and in transformers `generate`; time both."""
    settings = settings or BatchSettings()
    if not len(workload):
        raise BatchJobError("There are no prompts to run; upload a file or make a synthetic workload.")
    if hf_batch_size < 1:
        raise BatchJobError(f"The transformers batch size must be at least 1, not {hf_batch_size}.")
    model = model_parts(lm).model
    work = workload.to_bench()
    kvviz = bench.run_kvviz(model, work, block_size=settings.block_size, num_blocks=settings.pool_blocks(lm, workload),
                            enable_prefix_caching=settings.enable_prefix_caching,
                            max_num_seqs=settings.max_num_seqs,
                            max_num_batched_tokens=settings.max_num_batched_tokens)
    transformers = bench.run_hf_generate(generate_twin(model), work, hf_batch_size)
    return TransformersComparison(kvviz, transformers, bench.compare_outputs(kvviz.outputs, transformers.outputs),
                                  hf_batch_size)


def live_summary(points: list[StepPoint]) -> dict:
    """What a run in progress has done so far, for the live counters."""
    last, elapsed = points[-1], points[-1].time_s
    return {"tokens_per_s": output_tokens_per_s(sum(p.tokens_sampled for p in points), elapsed),
            "running": last.running, "waiting": last.waiting, "blocks_used": last.blocks_used,
            "preemptions": sum(p.preemptions for p in points), "finished": last.finished}
