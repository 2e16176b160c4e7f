"""What every kvviz cache strategy shares: one `KVLayer` per model layer, held in a `StrategyCache`.

transformers calls `cache.update(keys, values, layer_idx)` in every attention layer, after the
rotary embedding, with the step's new keys and values; `update` stores what its policy keeps and
returns the keys and values this step's queries attend to. The policies differ only in that
method (and in what they hold), so each strategy is one small subclass of `KVLayer`.

One rule for all of them: the tokens of the current step are attended at full fidelity (the model
just computed them, they are in hand); the policy decides what is *kept* for later steps.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin


def append_tokens(keys, values, key_states: torch.Tensor, value_states: torch.Tensor):
    """keys, values so far (None before the first step) followed by the new ones:
    (batch, kv_heads, tokens, head_dim) + (batch, kv_heads, new, head_dim) -> (..., tokens + new, ...)."""
    if keys is None:
        return key_states, value_states
    return torch.cat([keys, key_states], dim=-2), torch.cat([values, value_states], dim=-2)


class KVLayer(CacheLayerMixin):
    """One layer's cache. Tensors come as transformers passes them: (batch, kv_heads, tokens, head_dim)."""

    def __init__(self):
        super().__init__()
        self.num_seen = 0  # tokens that have passed through this layer: positions 0 .. num_seen - 1

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self.is_initialized = True

    # ---- what a policy defines ---------------------------------------------------------------
    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        raise NotImplementedError

    def held_tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor the layer keeps between steps, by name; their nbytes are its memory."""
        raise NotImplementedError

    def read(self) -> tuple[list[int], torch.Tensor, torch.Tensor]:
        """What the next step will attend to from the cache: (positions, K, V), K and V as
        (tokens, kv_heads, head_dim) of the first sequence, dequantized where stored quantized."""
        raise NotImplementedError

    def num_held_tokens(self) -> int:
        """Tokens whose keys and values this layer keeps."""
        return self.num_seen

    # ---- what transformers asks ----------------------------------------------------------------
    def get_seq_length(self) -> int:
        return self.num_seen  # the next token's position, whatever was dropped

    def get_max_length(self) -> int:
        return -1

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        """(number of keys the next update returns, position of the first of them)."""
        held = self.num_held_tokens()
        return held + query_length, self.num_seen - held

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.held_tensors().values())


class PlainKV(KVLayer):
    """A layer that keeps keys and values as they came, (batch, kv_heads, held, head_dim) each:
    what the dynamic, sliding-window and budget caches share (they differ in what they drop)."""

    def __init__(self):
        super().__init__()
        self.keys = self.values = None  # None before the first step

    def num_held_tokens(self) -> int:
        return 0 if self.keys is None else self.keys.shape[-2]

    def held_tensors(self) -> dict[str, torch.Tensor]:
        return {} if self.keys is None else {"keys": self.keys, "values": self.values}


class StrategyCache(Cache):
    """A transformers `Cache` made of kvviz layers, one per model layer."""

    def __init__(self, layers: list[KVLayer]):
        super().__init__(layers=layers)

    def layer_nbytes(self) -> list[int]:
        """Measured: bytes each layer's tensors hold right now."""
        return [layer.nbytes for layer in self.layers]

    @property
    def nbytes(self) -> int:
        return sum(self.layer_nbytes())

    def named_nbytes(self) -> dict[str, int]:
        """Measured bytes by tensor name, summed over layers (e.g. "keys", "key scales")."""
        totals: dict[str, int] = {}
        for layer in self.layers:
            for name, tensor in layer.held_tensors().items():
                totals[name] = totals.get(name, 0) + tensor.nbytes
        return totals

    def read(self) -> tuple[list[int], torch.Tensor, torch.Tensor]:
        """Every layer's readable K and V: (positions, K, V), K and V (layers, tokens, kv_heads, head_dim)."""
        reads = [layer.read() for layer in self.layers]
        positions = reads[0][0]
        assert all(r[0] == positions for r in reads), "layers keep different tokens"
        return positions, torch.stack([r[1] for r in reads]), torch.stack([r[2] for r in reads])
