"""The static cache: reserve room for `capacity` tokens up front and fill it in place.

Shapes never change, which compilers and CUDA graphs like; the price is that the whole
reservation is held from the first step, however short the request turns out to be.
"""

from __future__ import annotations

import torch

from kvviz.strategies.base import KVLayer


class StaticKV(KVLayer):
    # transformers reads this flag (meant for torch.compile) to know that a decode step's keys
    # include empty slots, so it builds a real mask instead of trusting SDPA's causal shortcut
    is_compileable = True

    def __init__(self, capacity: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype,
                 device: torch.device, batch_size: int = 1):
        super().__init__()
        self.capacity = capacity
        # the reservation: (batch, kv_heads, capacity, head_dim), zeros until written
        self.keys = torch.zeros(batch_size, num_kv_heads, capacity, head_dim, dtype=dtype, device=device)
        self.values = torch.zeros_like(self.keys)
        self.device = device
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Write the new tokens into their slots; return the whole reservation (empty slots are
        masked by causality: they sit at positions after every query)."""
        start, end = self.num_seen, self.num_seen + key_states.shape[-2]
        if end > self.capacity:
            raise ValueError(f"The static cache holds {self.capacity} tokens and this step would need "
                             f"{end}; reserve a larger capacity.")
        self.keys[:, :, start:end] = key_states  # in place: the tensor never moves or grows
        self.values[:, :, start:end] = value_states
        self.num_seen = end
        return self.keys, self.values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.capacity, 0  # attention always spans the whole reservation

    def get_max_length(self) -> int:
        return self.capacity

    def held_tensors(self) -> dict[str, torch.Tensor]:
        return {"keys": self.keys, "values": self.values}

    def read(self):
        n = self.num_seen
        return list(range(n)), self.keys[0, :, :n].transpose(0, 1), self.values[0, :, :n].transpose(0, 1)
