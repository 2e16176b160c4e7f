"""The "Cache strategies" lesson: every strategy on the same model and prompt, against the full cache.

The lesson's files share its stem: the page lessons/cache_strategies.py, its state
kvviz/lessons/cache_strategies/state.py, its figures kvviz/lessons/cache_strategies/figures.py, and this
module, which holds what the page runs. The caches themselves (dynamic, static, sliding window,
sinks, quantized, heavy hitters) and the single-strategy runner are the policy library in
kvviz/strategies/. The page's "Eviction lab" tab runs kvviz/strategies/eviction.py, with its own
state and figures (kvviz/lessons/cache_strategies/eviction_view.py, kvviz/lessons/cache_strategies/eviction_figures.py).

Two runs per strategy:
- teacher-forced on the full cache's greedy tokens, so every strategy sees the very same
  sequence: per step, the largest error of the keys and values it keeps, and the KL divergence
  KL(full || strategy) of the next-token distribution;
- free-running, its own greedy picks: its text, and the first step where it leaves the full
  cache's output.
Memory and time per step come from the free run and are measured; the formula and kvviz.memory_bill's
prediction beside them are computed from the model's config.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch

from kvviz.engine.cache_dtype import measured_bytes_per_token
from kvviz.engine.kv_cache import SCALE_DTYPE
from kvviz.engine.model_parts import model_parts
from kvviz.lessons.budget import ModelCost, Work, check_click, stopwatch
from kvviz.shapes import ModelShape
from kvviz.strategies.bill import ByteBill
from kvviz.strategies.compare import first_difference, kl_divergence
from kvviz.strategies.options import ModelFacts, StrategySpec, make_cache
from kvviz.strategies.run import run_strategy, step_reporters, tokenize

STATIC_MOST_TOKENS = 4096  # a full-size model's whole context (128k tokens) would not fit in memory

DEFAULT_STRATEGIES = (
    StrategySpec("dynamic"),
    StrategySpec("static"),
    StrategySpec("sliding_window", {"window": 16}),
    StrategySpec("quantized", {"bits": 8}),
    StrategySpec("quantized", {"bits": 4}),
    StrategySpec("quantized", {"bits": 4, "residual": 16}),
    StrategySpec("paged"),
    StrategySpec("no_cache"),
)


def static_reservation(max_context: int) -> int:
    """Tokens the lesson's static cache reserves: the model's whole context, up to STATIC_MOST_TOKENS."""
    return min(max_context, STATIC_MOST_TOKENS)


def lesson_specs(window: int, group_size: int, residual: int, max_context: int = 512) -> list[StrategySpec]:
    """The strategies the lesson compares, with the page's options (static: static_reservation)."""
    quantized = {"group_size": group_size, "residual": residual}
    static = {} if max_context <= STATIC_MOST_TOKENS else {"capacity": static_reservation(max_context)}
    return [StrategySpec("dynamic"), StrategySpec("static", static), StrategySpec("sliding_window", {"window": window}),
            StrategySpec("quantized", {"bits": 8, **quantized}), StrategySpec("quantized", {"bits": 4, **quantized}),
            StrategySpec("paged"), StrategySpec("no_cache")]


@dataclass(slots=True)
class StrategyComparison:
    label: str
    strategy: str
    options: dict
    token_ids: list[int]  # its own greedy output
    text: str | None
    first_divergence: int | None  # first step whose greedy pick leaves the full cache's; None: never
    kl: list[float]  # per step, teacher-forced: KL(full || strategy) of the next-token distribution, nats
    max_key_error: list[float | None]  # per step, teacher-forced: max |K - K_full| over the kept tokens
    max_value_error: list[float | None]
    first_argmax_change: int | None  # teacher-forced: first step whose top token differs; None: never
    held_bytes: list[int]  # per step, measured: sum of the cache tensors' nbytes
    predicted_bytes: list[int]  # per step, kvviz.memory_bill's formula with the strategy's options
    forward_s: list[float]  # per step, seconds of the forward pass (one run: noisy)
    tokens_run: list[int]  # per step, tokens through the model: counts that do not vary
    decode_ms: list[float]  # per timed run, the mean decode step in ms; show their median and spread
    final_bill: ByteBill  # the last step: measured, per layer, beside the formula, differences named
    formula: str

    @property
    def decode_ms_median(self) -> float:
        return float(np.median(self.decode_ms))

    def to_dict(self) -> dict:
        return asdict(self)


def mean_decode_ms(run) -> float:
    """Mean forward time of a run's decode steps (the prefill left out), in milliseconds."""
    decode = [s.forward_s for s in run.steps if s.kind == "decode"] or [s.forward_s for s in run.steps]
    return 1000 * float(np.mean(decode))


ENGINE_STRATEGIES = frozenset({"paged", "no_cache"})  # kvviz.strategies.run runs these in the engine


def run_work(cost: ModelCost, strategy: str, prompt_tokens: int, max_tokens: int) -> Work:
    """One run_strategy: a prefill and max_tokens - 1 decode steps. paged and no_cache run in the engine,
    traced and read back at every step (no_cache runs every token so far again); the rest are the model's
    own forward passes, counted by their FLOPs as a full cache keeping every token."""
    if strategy == "no_cache":
        flops = sum(cost.forward(prompt_tokens + step, 0) for step in range(max_tokens))
    else:
        flops = cost.forward(prompt_tokens, 0) + sum(cost.forward(1, prompt_tokens + step - 1)
                                                     for step in range(1, max_tokens))
    if strategy in ENGINE_STRATEGIES:
        positions = sum(prompt_tokens + step for step in range(max_tokens))  # the context each step reads back
        return Work(flops, steps=max_tokens, read_backs=max_tokens, read_back_tokens=positions,
                    step_scale=cost.step_scale, click="strategies")
    return Work(flops, passes=max_tokens, click="strategies")


def comparison_work(lm, prompt_tokens: int, max_tokens: int, strategies, timing_runs: int = 1) -> Work:
    """What compare_strategies runs: the full cache's reference run, then per strategy a teacher-forced
    run, a free run and timing_runs - 1 more free runs."""
    cost = ModelCost.of(model_parts(lm).model)
    work = run_work(cost, "dynamic", prompt_tokens, max_tokens)
    for spec in strategies:
        work += run_work(cost, StrategySpec.of(spec).name, prompt_tokens, max_tokens) * (1 + max(timing_runs, 1))
    return work


def eviction_work(lm, prompt_tokens: int, max_tokens: int, policies: int = 3) -> Work:
    """What kvviz.strategies.eviction.eviction_lab runs: the full cache's run, then per policy a teacher-forced
    run and a free run, each max_tokens forward passes of the model's eager twin. Their FLOPs are counted
    as a full cache's, which keeps every token (a policy reads fewer); each pass also pays a read-back,
    for what the lab copies out and builds around it: the log-probabilities, the retention row over every
    layer and KV head, the causal mask and H2O's attention weights (issue 35: 380 + 128 tokens ran 25.5 CPU
    s on a quiet machine; estimated 23 s)."""
    cost = ModelCost.of(model_parts(lm).model)
    flops = cost.forward(prompt_tokens, 0) + sum(cost.forward(1, prompt_tokens + step - 1)
                                                 for step in range(1, max_tokens))
    positions = sum(prompt_tokens + step for step in range(max_tokens))  # the retention rows grow with the context
    run = Work(flops, passes=max_tokens, read_backs=max_tokens, read_back_tokens=positions, step_scale=cost.step_scale,
               click="eviction")
    return run * (1 + 2 * policies)


def eviction_seconds(lm, prompt: str | list[int], max_tokens: int) -> float:
    """The eviction lab's estimated seconds on this server; past one click's budget it raises
    kvviz.lessons.budget.WorkTooLarge (a ValueError) with one sentence."""
    model, tokenizer, _ = model_parts(lm)
    prompt_tokens = len(tokenize(prompt, tokenizer))
    return check_click(eviction_work(lm, prompt_tokens, max_tokens), next(model.parameters()).device,
                       f"The eviction lab for {max_tokens} tokens after this {prompt_tokens}-token prompt",
                       "ask for fewer tokens or use a shorter prompt")


def comparison_seconds(lm, prompt: str | list[int], max_tokens: int, strategies, timing_runs: int = 1) -> float:
    """compare_strategies' estimated seconds on this server; past one click's budget it raises
    kvviz.lessons.budget.WorkTooLarge (a ValueError) with one sentence."""
    model, tokenizer, _ = model_parts(lm)
    prompt_tokens = len(tokenize(prompt, tokenizer))
    return check_click(comparison_work(lm, prompt_tokens, max_tokens, strategies, timing_runs),
                       next(model.parameters()).device,
                       f"Running every strategy for {max_tokens} tokens after this {prompt_tokens}-token prompt",
                       "ask for fewer tokens or use a shorter prompt")


def comparison_runs(specs, timing_runs: int) -> list[str]:
    """What each run of compare_strategies is, in order, as a progress bar says it."""
    runs = ["the full cache's reference run"]
    for spec in specs:
        runs += [f"{spec.label}: teacher-forced run", f"{spec.label}: free run (timed run 1 of {timing_runs})"]
    for timed in range(2, timing_runs + 1):
        runs += [f"{spec.label}: timed run {timed} of {timing_runs}" for spec in specs]
    return runs


def compare_strategies(lm, prompt: str | list[int], max_tokens: int = 32, strategies=DEFAULT_STRATEGIES,
                       timing_runs: int = 1, progress=None, results: list | None = None) -> list[StrategyComparison]:
    """Run each strategy (a name, a (name, options) pair or a StrategySpec) against the full cache.

    timing_runs: free runs timed per strategy (the first is the free run itself, which follows a
    teacher-forced run of the same strategy, so it is warm); the extra ones go round the
    strategies in turn, so that a busy moment of the machine slows them alike.
    progress: called with (steps done, steps in all, what is running) after every step of every run.
    results: a list to fill in place, a strategy as soon as its free run ends and each extra timing
    run as it ends, so that a caller stopped midway keeps what was measured (returned too).

    The whole comparison's work is estimated first: past one click's budget it raises
    kvviz.lessons.budget.WorkTooLarge (a ValueError) and runs nothing."""
    specs = [StrategySpec.of(s) for s in strategies]
    comparison_seconds(lm, prompt, max_tokens, specs, timing_runs)
    model, tokenizer, _ = model_parts(lm)
    timing = stopwatch(comparison_work(lm, len(tokenize(prompt, tokenizer)), max_tokens, specs, timing_runs),
                       next(model.parameters()).device)  # reported when the whole comparison ran: budget.Pace
    results = [] if results is None else results
    reporters = step_reporters(comparison_runs(specs, timing_runs), max_tokens, progress,
                               lambda: f"{len(results)} of {len(specs)} strategies measured")
    # the reference: keeps every token
    full = run_strategy(lm, prompt, "dynamic", max_tokens, on_step=next(reporters))
    for spec in specs:
        forced = run_strategy(lm, full.prompt_token_ids, spec, max_tokens, forced_tokens=full.token_ids,
                              reference=full, on_step=next(reporters))
        free = run_strategy(lm, full.prompt_token_ids, spec, max_tokens, on_step=next(reporters))
        kl = [kl_divergence(f.logprobs, s.logprobs) for f, s in zip(full.steps, forced.steps)]
        results.append(StrategyComparison(
            label=spec.label, strategy=spec.name, options=free.options, token_ids=free.token_ids, text=free.text,
            first_divergence=first_difference(free.token_ids, full.token_ids), kl=kl,
            max_key_error=[s.max_key_error for s in forced.steps],
            max_value_error=[s.max_value_error for s in forced.steps],
            first_argmax_change=first_difference(forced.token_ids, full.token_ids),
            held_bytes=[s.bill.measured_bytes for s in free.steps],
            predicted_bytes=[s.bill.predicted_bytes for s in free.steps],
            forward_s=[s.forward_s for s in free.steps], tokens_run=[s.num_tokens_run for s in free.steps],
            decode_ms=[mean_decode_ms(free)], final_bill=free.steps[-1].bill, formula=free.formula))
    for _ in range(timing_runs - 1):
        for spec, result in zip(specs, results):
            result.decode_ms.append(mean_decode_ms(run_strategy(lm, full.prompt_token_ids, spec, max_tokens,
                                                                on_step=next(reporters))))
    timing()
    return results


@dataclass(slots=True)
class EightBitRow:
    """One way of caching keys and values in 8 bits, and what one token costs in it."""

    cache: str  # which cache
    bytes_per_token: int  # measured: the tensors' bytes (values, scales, zero points) of one token, all layers
    counts: str  # what those bytes are made of


# The engine's 8-bit caches' cost in quality on the bundled model, measured once, not on the page (one prompt
# takes about a minute on a 2-core machine): scripts/bench_kv_dtype.py, 2026-12-01 (commit fd51606, in
# docs/benchmarks.md, "The 8-bit paged cache"), 8 Shakespeare prompts x 48 greedy tokens, KL(auto || dtype)
# teacher-forced. dtype -> (mean KL, largest KL in nats, prompts of the 8 whose 48 greedy tokens stay identical)
BUNDLED_ENGINE_QUALITY = {"int8": (2.3e-05, 1.5e-03, 7), "fp8": (4.7e-04, 2.4e-02, 4)}


def engine_quality_note() -> str:
    """The engine's 8-bit caches' cost in quality on the bundled model, said with how and when it was measured."""
    said = [f"{dtype} mean KL {mean:.1e} nats (largest {largest:.1e}), greedy identical on {same} of 8 prompts"
            for dtype, (mean, largest, same) in BUNDLED_ENGINE_QUALITY.items()]
    return ("The engine's 8-bit caches on the bundled model, measured once by scripts/bench_kv_dtype.py on "
            "2026-12-01 (8 prompts × 48 greedy tokens, KL against the full-precision cache along its own tokens; "
            "too slow to run on this page): " + "; ".join(said) + ". The strategy's own error is in "
            "**Error and KL**, measured on this prompt.")


def eight_bit_rows(lm, group_size: int) -> list[EightBitRow]:
    """The page's int8 strategy beside kvviz's engine with kv_cache_dtype "int8" and "fp8", on this model:
    bytes per token measured from a one-token cache of each (the strategy's with no recent tokens kept)."""
    model, _, max_context = model_parts(lm)
    facts, shape = ModelFacts.of(model, max_context), ModelShape.of_model(model)
    cache = make_cache("quantized", {"bits": 8, "group_size": group_size, "residual": 0}, facts)
    token = torch.zeros(1, facts.num_kv_heads, 1, facts.head_dim, dtype=facts.dtype, device=facts.device)
    for layer in cache.layers:
        layer.update(token, token)  # (1, kv_heads, 1, head_dim) keys and values: one token, quantized at once
    dtype = str(facts.dtype).removeprefix("torch.")
    scale = str(SCALE_DTYPE).removeprefix("torch.")
    per_row = f"plus one {scale} scale per token, KV head and K or V row (absmax scaling, no zero point)"
    return [
        EightBitRow(f"int8, group {group_size}: this page's quantized strategy", cache.nbytes,
                    f"1 byte a value, plus a {dtype} scale and a {dtype} zero point per group of {group_size} "
                    "values"),
        EightBitRow('kvviz engine, kv_cache_dtype="int8"', measured_bytes_per_token(shape, "int8", facts.dtype),
                    f"1 byte a value, {per_row}"),
        EightBitRow('kvviz engine, kv_cache_dtype="fp8"', measured_bytes_per_token(shape, "fp8", facts.dtype),
                    f"1 byte a value (e4m3), {per_row}"),
        EightBitRow(f'kvviz engine, kv_cache_dtype="auto" ({dtype})',
                    measured_bytes_per_token(shape, "auto", facts.dtype), f"the model's {dtype} values, no scales"),
    ]


PRESENTER_COLUMNS = ("strategy", "bytes held", "max KL (nats)", "first divergence", "decode step (median)")


def _small(value: float | None) -> str:
    """An error or a KL, rounded: 0 stays 0, nothing is a dash."""
    return "—" if value is None else "0" if value == 0 else f"{value:.1e}"


def beside_full_cache(result: StrategyComparison, full: StrategyComparison) -> str:
    """How a strategy's decode step compares with the full cache's in this run: "faster" or "slower" only when
    their spreads (fastest to slowest run) do not overlap; else "within noise", an ordering the run cannot make
    (under load the no-cache run once read 161.8 ms beside the full cache's 142.4, the lesson's opposite)."""
    if result is full:
        return "(the full cache)"
    if max(result.decode_ms) < min(full.decode_ms):
        return "faster"
    if min(result.decode_ms) > max(full.decode_ms):
        return "slower"
    return "within noise"


def comparison_table(results: list[StrategyComparison]) -> list[dict]:
    """One row per strategy for a table: final bytes (exact), worst errors and KL (rounded), divergence ("never"
    where there is none), tokens run, step time (rounded, in ms). PRESENTER_COLUMNS are the few that fit a
    projector's 1280 px in large type."""
    return [{
        "strategy": r.label,
        "bytes held": r.held_bytes[-1],  # exact, as the memory chart draws them
        "bytes predicted": r.predicted_bytes[-1],
        "max KL (nats)": _small(max(r.kl)),
        "max |K error|": _small(max((e for e in r.max_key_error if e is not None), default=None)),
        "max |V error|": _small(max((e for e in r.max_value_error if e is not None), default=None)),
        "first divergence": "never" if r.first_divergence is None else f"step {r.first_divergence}",
        "tokens run": sum(r.tokens_run),
        "decode step (median)": f"{r.decode_ms_median:.1f} ms",
        "spread (ms)": f"{min(r.decode_ms):.1f}-{max(r.decode_ms):.1f} over {len(r.decode_ms)} runs",
        "step time vs the full cache": beside_full_cache(r, results[0]),
        "text": r.text,
    } for r in results]
