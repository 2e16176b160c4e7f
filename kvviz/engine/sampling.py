"""Sampling parameters and the sampler: from a row of logits to the next token."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from numbers import Integral, Real

import torch

from kvviz.engine import fast_path

# far below this, logits / temperature overflow float32; 0 means greedy (vLLM cuts at 1e-5 too)
MIN_TEMPERATURE = 1e-5
MAX_SEED = 2**63 - 1  # a torch.Generator takes a 64-bit seed; kvviz keeps to the signed half


@dataclass(slots=True)
class SamplingParams:
    """How one request picks its tokens and when it stops.

    temperature 0 is greedy (argmax). With `seed` set, sampling is reproducible: the request
    draws from its own generator, whatever else shares the batch.

    n > 1 is parallel sampling: the prompt is prefilled once, then forks into n sequences that
    share its blocks. Sample i draws with seed + i, so it equals a lone request with that seed.
    """

    max_tokens: int = 32
    temperature: float = 0.0
    top_k: int = 0  # 0: no top-k cut
    top_p: float = 1.0  # 1.0: no nucleus cut
    seed: int | None = None
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    n: int = 1  # samples of the one prompt

    def validate(self, max_num_seqs: int | None = None) -> None:
        """Refuse, in one sentence, a setting of the wrong type or out of its range; with
        `max_num_seqs` (the engine's), also more samples than the engine runs at once."""
        if not _is_whole(self.max_tokens) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be a whole number of tokens from 1 up, not {self.max_tokens!r}.")
        temperature = self.temperature
        if not _is_number(temperature) or not (temperature == 0 or MIN_TEMPERATURE <= temperature < math.inf):
            raise ValueError(f"temperature must be 0 (greedy) or a number from {MIN_TEMPERATURE} up, "
                             f"not {self.temperature!r}.")
        if not _is_whole(self.n) or self.n < 1:
            raise ValueError(f"n (samples per prompt) must be a whole number from 1 up, not {self.n!r}.")
        if max_num_seqs is not None and self.n > max_num_seqs:  # the n samples run at once, as n sequences
            raise ValueError(f"n={self.n} samples would run as {self.n} sequences at once but the engine runs at "
                             f"most max_num_seqs={max_num_seqs}; ask for fewer samples or raise max_num_seqs.")
        if not _is_whole(self.top_k) or self.top_k < 0:
            raise ValueError(f"top_k must be 0 (off) or a whole number of tokens to keep, not {self.top_k!r}.")
        if not _is_number(self.top_p) or not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be a number in (0, 1], not {self.top_p!r}.")
        if self.seed is not None and (not _is_whole(self.seed) or not 0 <= self.seed <= MAX_SEED - (self.n - 1)):
            highest = "2**63 - 1" if self.n == 1 else f"2**63 - {self.n} (sample i draws with seed + i)"
            raise ValueError(f"seed must be None (random) or a whole number from 0 to {highest}, not {self.seed!r}.")
        if not isinstance(self.stop_token_ids, (list, tuple)) or not all(map(_is_whole, self.stop_token_ids)):
            raise ValueError(f"stop_token_ids must be a list of whole-number token ids, "
                             f"not {self.stop_token_ids!r:.60}.")
        if not isinstance(self.ignore_eos, bool):
            raise ValueError(f"ignore_eos must be True or False, not {self.ignore_eos!r}.")



def _is_whole(value) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def non_finite_rows(logits: torch.Tensor) -> list[int]:
    """Rows no token can be drawn from: a NaN or +inf anywhere, or no finite logit at all.

    logits: (R, V). A row's max is NaN when any logit is NaN, +inf when any is +inf and -inf when
    all are, so one reduction finds them all (a -inf that masks some tokens is fine).
    """
    row_max = logits.amax(dim=-1)  # (R,)
    return torch.nonzero(~torch.isfinite(row_max)).flatten().tolist()


def sample(logits: torch.Tensor, params: list[SamplingParams],
           generators: list[torch.Generator | None]) -> list[int]:
    """Pick one token per row.

    logits: (R, V), one row per request that samples this step.
    Greedy rows share one argmax (compiled on the CPU in float32: PyTorch's takes about ten times
    its max there); the others are sampled row by row with their own generator.
    """
    tokens = fast_path.argmax(logits).tolist()  # (R,)
    for row, (param, generator) in enumerate(zip(params, generators)):
        if param.temperature == 0:
            continue
        scores = logits[row].float() / param.temperature  # (V,)
        if param.top_k:
            kth = torch.topk(scores, min(param.top_k, scores.numel())).values[-1]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        if param.top_p < 1.0:
            sorted_scores, order = scores.sort(descending=True)
            cumulative = sorted_scores.softmax(-1).cumsum(-1)
            # drop a token once the tokens before it already cover top_p
            drop = cumulative - sorted_scores.softmax(-1) >= param.top_p
            scores = scores.scatter(0, order[drop], float("-inf"))
        probs = scores.softmax(-1).cpu()
        tokens[row] = int(torch.multinomial(probs, 1, generator=generator).item())
    return tokens
