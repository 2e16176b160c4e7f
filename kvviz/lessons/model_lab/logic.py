"""The Model lab: time one decode step against the context length, with and without the cache.

    lm = build_lab_model(CustomShape(num_layers=4, hidden_size=256, num_heads=8, num_kv_heads=2))
    result = measure(lm, lab_contexts(lm.max_context))
    result.timings[-1].cached_s, result.timings[-1].uncached_s   # seconds of one forward pass

For each context length c, both engines produce the token at position c, with c tokens in
context: the cached engine prefills c - 1 tokens once and then runs only the newest token,
reading the other c - 1 keys and values from its cache; the engine without a cache runs all
c tokens through every layer again. The steps are timed in rounds, one each way at every length
a round, each round starting at the next length, so that a busy moment slows one step of a few
lengths rather than all of the first. The weights are random, so the text is nonsense, but the
forward passes, the cache writes and the timings are the engine's own.
"""

from __future__ import annotations

import functools
import os
import random
import statistics
from dataclasses import asdict, dataclass, field

import torch
from transformers import AutoTokenizer

from kvviz.lessons.budget import Work, check_click, forward_flops
from kvviz.engine.engine import Engine
from kvviz.engine.cpu.threads import cpu_share
from kvviz.engine.sampling import SamplingParams
from kvviz.engine.config import DEFAULTS
from kvviz.engine.block_pool import blocks_needed
from kvviz.memory_bill import bill_breakdown, kv_cache_bytes
from kvviz.models import (
    BUNDLED_DIR,
    CustomShape,
    LoadedModel,
    ModelLoadError,
    load_model,
    pick_device,
    pick_dtype,
    validate_shape,
)
from kvviz.shapes import ModelShape, format_bytes
from kvviz.throughput import busy_note, machine_load

# Keep a measurement to seconds: a bigger model is refused with its size rather than left to
# run for minutes on a laptop's CPU. A GPU has room for ten times more. Within that, the work of
# the measurement itself (contexts x repeats x parameters) is estimated and bounded: kvviz.lessons.budget.
MAX_LAB_PARAMS = {"cpu": 200_000_000, "cuda": 2_000_000_000}
LAB_REPEATS = 5  # decode steps timed per context, each way; the page shows their median
AGREE_WITHIN = 0.10  # consecutive Measures should agree this closely; a wider spread of steps is said
SAMPLE_TOKENS = 12  # what the random weights write after the timing


@dataclass(slots=True)
class DecodeTiming:
    """One context length: the forward time of one step with and without the cache, and the bytes."""

    context: int  # tokens the new token attends to, itself included
    cached_s: float  # median forward time of a decode step that reads context - 1 cached tokens
    uncached_s: float  # median forward time of a step that recomputes all context tokens
    cache_bytes: int  # measured by the engine after the decode step: bytes that hold tokens' K and V
    formula_bytes: int  # kvviz.memory_bill.kv_cache_bytes for the same tokens
    cached_spread_s: tuple[float, float] = (0.0, 0.0)  # fastest and slowest of the timed steps
    uncached_spread_s: tuple[float, float] = (0.0, 0.0)
    repeats: int = 1  # warm steps timed, each way

    @property
    def speedup(self) -> float:
        return self.uncached_s / self.cached_s if self.cached_s > 0 else float("nan")

    @property
    def tokens_run(self) -> tuple[int, int]:
        """Tokens through the model for this step: (with the cache, without it). Counts, not times."""
        return 1, self.context

    def median_text(self, cached: bool) -> str:
        """'140 ms' or '12.3 ms': the median step of one side, three figures or so."""
        return format_ms(self.cached_s if cached else self.uncached_s)

    def spread(self, cached: bool) -> str:
        """'12.3 ms median of 5, spread 11.9-13.0 ms' for one side: the median and how far the steps scattered."""
        return (f"{self.median_text(cached)} median of {self.repeats}, "
                f"spread {_spread_text(self.cached_spread_s if cached else self.uncached_spread_s)}")


def format_ms(seconds: float) -> str:
    milliseconds = seconds * 1e3
    return f"{milliseconds:,.0f} ms" if milliseconds >= 100 else f"{milliseconds:.1f} ms"


def _spread_text(spread_s: tuple[float, float]) -> str:
    """'11.9-13.0 ms': the fastest and the slowest of one side's timed steps."""
    low, high = spread_s
    return f"{format_ms(low).removesuffix(' ms')}-{format_ms(high)}"


@dataclass(slots=True)
class LabResult:
    """What the lab measured on one model."""

    name: str
    num_params: int
    weight_bytes: int  # the sum of the parameters' nbytes
    dtype_bytes: int
    bytes_per_token: int  # K and V of one token in every layer, by the formula
    formula: str  # the bill at the longest context measured, every factor named
    device: str
    timings: list[DecodeTiming] = field(default_factory=list)
    sample_text: str | None = None  # what the random weights write, to show it is nonsense
    load_before: float | None = None  # the machine's 1-minute load average when the timing started
    contexts_planned: int = 0  # context lengths the measurement set out to time
    rounds_planned: int = 0  # rounds it set out to time (each a step each way at every length); fewer if stopped

    @property
    def rounds_timed(self) -> int:
        return min((t.repeats for t in self.timings), default=0) if len(self.timings) >= self.contexts_planned else 0

    @property
    def stopped(self) -> bool:
        return self.rounds_timed < self.rounds_planned

    def stopped_note(self) -> str:
        """'Stopped after 2 of 5 rounds: ...' for a measurement stopped part way."""
        return (f"Stopped after {self.rounds_timed} of {self.rounds_planned} rounds: each length's times below are "
                f"the median of {self.rounds_timed} step{'s' if self.rounds_timed != 1 else ''} each way, not "
                f"{self.rounds_planned}. Press **Measure** to time every round.")

    def busy_note(self) -> str | None:
        """One sentence when the timings say the machine was busy, else None."""
        return busy_note([[t.cached_spread_s[0], t.cached_s] for t in self.timings]
                         + [[t.uncached_spread_s[0], t.uncached_s] for t in self.timings], self.load_before)

    def spread_note(self) -> str | None:
        """One sentence, beside the headline, when the longest context's timed steps scattered more
        than AGREE_WITHIN either side of their median on either side: the next Measure may then show
        other medians."""
        longest = self.timings[-1]
        sides = ((longest.cached_s, longest.cached_spread_s), (longest.uncached_s, longest.uncached_spread_s))
        if all(median * (1 - AGREE_WITHIN) <= low and high <= median * (1 + AGREE_WITHIN)
               for median, (low, high) in sides):
            return None
        load = f" (load {self.load_before:.1f} on {os.cpu_count()} cores)" if self.load_before is not None else ""
        return (f"At {longest.context:,} tokens the {longest.repeats} timed steps ranged "
                f"{_spread_text(longest.cached_spread_s)} with the cache and {_spread_text(longest.uncached_spread_s)} "
                f"without, more than {AGREE_WITHIN:.0%} either side of their medians: the machine is busy{load}, so "
                "the next Measure may show other times. The token counts do not change.")

    def rows(self) -> list[dict]:
        """The timings as table rows of short columns, each value rounded with its unit (five columns
        fit 1280 px in presenter type); spread_rows holds the rest."""
        return [{"context": f"{t.context:,} tokens", "with cache": t.median_text(cached=True),
                 "without": t.median_text(cached=False), "ratio": f"{t.speedup:.1f}×",
                 "cache held": format_bytes(t.cache_bytes)} for t in self.timings]

    def spread_rows(self) -> list[dict]:
        """Per context: the tokens each side ran, how far its steps scattered, and the cache's bytes
        as the engine held them and as the formula counts them."""
        return [{"context": f"{t.context:,} tokens", "tokens run": f"1 vs {t.context:,}",
                 "with cache, spread": _spread_text(t.cached_spread_s),
                 "without, spread": _spread_text(t.uncached_spread_s),
                 "engine": f"{t.cache_bytes:,} bytes", "formula": f"{t.formula_bytes:,} bytes"}
                for t in self.timings]

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(slots=True)
class ShapeEstimate:
    """What a shape will cost, known before a byte of it is allocated."""

    num_params: int
    weight_bytes: int
    dtype_bytes: int
    head_dim: int
    intermediate_size: int
    bytes_per_token: int  # K and V of one token in every layer


@functools.cache
def default_vocab_size() -> int:
    """The bundled tokenizer's vocabulary, which a custom shape uses unless told otherwise."""
    return len(AutoTokenizer.from_pretrained(str(BUNDLED_DIR), local_files_only=True))


def estimate(shape: CustomShape, device: str | torch.device | None = None) -> ShapeEstimate:
    """Parameters, weight bytes and cache bytes per token of `shape`; ModelLoadError if it cannot be built."""
    device = pick_device(device)
    vocab_size = shape.vocab_size or default_vocab_size()
    validate_shape(shape, vocab_size)
    element = torch.empty((), dtype=pick_dtype(device)).element_size()
    num_params = shape.num_params(vocab_size)
    head_dim = shape.resolved_head_dim()
    cache_shape = ModelShape(num_layers=shape.num_layers, num_kv_heads=shape.num_kv_heads, head_dim=head_dim)
    return ShapeEstimate(num_params, num_params * element, element, head_dim, shape.resolved_intermediate_size(),
                         kv_cache_bytes(cache_shape, 1, 1, element))


def check_lab_size(shape: CustomShape, device: str | torch.device | None = None, repeats: int = LAB_REPEATS) -> None:
    """Refuse, with the estimate, a model too big to measure in seconds on this device: too many
    parameters (ModelLoadError), or a measurement past a click's budget (kvviz.lessons.budget.WorkTooLarge)."""
    device = pick_device(device)
    limit = MAX_LAB_PARAMS.get(device.type, MAX_LAB_PARAMS["cpu"])
    cost = estimate(shape, device)
    if cost.num_params > limit:
        raise ModelLoadError(
            f"This shape has about {cost.num_params / 1e6:,.0f}M parameters ({cost.weight_bytes / 2**30:.2f} GiB "
            f"of weights); the lab measures up to {limit / 1e6:,.0f}M on {device.type} so that a measurement "
            "takes seconds, so choose fewer layers, a smaller hidden size or a smaller MLP.")
    shorter = " a shorter longest context," if shape.max_context > 128 else ""
    check_click(measurement_work(shape, repeats), device, "Measuring this shape",
                f"choose{shorter} fewer layers, a smaller hidden size or a smaller MLP")


def measurement_work(shape: CustomShape, repeats: int = LAB_REPEATS, sample_tokens: int = SAMPLE_TOKENS) -> Work:
    """The forward passes `measure` runs on this shape, counted as `measure_decode_times` makes them:
    the warm-up, then at each context the cached engine's prefill, `repeats` cached decode steps of
    one token, and `repeats` uncached passes over the whole context (a fresh cached engine for each
    repeat at the longest context, where only one step fits)."""
    vocab_size = shape.vocab_size or default_vocab_size()
    d, hd = shape.hidden_size, shape.resolved_head_dim()
    multiplied = shape.num_params(vocab_size) - vocab_size * d  # the embedding is looked up, not multiplied
    per_pair = 4 * shape.num_heads * hd * shape.num_layers

    def step(new_tokens: int, cached_tokens: int) -> Work:  # logits of the one sampled row: vocab x d
        return Work(forward_flops(multiplied, per_pair, new_tokens, cached_tokens) + 2.0 * vocab_size * d, 1,
                    click="lab")

    contexts = lab_contexts(shape.max_context)
    work = Work()
    for length in sorted({8, max(contexts) - 1}):  # _warm_up: three steps of each engine
        work += step(length, 0) + step(1, length) + step(1, length + 1)
        work += step(length, 0) + step(length + 1, 0) + step(length + 2, 0)
    for context in contexts:
        done = 0
        while done < repeats:
            num_decodes = min(repeats - done, shape.max_context - 1 - context)
            work += step(context - 1, 0)  # the cached engine's prefill
            for index in range(num_decodes):  # a decode step; a fresh uncached engine's pass over the context
                work += step(1, context - 1 + index) + step(context + index, 0)
            done += num_decodes
    return work + step(4, 0) + Work(sample_tokens * step(1, 16).flops, sample_tokens - 1, click="lab")


def build_lab_model(shape: CustomShape, device: str | torch.device | None = None) -> LoadedModel:
    """A Llama-style model of this shape with random weights; ModelLoadError says why not."""
    device = pick_device(device)
    check_lab_size(shape, device)  # validates the shape, then weighs it
    return load_model(shape=shape, device=device)


def lab_contexts(max_context: int, start: int = 16) -> list[int]:
    """Context lengths to measure: 16, 32, 64, ... doubling, and the longest the model allows."""
    longest = max_context - 2  # room for the token the step samples, and one more so it stays cached
    contexts = []
    context = start
    while context < longest:
        contexts.append(context)
        context *= 2
    return contexts + [longest] if longest >= 2 else contexts


def cache_shape_of(lm: LoadedModel) -> ModelShape:
    """The model as the memory bill sees it (layers, KV heads, head size)."""
    return lm.shape


def describe(lm: LoadedModel, contexts: list[int], repeats: int = LAB_REPEATS) -> LabResult:
    """What `lm` weighs and caches, with no timings yet: `measure` fills them in, `repeats` rounds."""
    info = lm.describe()
    shape = cache_shape_of(lm)
    dtype_bytes = info["dtype_bytes"]
    return LabResult(
        name=lm.name, num_params=info["parameters"],
        weight_bytes=sum(p.nbytes for p in lm.model.parameters()), dtype_bytes=dtype_bytes,
        bytes_per_token=kv_cache_bytes(shape, 1, 1, dtype_bytes),
        formula=bill_breakdown(shape, max(contexts), 1, dtype_bytes)[0].formula,
        device=str(lm.device), load_before=machine_load(), contexts_planned=len(contexts), rounds_planned=repeats)


def measure(lm: LoadedModel, contexts: list[int], repeats: int = 3, seed: int = 0,
            sample_tokens: int = 12, progress=None, result: LabResult | None = None) -> LabResult:
    """Describe `lm` and time its decode steps at each context length (see measure_decode_times).

    result: a `describe(lm, contexts, repeats)` to fill in; after each round it holds every context's
    timing so far, so whoever holds it keeps what was timed if the measurement is stopped."""
    result = result if result is not None else describe(lm, contexts, repeats)
    measure_decode_times(lm, contexts, repeats, seed, progress, into=result.timings)
    if sample_tokens and lm.tokenizer is not None:
        result.sample_text = sample_nonsense(lm, sample_tokens)
    return result


def measure_decode_times(lm: LoadedModel, contexts: list[int], repeats: int = 3,
                         seed: int = 0, progress=None, into: list[DecodeTiming] | None = None) -> list[DecodeTiming]:
    """For each context c: the median forward time of `repeats` warm decode steps with c tokens in
    context, with the cache (one new token) and without (all c tokens again), their spread, and the
    cache bytes.

    The steps are timed in rounds, one step each way at every length a round, each round starting at
    the next length. A busy moment (the browser drawing the bar as a round starts, another program)
    then slows one step of a few lengths, which their medians set aside, rather than every step of
    the first lengths. Each length keeps one engine with
    the cache across the rounds (a fresh one near the end of the context, where only one step fits);
    each step without the cache is a fresh engine's one pass over the whole context.

    The timing runs on one thread fewer than torch's own (a_core_left_free).

    progress: optional callable(done, total, text), called before each round.
    into: the list that holds, after each round, every length's timing so far (a new one by default)."""
    if not contexts:
        raise ValueError("Give at least one context length to measure.")
    if min(contexts) < 2 or max(contexts) > lm.max_context - 2:
        raise ValueError(f"Context lengths must lie between 2 and {lm.max_context - 2} for this model "
                         f"(its context holds {lm.max_context} tokens); choose lengths inside that range.")
    if repeats < 1:
        raise ValueError("repeats must be at least 1.")
    rng = random.Random(seed)
    vocab_size = lm.model.get_output_embeddings().weight.shape[0]
    shape = cache_shape_of(lm)
    dtype_bytes = torch.empty((), dtype=lm.dtype).element_size()
    with a_core_left_free():
        if progress is not None:
            progress(0, repeats, "Warming up: the first forward passes are not timed")
        _warm_up(lm, vocab_size, rng, max(contexts))
        prompts = {context: [rng.randrange(vocab_size) for _ in range(context + repeats)] for context in contexts}
        cached_engines = {}  # context -> (its engine with the cache, decode steps taken, steps left in it)
        cached_s, uncached_s = {c: [] for c in contexts}, {c: [] for c in contexts}
        cache_bytes = dict.fromkeys(contexts, 0)
        timings = into if into is not None else []
        for done in range(repeats):
            if progress is not None:
                progress(done, repeats, f"Round {done + 1} of {repeats}: one step each way at each of "
                                        f"{len(contexts)} lengths, {contexts[0]:,} to {contexts[-1]:,} tokens")
            for context in contexts[done % len(contexts):] + contexts[:done % len(contexts)]:
                cached, index, left = cached_engines.get(context, (None, 0, 0))
                if not left:
                    # a step that fills the model's context ends the request and frees its blocks: stop
                    # before, and go on with a fresh engine; its prefill writes c - 1 tokens, not timed
                    left, index = min(repeats - done, lm.max_context - 1 - context), 0
                    cached = _one_request_engine(lm, prompts[context][:context - 1], left, use_cache=True)
                    cached.step()
                # with the cache, the step after `index` decodes runs one token against context + index
                # cached ones; without it, a fresh engine runs all context + index tokens in one pass
                uncached = _one_request_engine(lm, prompts[context][:context + index], 0, use_cache=False)
                decode, recompute = cached.step(), uncached.step()  # side by side: a busy moment slows both alike
                assert decode.num_tokens_run == 1 and recompute.num_tokens_run == context + index
                cached_engines[context] = (cached, index + 1, left - 1)
                cache_bytes[context] = cache_bytes[context] or decode.memory.token_bytes  # the prompt and newest
                cached_s[context].append(decode.forward_s)
                uncached_s[context].append(recompute.forward_s)
            timings[:] = [DecodeTiming(
                context=c, cached_s=statistics.median(cached_s[c]), uncached_s=statistics.median(uncached_s[c]),
                cache_bytes=cache_bytes[c], formula_bytes=kv_cache_bytes(shape, c, 1, dtype_bytes),
                cached_spread_s=(min(cached_s[c]), max(cached_s[c])),
                uncached_spread_s=(min(uncached_s[c]), max(uncached_s[c])), repeats=done + 1) for c in contexts]
    return timings


def a_core_left_free():
    """Time on one thread fewer than the engine's ceiling (one on a 2-core laptop): a decode step of a
    small model lasts milliseconds, and when the browser drawing the page takes a core from one of the
    threads, every step waits for it. On a 2-core machine, Measure in Chromium gave with-cache medians
    of 4.1-11.0 ms across the lengths on two threads, 4.7-6.9 ms on one. The thread count is the
    process's share (kvviz.engine.cpu.threads): overlapping measurements each hold their cap until done."""
    return cpu_share.capped(cpu_share.ceiling - 1)


def _one_request_engine(lm: LoadedModel, prompt: list[int], num_decodes: int, use_cache: bool) -> Engine:
    """An engine holding just this request, with blocks for it and a budget for its whole prompt."""
    most_tokens = len(prompt) + num_decodes + 2
    engine = Engine(lm, max_num_seqs=1, num_blocks=blocks_needed(most_tokens, DEFAULTS.block_size),
                    max_num_batched_tokens=most_tokens, enable_prefix_caching=False,
                    record_blocks=False, use_cache=use_cache)
    # more tokens than the steps we run, so the request is still in the cache when we look
    engine.add_request(prompt, SamplingParams(max_tokens=num_decodes + 2, temperature=0.0, ignore_eos=True))
    return engine


def _warm_up(lm: LoadedModel, vocab_size: int, rng: random.Random, longest: int) -> None:
    """The first forward passes pay for allocations, thread start-up and kernel choices, at the
    shortest and at the longest context alike; keep them out of the timings."""
    for length in sorted({8, longest - 1}):
        for use_cache in (True, False):
            engine = _one_request_engine(lm, [rng.randrange(vocab_size) for _ in range(length)], 2, use_cache)
            for _ in range(3):
                engine.step()


def sample_nonsense(lm: LoadedModel, num_tokens: int = 12, prompt: str = "ROMEO:") -> str:
    """What a random-weight model writes after a prompt: proof that the weights know nothing."""
    engine = Engine(lm, max_num_seqs=1, enable_prefix_caching=False, record_blocks=False)
    params = SamplingParams(max_tokens=num_tokens, temperature=1.0, seed=0, ignore_eos=True)
    return engine.generate([prompt], params)[0].text or ""
