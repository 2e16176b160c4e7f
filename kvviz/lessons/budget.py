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
model past a few million parameters ran 40-50 GFLOP/s; a step of the bundled model 25-55 ms), each
kind of click's pace next to those rates on that machine today (QUIET_PACE: the engine has grown
faster than RATES), and then the pace this server measured on its own recent work (Pace, below): a
quiet fast server's estimates shrink, a busy one's grow. A click estimated past its budget (CLICK_SECONDS,
or KVVIZ_CLICK_SECONDS on the server) gets one sentence naming what to reduce, and nothing runs.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

import torch

from kvviz.shapes import ModelShape

CLICK_SECONDS = 30.0  # the most one click may run for, estimated, unless KVVIZ_CLICK_SECONDS says otherwise


@dataclass(frozen=True, slots=True)
class Rate:
    flops_per_s: float  # sustained in a forward pass
    step_s: float  # one engine step's fixed cost outside the model
    read_back_s: float  # one traced step's read-back: the request's K, V, attention and logits copied out, compared
    read_back_token_s: float  # and per position of the context read back: its K, V and attention grow with it


# read_back_s on the CPU: a link to Prefill and decode's step 255 after 250 tokens (256 steps of two traced
# engines) ran 46-72 s where its FLOPs and engine steps alone came to 49 s (scripts/click_budget.py, 2026-12-01).
# read_back_token_s: SmolLM2's Next token ran 0.05 s at 250 tokens of context and 0.14 s at 1,500, about 500
# positions to a step's fixed cost (2026-12-06).
RATES = {"cpu": Rate(4e10, 0.05, 0.025, 1.5e-4), "cuda": Rate(2e13, 0.02, 0.01, 6e-5)}  # others count as a CPU


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
    read_back_tokens: int = 0  # the context positions those read-backs copy, summed over them
    step_scale: float = 1.0  # the model's step and read-back cost next to the bundled model's (ModelCost.step_scale)
    click: str = ""  # which kind of click runs it ("lesson", "strategies", ...): each learns its own Pace

    def __add__(self, other: Work) -> Work:
        return Work(self.flops + other.flops, self.steps + other.steps, self.passes + other.passes,
                    self.read_backs + other.read_backs, self.read_back_tokens + other.read_back_tokens,
                    max(self.step_scale, other.step_scale), self.click or other.click)

    def __mul__(self, times: int) -> Work:
        return Work(self.flops * times, self.steps * times, self.passes * times, self.read_backs * times,
                    self.read_back_tokens * times, self.step_scale, self.click)

    @property
    def forward_passes(self) -> int:
        return self.steps + self.passes

    def quiet_seconds(self, device: torch.device) -> tuple[float, float]:
        """Its seconds at RATES, a quiet machine's: (the FLOPs', the steps' and read-backs' fixed costs)."""
        rate = RATES.get(device.type, RATES["cpu"])
        fixed = (self.steps * rate.step_s + self.read_backs * rate.read_back_s
                 + self.read_back_tokens * rate.read_back_token_s)
        return self.flops / rate.flops_per_s, fixed * self.step_scale

    def seconds(self, device: torch.device) -> float:
        """Its seconds on this server: the quiet machine's, each part times the pace this server measured."""
        compute, fixed = self.quiet_seconds(device)
        compute_factor, fixed_factor = factors(device, self.click)
        return compute * compute_factor + fixed * fixed_factor


# Each kind of click's pace on the quiet 2-core AMD EPYC that RATES are counted on, over RATES' two parts
# (compute, fixed): what a fresh server estimates a kind by before it has timed one, times the pace its
# other kinds' clicks showed. Fitted to the teacher's session of scripts/estimates.py on the bundled model
# and SmolLM2 (`--calibrate`, 2026-12-06). RATES are older than the engine's fast path; these say how much.
QUIET_PACE: dict[tuple[str, str], tuple[float, float]] = {
    ("cpu", "batch"): (0.136, 0.162), ("cpu", "compare"): (0.324, 0.386), ("cpu", "eviction"): (3.67, 0.229),
    ("cpu", "lab"): (0.386, 0.25), ("cpu", "lesson"): (0.42, 0.0743), ("cpu", "strategies"): (1.54, 0.229)}


class Pace:
    """How fast this server ran its own recent clicks of one kind next to its quiet pace, learned as it runs them.

    Every click that runs estimated work (a lesson's step, a prefill, a batch, a comparison, a
    measurement) reports its Work and the seconds it took, to the Pace of its kind (Work.click). A click's
    time is a sum of two parts whose speeds differ by machine and by load: FLOPs (the matrix products) and a
    fixed cost per step (Python, scheduling, the read-back). Each report lands in the part that dominated
    it, the last KEEP of each kept for up to MEMORY_S; the two factors are the ones that make the
    estimates of those reports nearest their measured seconds (least squares on the logarithm, over a grid
    from 1/256 to 32 times the kind's `prior`, its quiet pace). A part with no report of its own moves
    from its prior as the other part did; a kind with no report at all moves as the server's other
    kinds did (`factors`, below)."""

    KEEP = 16
    MEMORY_S = 600.0
    GRID = 2.0 ** np.arange(-8.0, 5.0 + 1e-9, 1 / 8)  # factors from 1/256 to 32 of the prior, 9% apart
    LEAST_S = 0.0005  # reports shorter than this are too short to time

    def __init__(self, prior: tuple[float, float] = (1.0, 1.0)):
        self.prior = prior
        self._lock = threading.Lock()
        self._compute: deque = deque(maxlen=self.KEEP)  # (when, quiet compute s, quiet fixed s, measured s)
        self._fixed: deque = deque(maxlen=self.KEEP)
        self._factors: tuple[float, float] | None = None

    def report(self, work: Work, device: torch.device, seconds: float) -> None:
        """`work` took `seconds` on `device` (wall clock, from start to end)."""
        compute, fixed = work.quiet_seconds(device)
        if seconds < self.LEAST_S or compute + fixed <= 0:
            return
        with self._lock:
            (self._compute if compute >= fixed else self._fixed).append((time.monotonic(), compute, fixed, seconds))
            self._factors = None

    def forget(self) -> None:
        """Back to its prior: nothing measured."""
        with self._lock:
            self._compute.clear()
            self._fixed.clear()
            self._factors = None

    def kept(self) -> list[tuple[float, float, float]]:
        """The reports it keeps now, oldest first: (quiet compute s, quiet fixed s, measured s)."""
        with self._lock:
            oldest = time.monotonic() - self.MEMORY_S
            for kept in (self._compute, self._fixed):
                while kept and kept[0][0] < oldest:
                    kept.popleft()
                    self._factors = None
            return [report[1:] for report in sorted([*self._compute, *self._fixed])]

    @property
    def reports(self) -> int:
        return len(self.kept())

    def ratios(self) -> list[float]:
        """Each kept report's measured seconds over its estimate at the prior."""
        return [seconds / (compute * self.prior[0] + fixed * self.prior[1]) for compute, fixed, seconds in self.kept()]

    def factors(self, unseen: float = 1.0) -> tuple[float, float]:
        """(compute, fixed): what to multiply RATES' two parts by on this server now; with no report kept,
        the prior times `unseen` (how the server's other kinds of click ran next to theirs)."""
        self.kept()  # forgets the old ones
        with self._lock:
            if not self._compute and not self._fixed:
                return self.prior[0] * unseen, self.prior[1] * unseen
            if self._factors is None:
                self._factors = self._fit(list(self._compute), list(self._fixed))
            return self._factors

    def _fit(self, compute_bound: list, fixed_bound: list, follow: bool = True) -> tuple[float, float]:
        """The factors nearest the reports; with `follow`, a part the reports say little of moves from its
        prior as the other part did (a pull of the two ratios together, which the reports outweigh)."""
        seen = compute_bound + fixed_bound
        quiet = np.array([(compute * self.prior[0], fixed * self.prior[1]) for _, compute, fixed, _ in seen])
        measured = np.log(np.array([seconds for *_, seconds in seen]))
        grid, ratio = self.GRID, np.log(self.GRID)
        # every pair of factors at once: (compute factor, fixed factor, report)
        estimates = grid[:, None, None] * quiet[None, None, :, 0] + grid[None, :, None] * quiet[None, None, :, 1]
        loss = ((np.log(estimates) - measured) ** 2).sum(axis=2)
        loss += 0.002 * (ratio[:, None] ** 2 + ratio[None, :] ** 2)  # a weak pull to the prior
        if follow:
            loss += 0.02 * (ratio[:, None] - ratio[None, :]) ** 2
        best = np.unravel_index(int(np.argmin(loss)), loss.shape)
        return float(grid[best[0]]) * self.prior[0], float(grid[best[1]]) * self.prior[1]


def fit_pace(reports: list[tuple[float, float, float]]) -> tuple[float, float]:
    """The factors over RATES' two parts that fit these reports best, (quiet compute s, quiet fixed s,
    measured s) each, as a Pace fits its own: how QUIET_PACE is calibrated (scripts/estimates.py)."""
    seen = [(0.0, compute, fixed, seconds) for compute, fixed, seconds in reports]
    return Pace()._fit(seen, [], follow=False)


_PACES: dict[tuple[str, str], Pace] = {}
_PACES_GUARD = threading.Lock()


def device_kind(device: torch.device) -> str:
    return device.type if device.type in RATES else "cpu"


def pace(device: torch.device, click: str) -> Pace:
    """This server's Pace for one kind of click on one kind of device: each learns apart, for what RATES
    count as one step's fixed cost differs by click (an engine step's Python, the eager passes and
    read-backs of a strategy's run), and by device."""
    kind = device_kind(device)
    with _PACES_GUARD:
        return _PACES.setdefault((kind, click), Pace(QUIET_PACE.get((kind, click), (1.0, 1.0))))


def server_pace(device: torch.device) -> tuple[float, int]:
    """How this server ran its recent clicks of every kind next to their quiet pace: the median of their
    measured / estimated-at-the-prior, and how many clicks that is (1.0 and 0 when it timed none)."""
    kind = device_kind(device)
    with _PACES_GUARD:
        paces = [each for (on, _), each in _PACES.items() if on == kind]
    ratios = [ratio for each in paces for ratio in each.ratios()]
    return (float(np.median(ratios)) if ratios else 1.0), len(ratios)


def factors(device: torch.device, click: str) -> tuple[float, float]:
    """What to multiply RATES' two parts by for a click of this kind on this server now: its own Pace once it
    has timed one, else its quiet pace slowed (or sped) as the server's other clicks were."""
    own = pace(device, click)
    return own.factors(server_pace(device)[0] if not own.reports else 1.0)


def says(device: torch.device, click: str) -> str:
    """How a click of this kind is estimated now, in a few words for a progress bar."""
    count = pace(device, click).reports
    if count:
        return f"at this server's pace over its last {count} click{'s' if count > 1 else ''} like it"
    ratio, others = server_pace(device)
    if others:
        return (f"at this server's pace over its last {others} click{'s' if others > 1 else ''} of other kinds "
                f"({ratio:.1f}x a quiet server's time)")
    return "at a quiet server's pace (this server has not timed a click yet)"


def stopwatch(work: Work, device: torch.device) -> Callable[[], None]:
    """Started now; calling what it returns reports the seconds since as the time `work` took, to this
    server's Pace. A click stopped or refused midway never calls it, and reports nothing."""
    started = time.perf_counter()
    return lambda: pace(device, work.click).report(work, device, time.perf_counter() - started)


def forget_paces() -> None:
    """Every Pace back to its quiet pace, nothing timed, as on a fresh server."""
    with _PACES_GUARD:
        paces = list(_PACES.values())
    for each in paces:
        each.forget()


@contextmanager
def timed(work: Work, device: torch.device) -> Iterator[None]:
    """stopwatch around a block: reported when the block ends without raising."""
    done = stopwatch(work, device)
    yield
    done()


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
    """One click's budget in seconds: KVVIZ_CLICK_SECONDS when it is a number (at least a tenth of a second),
    else CLICK_SECONDS."""
    try:
        return max(0.1, float(os.environ.get("KVVIZ_CLICK_SECONDS", CLICK_SECONDS)))
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

