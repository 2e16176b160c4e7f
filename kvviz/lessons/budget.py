"""What one click may make the server compute, estimated before the work starts.

    work = Work(flops=forward_flops(3e6, 6144, new_tokens=512, cached_tokens=0), steps=1)
    check_click(work, torch.device("cpu"), "This batch", "ask for fewer prompts")   # WorkTooLarge over budget

A click that runs a model (a batch, a comparison with transformers, a Model lab measurement) is
counted in two numbers that do not depend on the machine: the floating-point operations of its
forward passes, and the forward passes it takes (engine steps), each of which also pays a fixed
cost outside the model (scheduling, building the batch, sampling). Each device kind turns them
into seconds with rates measured on the 2-core CPU this was written on (a forward pass of a
model past a few million parameters ran 40-50 GFLOP/s; a step of the bundled model 25-55 ms):
a faster machine finishes before the estimate. A click estimated past its budget (CLICK_SECONDS,
or KVVIZ_CLICK_SECONDS on the server) gets one sentence naming what to reduce, and nothing runs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

CLICK_SECONDS = 30.0  # the most one click may run for, estimated, unless KVVIZ_CLICK_SECONDS says otherwise


@dataclass(frozen=True, slots=True)
class Rate:
    flops_per_s: float  # sustained in a forward pass
    step_s: float  # one forward pass's fixed cost outside the model


RATES = {"cpu": Rate(4e10, 0.05), "cuda": Rate(2e13, 0.02)}  # another kind is counted as a CPU


class WorkTooLarge(ValueError):
    """A click whose estimated work is past the server's budget; the message says what to reduce."""


@dataclass(frozen=True, slots=True)
class Work:
    """What a click runs: floating-point operations and forward passes."""

    flops: float = 0.0
    steps: int = 0

    def __add__(self, other: Work) -> Work:
        return Work(self.flops + other.flops, self.steps + other.steps)

    def __mul__(self, times: int) -> Work:
        return Work(self.flops * times, self.steps * times)

    def seconds(self, device: torch.device) -> float:
        rate = RATES.get(device.type, RATES["cpu"])
        return self.flops / rate.flops_per_s + self.steps * rate.step_s


def forward_flops(multiplied_params: int, per_pair: int, new_tokens: int, cached_tokens: int) -> float:
    """One forward pass of `new_tokens` after `cached_tokens` already in the cache: 2 FLOPs per
    multiplied weight per new token, and `per_pair` (4 x heads x head size x layers: q.k and the
    weights times V) per query-key pair, each new token attending to the cache and the new tokens
    before it."""
    pairs = new_tokens * cached_tokens + new_tokens * (new_tokens + 1) // 2
    return 2.0 * multiplied_params * new_tokens + float(per_pair) * pairs


def click_seconds() -> float:
    try:
        return max(1.0, float(os.environ.get("KVVIZ_CLICK_SECONDS", CLICK_SECONDS)))
    except ValueError:
        return CLICK_SECONDS


def check_click(work: Work, device: torch.device, what: str, reduce: str) -> float:
    """The estimated seconds of `work`, or WorkTooLarge when past the budget: "{what} would take ...; {reduce}."""
    seconds, budget = work.seconds(device), click_seconds()
    if seconds > budget:
        raise WorkTooLarge(f"{what} would run about {seconds:,.0f} s on this server ({work.flops / 1e12:,.1f} TFLOP "
                           f"in {work.steps:,} forward passes), more than the {budget:,.0f} s one click may take; "
                           f"{reduce}.")
    return seconds
