"""The eviction lab: one prompt under the full cache and under policies that keep a fixed budget.

    lab = eviction_lab(lm, "ROMEO:", max_tokens=32, budget=16, sinks=4)
    lab.runs[1].kl, lab.runs[1].first_difference, lab.runs[1].text, lab.runs[1].retention

Policies, each holding at most `budget` tokens per layer and KV head:
- sliding window: the newest `budget` tokens (sliding.py);
- sinks + window: the first `sinks` tokens and the newest `budget - sinks` (sinks.py, StreamingLLM);
- heavy hitters: the newest `recent` tokens and the keys that received the most attention (H2O).

As in kvviz/lessons/cache_strategies/logic.py, each policy runs twice: teacher-forced on the full cache's
tokens (the same sequence for all, so the KL divergence and the retention maps compare position by
position), and free-running (its own greedy text and the first token where it leaves the full cache's).

All runs, the full cache included, go through one twin of the model that shares its weights but
uses transformers' "eager" attention, which returns the attention weights H2O scores with. The
shared model is left as it is (other sessions and the engine use it), and because every run goes
through the same attention code, a policy that never evicts gives the full cache's logits exactly.
The lab builds its own causal mask (kept keys are not a contiguous run of positions), so every
layer attends as a full-attention layer: a model's own sliding-window layers are not windowed here.
"""

from __future__ import annotations

import copy
import weakref
from dataclasses import dataclass, field

import numpy as np
import torch

from kvviz.engine.model_parts import model_parts
from kvviz.strategies.base import StrategyCache
from kvviz.strategies.compare import first_difference, kl_divergence
from kvviz.strategies.dynamic import DynamicKV
from kvviz.strategies.heavy_hitters import HeavyHitterKV
from kvviz.strategies.options import ModelFacts
from kvviz.strategies.run import step_reporters, tokenize
from kvviz.strategies.sinks import SinkWindowKV
from kvviz.strategies.sliding import SlidingWindowKV

POLICIES = ("full", "sliding_window", "sinks", "heavy_hitters")
MOST_TOKENS = 1024  # prompt + generated: each step's eager attention and retention row grow with it


@dataclass(slots=True)
class PolicyTrace:
    """What one run did, step by step (step 0 is the prefill)."""

    token_ids: list[int]  # the greedy pick of each step
    logprobs: list[np.ndarray] = field(repr=False)  # (vocab,) per step
    held_tokens: list[list[int]]  # per step, per layer: tokens held after the step (most over KV heads)
    # (steps, positions): the share of (layer, KV head) pairs keeping each position; nan: not yet seen
    retention: np.ndarray = field(repr=False)
    held_bytes: list[int]  # per step: bytes the cache's tensors hold after the step


@dataclass(slots=True)
class EvictionRun:
    policy: str
    label: str
    token_ids: list[int]  # free-running greedy output
    text: str | None
    first_difference: int | None  # first step whose pick leaves the full cache's; None: never
    kl: list[float]  # per step, teacher-forced: KL(full || policy) of the next-token distribution, nats
    first_argmax_change: int | None  # teacher-forced: first step whose top token differs
    held_tokens: list[list[int]]  # teacher-forced, per step and layer
    retention: np.ndarray = field(repr=False)  # teacher-forced, (steps, positions)
    held_bytes: list[int] = field(default_factory=list)  # teacher-forced, per step


@dataclass(slots=True)
class EvictionLab:
    prompt_token_ids: list[int]
    budget: int
    sinks: int
    recent: int
    runs: list[EvictionRun]  # "full" first

    def run(self, policy: str) -> EvictionRun:
        return next(r for r in self.runs if r.policy == policy)

    @property
    def first_evicted_step(self) -> int | None:
        """The first step that reads a cache missing some tokens: after step s the context holds
        prompt + s tokens, and a policy evicts once that is more than the budget. None: never."""
        step = max(0, self.budget - len(self.prompt_token_ids) + 1) + 1
        return step if step < len(self.runs[0].kl) else None


_TWINS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def scoring_twin(model: torch.nn.Module) -> torch.nn.Module:
    """The model with "eager" attention (it returns its weights), sharing every parameter and buffer."""
    twin = _TWINS.get(model)
    if twin is None:
        shared = {id(t): t for t in [*model.parameters(), *model.buffers()]}
        twin = copy.deepcopy(model, shared)  # new modules and config, the same tensors
        twin.set_attn_implementation("eager")
        _TWINS[model] = twin
    return twin


def policy_layer(policy: str, budget: int, sinks: int, recent: int):
    """A fresh layer for one policy."""
    if policy == "full":
        return DynamicKV()
    if policy == "sliding_window":
        return SlidingWindowKV(budget)
    if policy == "sinks":
        return SinkWindowKV(budget, sinks)
    if policy == "heavy_hitters":
        return HeavyHitterKV(budget, recent)
    raise ValueError(f"Unknown eviction policy {policy!r}; use one of {', '.join(POLICIES)}.")


def policy_label(policy: str, budget: int, sinks: int, recent: int) -> str:
    return {"full": "full cache", "sliding_window": f"sliding window ({budget} tokens)",
            "sinks": f"{sinks} sinks + {budget - sinks} recent",
            "heavy_hitters": f"H2O: {budget - recent} heavy + {recent} recent"}[policy]


def kept_positions(layer) -> torch.Tensor:
    """(KV heads, held) sequence positions a layer keeps, first sequence."""
    if hasattr(layer, "positions"):
        return layer.positions[0]
    held = layer.num_held_tokens()
    positions = torch.arange(layer.num_seen - held, layer.num_seen, device=layer.keys.device)  # (held,)
    return positions.expand(layer.keys.shape[1], held)


def causal_mask(held: int, num_new: int, dtype: torch.dtype, device) -> torch.Tensor:
    """(1, 1, num_new, held + num_new) additive mask: new token i sees the held keys and new tokens 0..i.

    Built here because the kept keys are not a contiguous run of positions, which transformers'
    own mask assumes (it would also cost more than the small model's forward)."""
    future = torch.ones(num_new, held + num_new, dtype=torch.bool, device=device).triu(held + 1)  # (new, held + new)
    return torch.zeros(future.shape, dtype=dtype, device=device).masked_fill(future, torch.finfo(dtype).min)[None, None]


@torch.inference_mode()
def run_policy(lm, prompt_ids: list[int], policy: str, max_tokens: int, budget: int, sinks: int = 0,
               recent: int = 0, forced_tokens: list[int] | None = None, on_step=None) -> PolicyTrace:
    """Greedy decoding under one policy; `forced_tokens` (the full cache's picks) feeds those instead.
    on_step: called with the number of steps done after each step (a page moves its progress bar)."""
    model = model_parts(lm).model
    facts = ModelFacts.of(model)
    twin = scoring_twin(model)
    cache = StrategyCache([policy_layer(policy, budget, sinks, recent) for _ in range(facts.num_layers)])
    wants_weights = policy == "heavy_hitters"
    total = len(prompt_ids) + max_tokens
    input_ids = torch.tensor([prompt_ids], device=facts.device)  # (1, prompt tokens), then (1, 1)
    picks, logprobs, held, rows, nbytes = [], [], [], [], []
    position = 0
    for step in range(max_tokens):
        num_new = input_ids.shape[1]
        position_ids = torch.arange(position, position + num_new, device=facts.device)[None]  # (1, num_new)
        mask = causal_mask(cache.layers[0].num_held_tokens(), num_new, model.dtype, facts.device)
        output = twin(input_ids=input_ids, position_ids=position_ids, attention_mask=mask, cache=cache,
                      use_cache=True, logits_to_keep=1, output_attentions=wants_weights)
        if wants_weights:
            for layer, weights in zip(cache.layers, output.attentions):  # weights: (1, H, num_new, held + num_new)
                layer.observe(weights)
        position += num_new
        logits = output.logits[0, -1].float()  # (vocab,)
        picks.append(int(logits.argmax()))
        logprobs.append(torch.log_softmax(logits, -1).cpu().numpy())
        held.append([layer.num_held_tokens() for layer in cache.layers])
        kept = torch.stack([kept_positions(layer) for layer in cache.layers])  # (layers, KVH, held)
        row = np.full(total, np.nan)
        row[:position] = torch.bincount(kept.flatten().cpu(), minlength=position).numpy() / kept[..., 0].numel()
        rows.append(row)
        nbytes.append(cache.nbytes)
        if on_step is not None:
            on_step(step + 1)
        if step < max_tokens - 1:
            token = picks[-1] if forced_tokens is None else int(forced_tokens[step])
            input_ids = torch.tensor([[token]], device=facts.device)
    return PolicyTrace(picks, logprobs, held, np.stack(rows), nbytes)


def check_settings(num_prompt: int, max_tokens: int, budget: int, sinks: int, max_context: int) -> None:
    """One sentence for each setting the lab cannot run with (ValueError)."""
    for name, value, least in (("budget", budget, 2), ("tokens to generate", max_tokens, 1), ("sinks", sinks, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ValueError(f"The {name} must be a whole number of at least {least}, not {value!r}.")
    if sinks >= budget:
        raise ValueError(f"The {sinks} sink tokens fill the whole {budget}-token budget; keep fewer sinks than "
                         "the budget so that the recent window has room.")
    total = num_prompt + max_tokens
    if total > min(MOST_TOKENS, max_context - 1):
        raise ValueError(f"The prompt and the tokens to generate make {total} tokens; the lab runs at most "
                         f"{min(MOST_TOKENS, max_context - 1)} on this model: shorten the prompt or generate fewer.")


def lab_runs(policies, **settings) -> list[str]:
    """What each run of eviction_lab is, in order, as a progress bar says it."""
    return ["the full cache's run"] + [f"{policy_label(policy, **settings)}: {run}" for policy in policies
                                       for run in ("teacher-forced run", "free run")]


def eviction_lab(lm, prompt: str | list[int], max_tokens: int = 32, budget: int = 16, sinks: int = 4,
                 recent: int | None = None, policies=POLICIES[1:], progress=None,
                 runs: list | None = None) -> EvictionLab:
    """The full cache and each policy on one prompt. recent: H2O's recent window (default budget // 2).

    progress: called with (steps done, steps in all, what is running) after every step of every run.
    runs: a list to fill in place, the full cache's run and then each policy's as soon as both its runs
    end, so that a caller stopped midway keeps what was measured (the lab's runs, returned too)."""
    model, tokenizer, max_context = model_parts(lm)
    prompt_ids = tokenize(prompt, tokenizer)
    recent = budget // 2 if recent is None else recent
    check_settings(len(prompt_ids), max_tokens, budget, sinks, max_context)
    if not isinstance(recent, int) or not 0 <= recent < budget:
        raise ValueError(f"H2O's recent window must be 0 to {budget - 1} tokens, not {recent!r}.")
    settings = dict(budget=budget, sinks=sinks, recent=recent)
    runs = [] if runs is None else runs
    reporters = step_reporters(lab_runs(policies, **settings), max_tokens, progress,
                               lambda: f"{max(len(runs) - 1, 0)} of {len(policies)} policies measured")
    full = run_policy(lm, prompt_ids, "full", max_tokens, on_step=next(reporters), **settings)
    runs.append(EvictionRun("full", "full cache", full.token_ids, _decode(tokenizer, full.token_ids), None,
                            [0.0] * max_tokens, None, full.held_tokens, full.retention, full.held_bytes))
    for policy in policies:
        forced = run_policy(lm, prompt_ids, policy, max_tokens, forced_tokens=full.token_ids,
                            on_step=next(reporters), **settings)
        free = run_policy(lm, prompt_ids, policy, max_tokens, on_step=next(reporters), **settings)
        runs.append(EvictionRun(
            policy, policy_label(policy, **settings), free.token_ids, _decode(tokenizer, free.token_ids),
            first_difference(free.token_ids, full.token_ids),
            [kl_divergence(f, p) for f, p in zip(full.logprobs, forced.logprobs)],
            first_difference(forced.token_ids, full.token_ids), forced.held_tokens, forced.retention,
            forced.held_bytes))
    return EvictionLab(prompt_ids, budget, sinks, recent, runs)


def eviction_table(lab: EvictionLab, decode=str) -> list[dict]:
    """One row per run: its divergence from the full cache and what it holds at the end.
    decode: token id -> text (the tokenizer's), for naming the first differing tokens."""
    full = lab.runs[0]
    seen = len(lab.prompt_token_ids) + len(full.kl) - 1  # the last pick is not run through the model
    rows = []
    for run in lab.runs:
        step = run.first_difference
        differs = "never" if step is None else (f"step {step}: “{_visible(decode(full.token_ids[step]))}” → "
                                                f"“{_visible(decode(run.token_ids[step]))}”")
        rows.append({"policy": run.label, "max KL (nats)": max(run.kl), "mean KL (nats)": float(np.mean(run.kl)),
                     "first different token": differs,
                     f"tokens kept (of {seen})": max(run.held_tokens[-1]),
                     "bytes kept": run.held_bytes[-1]})
    return rows


def _visible(text: str) -> str:
    return text.replace("\n", "⏎")


def _decode(tokenizer, token_ids: list[int]) -> str | None:
    return None if tokenizer is None else tokenizer.decode(token_ids)
