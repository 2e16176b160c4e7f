"""The sliding-window cache: keep only the last `window` tokens' keys and values.

Models trained with sliding-window attention (Mistral, Gemma's local layers) lose nothing by
this. On a full-attention model it is an approximation: once the sequence is longer than the
window, a new token can no longer see the oldest ones, and the output changes. Positions are
not renumbered: the kept keys carry the rotary position they were computed at.
"""

from __future__ import annotations

import torch

from kvviz.strategies.base import PlainKV, append_tokens


class SlidingWindowKV(PlainKV):
    def __init__(self, window: int):
        super().__init__()  # keys, values: (batch, kv_heads, <= window, head_dim)
        self.window = window

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Attend to the kept tokens plus this step's; keep only the last `window` afterwards."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        keys, values = append_tokens(self.keys, self.values, key_states, value_states)  # (B, KVH, kept + new, D)
        self.num_seen += key_states.shape[-2]
        # .clone(): a slice would keep the whole longer tensor alive, so nothing would be freed
        self.keys = keys[:, :, -self.window:].clone()  # (B, KVH, min(T, window), D)
        self.values = values[:, :, -self.window:].clone()
        return keys, values

    def read(self):
        if self.keys is None:
            return [], None, None
        positions = list(range(self.num_seen - self.num_held_tokens(), self.num_seen))
        return positions, self.keys[0].transpose(0, 1), self.values[0].transpose(0, 1)
