"""Attention sinks plus a recent window (StreamingLLM, Xiao et al. 2023).

A trained model pours much of its attention onto the first few tokens whatever they say: they
act as a "sink" for attention that has nowhere better to go. A plain sliding window drops them
first, and the output degrades; keeping them as well as a window of the newest tokens keeps the
model steady at a fixed budget: `sinks` first tokens + `budget - sinks` most recent ones.
"""

from __future__ import annotations

import torch

from kvviz.strategies.budget import BudgetKV


class SinkWindowKV(BudgetKV):
    def __init__(self, budget: int, sinks: int):
        super().__init__(budget)
        assert 0 <= sinks < budget, "the sinks leave at least one slot for the recent window"
        self.sinks = sinks

    def choose(self) -> torch.Tensor:
        """The first `sinks` held tokens (they never leave, so they are positions 0 .. sinks - 1)
        and the last `budget - sinks`."""
        held = self.num_held_tokens()
        index = torch.cat([torch.arange(self.sinks), torch.arange(held - (self.budget - self.sinks), held)])
        B, KVH = self.positions.shape[:2]
        return index.to(self.positions.device).expand(B, KVH, self.budget)  # (B, KVH, budget)
