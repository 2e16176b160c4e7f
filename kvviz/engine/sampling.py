"""Sampling parameters and the sampler: from a row of logits to the next token."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

# far below this, logits / temperature overflow float32; 0 means greedy (vLLM cuts at 1e-5 too)
MIN_TEMPERATURE = 1e-5


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

    def validate(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, not {self.max_tokens}; ask for one token or more.")
        if not (self.temperature == 0 or MIN_TEMPERATURE <= self.temperature < math.inf):
            raise ValueError(f"temperature must be 0 (greedy) or a number from {MIN_TEMPERATURE} up, "
                             f"not {self.temperature}.")
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"n (samples per prompt) must be a whole number from 1 up, not {self.n!r}.")
        if self.top_k < 0:
            raise ValueError(f"top_k must be 0 (off) or positive, not {self.top_k}.")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], not {self.top_p}.")


def sample(logits: torch.Tensor, params: list[SamplingParams],
           generators: list[torch.Generator | None]) -> list[int]:
    """Pick one token per row.

    logits: (R, V), one row per request that samples this step.
    Greedy rows share one argmax; the others are sampled row by row with their own generator.
    """
    tokens = logits.argmax(dim=-1).tolist()  # (R,)
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
