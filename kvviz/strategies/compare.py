"""How far a run strays from the full cache's: KL divergence and the first differing token.

The comparison of every strategy moved to kvviz.lessons.cache_strategies.logic, the lesson's own module; the
eviction lab (eviction.py) and that comparison both measure with these two.
"""

from __future__ import annotations

import numpy as np


def kl_divergence(reference_logprobs: np.ndarray, logprobs: np.ndarray) -> float:
    """KL(p || q) in nats, from log-probabilities over the vocabulary."""
    p = np.exp(reference_logprobs.astype(np.float64))
    return float(max(0.0, np.sum(p * (reference_logprobs.astype(np.float64) - logprobs.astype(np.float64)))))


def first_difference(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
