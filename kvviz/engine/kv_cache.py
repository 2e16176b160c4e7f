"""Paged KV storage: per layer, K and V as [num_blocks, block_size, kv_heads, head_dim].

New tokens are written through a slot mapping (slot = block_id * block_size + offset), and a
request reads its tokens back through its block table. Only the model's KV heads are stored,
so a GQA or MQA model pays for its few KV heads, not for every query head.

An MLA model (DeepSeek-V3, engine/mla.py) stores less still: per token and layer one row of
kv_lora_rank + qk_rope_head_dim values, the compressed latent and the shared rotary key, for
all heads together. It is kept as a cache with one "KV head" whose K row is that whole row and
no V at all: storage (1, layers, blocks, block_size, 1, kv_lora_rank + qk_rope_head_dim).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvviz.shapes import ModelShape


@dataclass(slots=True)
class CacheShape:
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype
    latent: bool = False  # MLA: one row per token (latent + rotary key) in K, no V

    @property
    def num_parts(self) -> int:
        """Tensors per token and KV head: 2 (K and V), or 1 for MLA's latent row."""
        return 1 if self.latent else 2

    @property
    def bytes_per_token(self) -> int:
        """K and V, every layer, every KV head: the article's per-token bill (MLA: its one row)."""
        element = torch.empty((), dtype=self.dtype).element_size()
        return self.num_parts * self.num_layers * self.num_kv_heads * self.head_dim * element

    @classmethod
    def from_shape(cls, shape: ModelShape) -> "CacheShape":
        """The cache's numbers out of the model's shape (kvviz.shapes, read once from the config)."""
        if shape.kv_lora_rank is not None:  # MLA: the latent and the shared rotary key, as one "head"
            return cls(shape.num_layers, 1, shape.kv_lora_rank + shape.qk_rope_head_dim, shape.dtype, latent=True)
        return cls(shape.num_layers, shape.num_kv_heads, shape.head_dim, shape.dtype)

    @classmethod
    def from_model(cls, model: torch.nn.Module) -> "CacheShape":
        return cls.from_shape(ModelShape.of_model(model))


class PagedKVCache:
    def __init__(self, shape: CacheShape, num_blocks: int, block_size: int, device: torch.device):
        self.shape = shape
        self.num_blocks = num_blocks
        self.block_size = block_size
        # one allocation; layer views into it. (2, layers, blocks, block_size, kv_heads, head_dim); MLA: (1, ...)
        self.storage = torch.zeros(shape.num_parts, shape.num_layers, num_blocks, block_size,
                                   shape.num_kv_heads, shape.head_dim, dtype=shape.dtype, device=device)
        self.key_cache = list(self.storage[0])  # [layer] -> (num_blocks, block_size, kv_heads, head_dim)
        self.value_cache = list(self.storage[1]) if not shape.latent else []  # MLA: no V

    @property
    def nbytes(self) -> int:
        """Bytes the cache tensors hold, measured from the tensors themselves."""
        return sum(t.nbytes for t in self.key_cache) + sum(t.nbytes for t in self.value_cache)

    def layer_nbytes(self) -> list[int]:
        return [self.storage[:, layer].nbytes for layer in range(self.shape.num_layers)]

    @property
    def bytes_per_block(self) -> int:
        return self.block_size * self.shape.bytes_per_token

    def write(self, layer: int, key: torch.Tensor, value: torch.Tensor | None, slot_mapping: torch.Tensor) -> None:
        """Store new tokens' keys and values.

        key, value: (N, kv_heads, head_dim) for the N tokens of this step (MLA: key (N, 1, row), value None).
        slot_mapping: (N,) flat slot of each token.
        """
        self.key_cache[layer].view(-1, self.shape.num_kv_heads, self.shape.head_dim)[slot_mapping] = key
        if value is not None:
            self.value_cache[layer].view(-1, self.shape.num_kv_heads, self.shape.head_dim)[slot_mapping] = value

    def gather_blocks(self, layer: int, block_tables: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Read whole blocks through block tables: (B, blocks) -> K, V: (B, blocks * block_size, kvh, hd).

        Copying whole blocks is several times faster than gathering token by token. MLA: V is None.
        """
        rows = block_tables.shape[0]
        flat = block_tables.flatten()  # (B * blocks,)
        k = self.key_cache[layer].index_select(0, flat).view(rows, -1, self.shape.num_kv_heads, self.shape.head_dim)
        if self.shape.latent:
            return k, None  # (B, blocks * block_size, 1, latent + rope)
        v = self.value_cache[layer].index_select(0, flat).view(rows, -1, self.shape.num_kv_heads, self.shape.head_dim)
        return k, v  # (B, blocks * block_size, kvh, hd) each

    def copy_blocks(self, src: list[int], dst: list[int], layers: list[int] | None = None) -> int:
        """Copy whole blocks src[i] -> dst[i], K and V of every layer (or of `layers` only: a layer
        group's, whose block ids name only its own layers' slices) in one tensor op; returns bytes.

        Copy-on-write uses it when a forked sample first writes into a block it shares.
        """
        src_ids = torch.tensor(src, dtype=torch.long, device=self.storage.device)
        dst_ids = torch.tensor(dst, dtype=torch.long, device=self.storage.device)
        if layers is None:
            self.storage[:, :, dst_ids] = self.storage[:, :, src_ids]  # (2 or 1, layers, len, block_size, kvh, hd)
            return len(src) * self.bytes_per_block
        layer_ids = torch.tensor(layers, dtype=torch.long, device=self.storage.device)[:, None]  # (L, 1)
        self.storage[:, layer_ids, dst_ids] = self.storage[:, layer_ids, src_ids]  # (2 or 1, L, len, block_size, kvh, hd)
        return len(src) * self.bytes_per_block * len(layers) // self.shape.num_layers

    def read_request(self, block_table: list[int], num_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One request's K and V, every layer, read through its block table.

        Returns K, V: (layers, num_tokens, kv_heads, head_dim); MLA: K (layers, tokens, 1, row), V None.
        """
        blocks = torch.tensor(block_table, dtype=torch.long, device=self.storage.device)
        k = self.storage[0][:, blocks].flatten(1, 2)[:, :num_tokens]  # (layers, tokens, kvh, hd)
        if self.shape.latent:
            return k, None
        v = self.storage[1][:, blocks].flatten(1, 2)[:, :num_tokens]
        return k, v


def slots_for(block_table: list[int], start: int, end: int, block_size: int) -> list[int]:
    """Flat slots of token positions start..end-1 of a request (the slot mapping)."""
    return [block_table[pos // block_size] * block_size + pos % block_size for pos in range(start, end)]
