"""What one click may make the server compute, estimated before the work starts.

    work = Work(flops=forward_flops(3e6, 6144, new_tokens=512, cached_tokens=0), steps=1)
    check_click(work, torch.device("cpu"), "This batch", "ask for fewer prompts")   # WorkTooLarge over budget

A click that runs a model (a batch, a comparison with transformers, a Model lab measurement, a link to
a late step of Prefill and decode, Cache strategies' comparison) is counted in numbers that do not
depend on the machine: the floating-point operations of its forward passes, and the forward passes it
takes: engine steps, each of which also pays a fixed cost outside the model (scheduling, building
the batch, sampling) and, when traced, a read-back of the request's K, V, attention and logits; and
the model's own passes outside the engine, which pay their FLOPs only. Each device kind turns them
into seconds with rates measured on the 2-core CPU this was written on (a forward pass of a
model past a few million parameters ran 40-50 GFLOP/s; a step of the bundled model 25-55 ms):
a faster machine finishes before the estimate. A click estimated past its budget (CLICK_SECONDS,
or KVVIZ_CLICK_SECONDS on the server) gets one sentence naming what to reduce, and nothing runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import torch

from kvviz.shapes import ModelShape

CLICK_SECONDS = 30.0  # the most one click may run for, estimated, unless KVVIZ_CLICK_SECONDS says otherwise


@dataclass(frozen=True, slots=True)
class Rate:
    flops_per_s: float  # sustained in a forward pass
    step_s: float  # one engine step's fixed cost outside the model
    read_back_s: float  # one traced step's read-back: the request's K, V, attention and logits copied out, compared


# read_back_s on the CPU: a link to Prefill and decode's step 255 after 250 tokens (256 steps of two traced
# engines) ran 46-72 s where its FLOPs and engine steps alone came to 49 s (scripts/click_budget.py, 2026-12-01)
RATES = {"cpu": Rate(4e10, 0.05, 0.025), "cuda": Rate(2e13, 0.02, 0.01)}  # another kind is counted as a CPU


class WorkTooLarge(ValueError):
    """A click whose estimated work is past the server's budget; the message says what to reduce, `seconds`
    the estimate."""

    def __init__(self, message: str, seconds: float = 0.0):
        super().__init__(message)
        self.seconds = seconds


@dataclass(frozen=True, slots=True)
class Work:
    """What a click runs: floating-point operations and forward passes (engine steps, and the model's
    own forward passes outside the engine, which pay their FLOPs only), some of them read back."""

    flops: float = 0.0
    steps: int = 0  # engine steps
    passes: int = 0  # the model's own forward passes, outside an engine
    read_backs: int = 0  # engine steps whose traced request (K, V, attention, logits) is copied out
    step_scale: float = 1.0  # the model's step and read-back cost next to the bundled model's (ModelCost.step_scale)

    def __add__(self, other: Work) -> Work:
        return Work(self.flops + other.flops, self.steps + other.steps, self.passes + other.passes,
                    self.read_backs + other.read_backs, max(self.step_scale, other.step_scale))

    def __mul__(self, times: int) -> Work:
        return Work(self.flops * times, self.steps * times, self.passes * times, self.read_backs * times,
                    self.step_scale)

    @property
    def forward_passes(self) -> int:
        return self.steps + self.passes

    def seconds(self, device: torch.device) -> float:
        rate = RATES.get(device.type, RATES["cpu"])
        fixed = self.steps * rate.step_s + self.read_backs * rate.read_back_s
        return self.flops / rate.flops_per_s + fixed * self.step_scale


def forward_flops(multiplied_params: int, per_pair: int, new_tokens: int, cached_tokens: int) -> float:
    """One forward pass of `new_tokens` after `cached_tokens` already in the cache: 2 FLOPs per
    multiplied weight per new token, and `per_pair` (4 x heads x head size x layers: q.k and the
    weights times V) per query-key pair, each new token attending to the cache and the new tokens
    before it."""
    pairs = new_tokens * cached_tokens + new_tokens * (new_tokens + 1) // 2
    return 2.0 * multiplied_params * new_tokens + float(per_pair) * pairs


# An engine step's cost outside the FLOPs grows with the layers it walks (their modules, the K, V and
# attention read back from each), counted in the bundled model's layers (6 of them, RATES' measure).
# A Gemma-3 layer has four norms and a window mask; an MLA layer compresses and decompresses its latent
# row. Measured at a link to step 255 after 250 tokens (issue 35): per engine step past the FLOPs,
# bundled 73 ms, tiny-gemma3 91 ms (6 layers), tiny-mla 102 ms (4 layers), so about 1.0, 1.25 and 2.1
# bundled layers each; rounded up here so the estimate stays above the run.
BUNDLED_LAYERS = 6
LAYER_WEIGHT = {"plain": 1.0, "gemma": 1.35, "mla": 2.3}


def layer_weight(shape: ModelShape) -> float:
    """One layer's step cost in bundled layers, from its kind."""
    if shape.kv_lora_rank:
        return LAYER_WEIGHT["mla"]
    return LAYER_WEIGHT["gemma" if "sliding_attention" in (shape.layer_types or ()) else "plain"]


@dataclass(frozen=True, slots=True)
class ModelCost:
    """A loaded model's forward-pass FLOPs, from its weights and shape (see forward_flops), and its
    engine steps' cost outside them next to the bundled model's."""

    multiplied: int  # weights multiplied per token: all but the embedding table and the logits head
    per_pair: int  # 4 x heads x head size x layers
    head: int  # the logits head's weights: 2 x head FLOPs per row of logits
    step_scale: float = 1.0  # layers x layer_weight / BUNDLED_LAYERS, at least 1

    @classmethod
    def of(cls, model) -> ModelCost:
        shape = ModelShape.of_model(model)
        embedding = model.get_input_embeddings().weight
        head = model.get_output_embeddings().weight
        shared = head.data_ptr() == embedding.data_ptr()
        total = sum(p.numel() for p in model.parameters())
        return cls(total - embedding.numel() - (0 if shared else head.numel()),
                   4 * (shape.num_heads or shape.num_kv_heads) * shape.head_dim * shape.num_layers, head.numel(),
                   max(1.0, shape.num_layers * layer_weight(shape) / BUNDLED_LAYERS))

    def forward(self, new_tokens: int, cached_tokens: int, logit_rows: int = 1) -> float:
        return forward_flops(self.multiplied, self.per_pair, new_tokens, cached_tokens) + 2.0 * self.head * logit_rows


def click_seconds() -> float:
    try:
        return max(1.0, float(os.environ.get("KVVIZ_CLICK_SECONDS", CLICK_SECONDS)))
    except ValueError:
        return CLICK_SECONDS


def over(seconds: float, budget: float) -> str:
    """`seconds`, past `budget`, written so that it reads past the budget shown beside it in whole seconds
    (30.4 beside a 30 s budget, where 30 would read as equal)."""
    for digits in range(7):
        if round(seconds, digits) > round(budget):
            return f"{seconds:,.{digits}f}"
    return repr(seconds)


def check_click(work: Work, device: torch.device, what: str, reduce: str) -> float:
    """The estimated seconds of `work`, or WorkTooLarge when past the budget: "{what} would take ...; {reduce}."""
    seconds, budget = work.seconds(device), click_seconds()
    if seconds > budget:
        raise WorkTooLarge(f"{what} would run about {over(seconds, budget)} s on this server "
                           f"({work.flops / 1e12:,.1f} TFLOP in {work.forward_passes:,} forward passes), more than the "
                           f"{budget:,.0f} s one click may take; {reduce}.", seconds)
    return seconds


def most_that_fits(seconds: Callable[[int], float], most: int, least: int = 0) -> int:
    """The largest n from `least` to `most` whose estimated `seconds(n)` fit one click's budget, the work
    growing with n (a lesson's steps, a comparison's tokens); least - 1 when none does."""
    budget = click_seconds()
    low, high = least - 1, most
    while low < high:
        middle = (low + high + 1) // 2
        if seconds(middle) <= budget:
            low = middle
        else:
            high = middle - 1
    return low


def tokens_that_fit(seconds: Callable[[int], float], asked: int, what: str) -> tuple[int, str | None]:
    """The tokens a comparison runs: those asked for when their estimate `seconds(tokens)` (which may raise
    WorkTooLarge) is within one click's budget; else the most that fit, with a sentence saying so (`what`
    names who ran them: "every strategy"); else those asked for, which the estimate then refuses."""
    def estimate(tokens: int) -> float:
        try:
            return seconds(tokens)
        except WorkTooLarge as refusal:
            return refusal.seconds

    low = most_that_fits(estimate, asked, 1)
    if low in (0, asked):
        return asked, None
    budget = click_seconds()
    return low, (f"{asked} tokens would take about {over(estimate(asked), budget)} s on this server, more than the "
                 f"{budget:,.0f} s one click may take, so {what} ran {low} tokens, the most that fit; "
                 "a shorter prompt leaves room for more.")

