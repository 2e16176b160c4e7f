"""A cache with a fixed budget: each KV head keeps at most `budget` tokens; a policy picks which.

Eviction methods keep the memory of a long sequence flat by throwing tokens away. They differ
only in *which* tokens survive, so each is a `choose` method on this one layer. The rule of
base.py holds: a step attends to everything it held plus its own new tokens, and the policy
trims afterwards, so the cache between steps never holds more than the budget.

`positions` remembers where each kept key sat in the sequence (a key's rotary position is baked
into it and is not renumbered). Some policies (heavy hitters) choose per KV head, so the
positions are kept per head.
"""

from __future__ import annotations

import torch

from kvviz.strategies.base import PlainKV, append_tokens


class BudgetKV(PlainKV):
    def __init__(self, budget: int):
        super().__init__()  # keys, values: (batch, kv_heads, held <= budget, head_dim) between steps
        assert budget >= 1, "a budget holds at least one token"
        self.budget = budget
        self.positions = None  # (batch, kv_heads, held): the sequence position of each kept key

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """key_states, value_states: (B, KVH, new, D). Returns the held tokens' K, V plus the new ones."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        B, KVH, new, _ = key_states.shape
        new_positions = torch.arange(self.num_seen, self.num_seen + new, device=key_states.device)
        new_positions = new_positions.expand(B, KVH, new)  # (B, KVH, new)
        keys, values = append_tokens(self.keys, self.values, key_states, value_states)  # (B, KVH, T, D)
        self.keys, self.values = keys, values
        self.positions = new_positions if self.positions is None else torch.cat([self.positions, new_positions], -1)
        self.num_seen += new
        self.after_update()  # may trim what is kept; this step still attends to all of `keys`
        return keys, values

    def after_update(self) -> None:
        """Policies that need nothing from the attention call trim right away."""
        self.evict()

    def evict(self) -> None:
        if self.num_held_tokens() > self.budget:
            self.keep(self.choose())

    def choose(self) -> torch.Tensor:
        """(B, KVH, budget) indices into the held tokens, ascending: the tokens to keep."""
        raise NotImplementedError

    def keep(self, index: torch.Tensor) -> None:
        """Keep only the tokens at `index` (B, KVH, kept); gather makes new tensors, so the rest is freed."""
        self.positions = self.positions.gather(-1, index)  # (B, KVH, kept)
        self.keys = self.keys.gather(2, index[..., None].expand(-1, -1, -1, self.keys.shape[-1]))  # (B, KVH, kept, D)
        self.values = self.values.gather(2, index[..., None].expand(-1, -1, -1, self.values.shape[-1]))

    def read(self):
        if self.keys is None:
            return [], None, None
        if not bool((self.positions == self.positions[:, :1]).all()):
            raise ValueError("The KV heads of this layer keep different tokens; read `positions` per head.")
        return self.positions[0, 0].tolist(), self.keys[0].transpose(0, 1), self.values[0].transpose(0, 1)
