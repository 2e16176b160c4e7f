"""The dynamic cache: grow by concatenation, keep everything (transformers' DynamicLayer does the same)."""

from __future__ import annotations

import torch

from kvviz.strategies.base import PlainKV, append_tokens


class DynamicKV(PlainKV):
    """Keys and values of every token so far, as (batch, kv_heads, tokens, head_dim)."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """key_states, value_states: (batch, kv_heads, new_tokens, head_dim). Returns all tokens' K, V."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        # a new, longer tensor every step: simple, but the shape keeps changing
        self.keys, self.values = append_tokens(self.keys, self.values, key_states, value_states)  # (B, KVH, T, D)
        self.num_seen += key_states.shape[-2]
        return self.keys, self.values

    def read(self):
        if self.keys is None:
            return [], None, None
        return list(range(self.num_seen)), self.keys[0].transpose(0, 1), self.values[0].transpose(0, 1)
