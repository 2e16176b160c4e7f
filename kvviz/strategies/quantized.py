"""The quantized cache: store keys and values in 8 or 4 bits, a scale and a zero point per group.

Each token's key (and value) vector of `head_dim` numbers is cut into groups of `group_size`;
a group keeps its minimum (the zero point) and its step (the scale), and every number becomes a
code from 0 to 2**bits - 1:

    code = round((x - zero) / scale)        x ≈ code * scale + zero,  |error| <= scale / 2

4-bit codes are packed two to a byte. Like KIVI and transformers' QuantizedCache, the newest
`residual` tokens stay in full precision and are quantized only when they leave that window.
Unlike KIVI, which groups keys per channel (one channel across a run of tokens) and values per
token, keys are grouped here as values are, along head_dim within each token, as transformers'
QuantizedCache does.
Attention reads the cache dequantized; the full-precision copy it builds is temporary.
"""

from __future__ import annotations

import torch

from kvviz.strategies.base import KVLayer, append_tokens


def quantize(x: torch.Tensor, bits: int, group_size: int):
    """x: (..., head_dim) -> codes (..., head_dim * bits / 8) uint8, scale and zero (..., head_dim / group_size)."""
    groups = x.unflatten(-1, (-1, group_size))  # (..., num_groups, group_size)
    zero = groups.amin(-1, keepdim=True)  # (..., num_groups, 1)
    scale = (groups.amax(-1, keepdim=True) - zero).clamp(min=1e-8) / (2**bits - 1)
    codes = ((groups - zero) / scale).round().clamp(0, 2**bits - 1).to(torch.uint8).flatten(-2)  # (..., head_dim)
    if bits == 4:  # two codes per byte: even index in the low half, odd index in the high half
        codes = codes[..., 0::2] | (codes[..., 1::2] << 4)  # (..., head_dim / 2)
    return codes, scale.squeeze(-1), zero.squeeze(-1)


def dequantize(codes: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int) -> torch.Tensor:
    """The inverse of `quantize`, up to the rounding: -> (..., head_dim) in the scale's dtype."""
    if bits == 4:
        codes = torch.stack([codes & 0x0F, codes >> 4], dim=-1).flatten(-2)  # (..., head_dim)
    groups = codes.unflatten(-1, (scale.shape[-1], -1)).to(scale.dtype)  # (..., num_groups, group_size)
    return (groups * scale[..., None] + zero[..., None]).flatten(-2)


class QuantizedKV(KVLayer):
    def __init__(self, bits: int, group_size: int, residual: int = 0):
        super().__init__()
        self.bits, self.group_size, self.residual = bits, group_size, residual
        self.stored: dict[str, torch.Tensor] = {}  # quantized older tokens: codes, scales, zeros for K and V
        self.recent_keys = self.recent_values = None  # (batch, kv_heads, <= residual, head_dim), full precision

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Attend to the dequantized old tokens plus the full-precision recent and new ones; then
        quantize whatever has left the `residual` window."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        recent_keys, recent_values = append_tokens(  # (B, KVH, recent + new, D)
            self.recent_keys, self.recent_values, key_states, value_states)
        keys, values = recent_keys, recent_values
        if self.stored:
            keys, values = append_tokens(*self.dequantized(), recent_keys, recent_values)  # (B, KVH, T, D)
        self.num_seen += key_states.shape[-2]
        leaving = recent_keys.shape[-2] - self.residual  # tokens that move to the quantized store
        if leaving > 0:
            self._store(recent_keys[:, :, :leaving], recent_values[:, :, :leaving])
            # .clone(): a slice would keep the full-precision originals alive
            recent_keys, recent_values = recent_keys[:, :, leaving:].clone(), recent_values[:, :, leaving:].clone()
        self.recent_keys, self.recent_values = recent_keys, recent_values
        return keys, values

    def _store(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Quantize (B, KVH, n, D) keys and values and append them to the store, token by token."""
        new = {}
        for kind, tensor in (("key", keys), ("value", values)):
            codes, scale, zero = quantize(tensor, self.bits, self.group_size)
            new.update({f"{kind} codes": codes, f"{kind} scales": scale, f"{kind} zero points": zero})
        for name, tensor in new.items():
            self.stored[name] = tensor if name not in self.stored else torch.cat([self.stored[name], tensor], dim=-2)

    def dequantized(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The quantized tokens back in full precision: K, V as (B, KVH, num_quantized, D)."""
        s = self.stored
        return (dequantize(s["key codes"], s["key scales"], s["key zero points"], self.bits),
                dequantize(s["value codes"], s["value scales"], s["value zero points"], self.bits))

    def num_quantized_tokens(self) -> int:
        return self.stored["key codes"].shape[-2] if self.stored else 0

    def held_tensors(self) -> dict[str, torch.Tensor]:
        held = dict(self.stored)
        if self.recent_keys is not None and self.recent_keys.shape[-2]:
            held.update({"recent keys": self.recent_keys, "recent values": self.recent_values})
        return held

    def read(self):
        if not self.is_initialized:
            return [], None, None
        keys, values = self.recent_keys, self.recent_values
        if self.stored:
            keys, values = append_tokens(*self.dequantized(), keys, values)
        return list(range(self.num_seen)), keys[0].transpose(0, 1), values[0].transpose(0, 1)
