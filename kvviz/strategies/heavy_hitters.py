"""Heavy-hitter eviction (H2O, Zhang et al. 2023).

A few tokens receive most of the attention, step after step. H2O adds up, for every kept key,
the attention it has received so far (summed over the queries of every step and over the query
heads that share its KV head), and when the budget is exceeded it keeps the `recent` newest
tokens plus the `budget - recent` keys with the largest sums; the lowest are evicted. Each KV
head chooses for itself, so different heads keep different tokens.

The scores come from the attention call: after the forward pass the caller hands each layer its
attention weights (`observe`), and only then does the layer trim.
"""

from __future__ import annotations

import torch

from kvviz.strategies.budget import BudgetKV


class HeavyHitterKV(BudgetKV):
    needs_attention = True  # the caller must pass each layer's attention weights to `observe`

    def __init__(self, budget: int, recent: int):
        super().__init__(budget)
        assert 0 <= recent < budget, "recent tokens leave at least one slot for a heavy hitter"
        self.recent = recent
        self.scores = None  # (batch, kv_heads, held): attention each kept key has received, summed

    def after_update(self) -> None:
        held = self.num_held_tokens()
        old = 0 if self.scores is None else self.scores.shape[-1]
        B, KVH = self.keys.shape[:2]
        fresh = self.keys.new_zeros(B, KVH, held - old, dtype=torch.float32)  # new tokens start at 0
        self.scores = fresh if self.scores is None else torch.cat([self.scores, fresh], -1)  # (B, KVH, held)

    def observe(self, weights: torch.Tensor) -> None:
        """weights: (B, H, queries, held) this step's attention probabilities; add them up, then trim."""
        B, H, _, held = weights.shape
        KVH = self.scores.shape[1]
        assert held == self.num_held_tokens(), "the weights must cover every held key"
        received = weights.float().sum(2).view(B, KVH, H // KVH, held).sum(2)  # (B, KVH, held)
        self.scores = self.scores + received
        self.evict()

    def choose(self) -> torch.Tensor:
        held = self.num_held_tokens()
        older = held - self.recent
        heavy = self.scores[..., :older].topk(self.budget - self.recent, dim=-1).indices  # (B, KVH, budget - recent)
        recent = torch.arange(older, held, device=heavy.device).expand(*heavy.shape[:2], self.recent)
        return torch.cat([heavy, recent], -1).sort(-1).values  # (B, KVH, budget)

    def keep(self, index: torch.Tensor) -> None:
        super().keep(index)
        self.scores = self.scores.gather(-1, index)

    def held_tensors(self) -> dict[str, torch.Tensor]:
        held = super().held_tensors()
        return held if self.scores is None else {**held, "attention scores": self.scores}
