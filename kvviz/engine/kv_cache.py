"""Paged KV storage: per layer, K and V as [num_blocks, block_size, kv_heads, head_dim].

New tokens are written through a slot mapping (slot = block_id * block_size + offset), and a
request reads its tokens back through its block table. Only the model's KV heads are stored,
so a GQA or MQA model pays for its few KV heads, not for every query head.

An MLA model (DeepSeek-V3, engine/mla.py) stores less still: per token and layer one row of
kv_lora_rank + qk_rope_head_dim values, the compressed latent and the shared rotary key, for
all heads together. It is kept as a cache with one "KV head" whose K row is that whole row and
no V at all: storage (1, layers, blocks, block_size, 1, kv_lora_rank + qk_rope_head_dim).

A quantized cache (EngineConfig.kv_cache_dtype "int8" or "fp8") stores each value in one byte.
The scale scheme: one float32 scale per token, per KV head, for its K row and for its V row,
taken from the row itself when it is written (scale = absmax / 127 for int8, absmax / 448 for
fp8 e4m3, whose largest value is 448), so nothing needs calibrating. A row of head_dim values
then costs head_dim bytes plus a 4-byte scale, and those scale bytes count in bytes_per_token.
Values are quantized in `write` and dequantized (code x scale, in the model's dtype) when they
are read: by the compiled CPU kernel (cpu/paged_attention.c), row by row in place, for a float32
model on the CPU; by `gather_blocks` for the gather + SDPA path elsewhere; by `read_request` for
the lessons.

"fp8_per_tensor" is vLLM's scheme instead, kept to compare the two: one scale for the whole
cache, 1.0 (what vLLM uses when a checkpoint holds no k_scale / v_scale), so no scale bytes, and
each value converted as vLLM's CPU kernel converts it: clamped to +-448 and rounded toward zero.
It has no per-row scales for the compiled kernel to read, so it takes the gather + SDPA path.
"""

from __future__ import annotations

import math
import mmap
from dataclasses import dataclass

import torch

from kvviz.shapes import ModelShape

# kv_cache_dtype -> (how each value is stored, the largest code a row's absmax maps to)
QUANTIZED_DTYPES = {"int8": (torch.int8, 127.0), "fp8": (torch.float8_e4m3fn, 448.0),
                    "fp8_per_tensor": (torch.float8_e4m3fn, 448.0)}
PER_TENSOR_DTYPES = ("fp8_per_tensor",)  # one scale of 1.0 for the whole cache: none stored
KV_CACHE_DTYPES = ("auto", *QUANTIZED_DTYPES)
SCALE_DTYPE = torch.float32  # one scale per token, KV head and K or V row


@dataclass(slots=True)
class CacheShape:
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype  # the model's: what attention computes in and what reads return
    kv_cache_dtype: str = "auto"  # "auto": stored in `dtype`; "int8" / "fp8": one byte per value plus scales
    latent: bool = False  # MLA: one row per token (latent + rotary key) in K, no V

    @property
    def num_parts(self) -> int:
        """Tensors per token and KV head: 2 (K and V), or 1 for MLA's latent row."""
        return 1 if self.latent else 2

    @property
    def quantized(self) -> bool:
        return self.kv_cache_dtype != "auto"

    @property
    def row_scales(self) -> bool:
        """A scale stored per token, KV head and K or V row (False: no cache scales at all)."""
        return self.quantized and self.kv_cache_dtype not in PER_TENSOR_DTYPES

    @property
    def storage_dtype(self) -> torch.dtype:
        """The dtype of the values in the blocks."""
        return QUANTIZED_DTYPES[self.kv_cache_dtype][0] if self.quantized else self.dtype

    @property
    def bytes_per_token(self) -> int:
        """K and V, every layer, every KV head: the article's per-token bill (MLA: its one row), plus
        a quantized cache's scales (one float32 per K row and per V row; none per tensor)."""
        row_bytes = self.head_dim * torch.empty((), dtype=self.storage_dtype).element_size()
        if self.row_scales:
            row_bytes += torch.empty((), dtype=SCALE_DTYPE).element_size()
        return self.num_parts * self.num_layers * self.num_kv_heads * row_bytes

    @classmethod
    def from_shape(cls, shape: ModelShape, kv_cache_dtype: str = "auto") -> "CacheShape":
        """The cache's numbers out of the model's shape (kvviz.shapes, read once from the config)."""
        if shape.kv_lora_rank is not None:  # MLA: the latent and the shared rotary key, as one "head"
            return cls(shape.num_layers, 1, shape.kv_lora_rank + shape.qk_rope_head_dim, shape.dtype,
                       kv_cache_dtype, latent=True)
        return cls(shape.num_layers, shape.num_kv_heads, shape.head_dim, shape.dtype, kv_cache_dtype)

    @classmethod
    def from_model(cls, model: torch.nn.Module, kv_cache_dtype: str = "auto") -> "CacheShape":
        return cls.from_shape(ModelShape.of_model(model), kv_cache_dtype)


class PagedKVCache:
    def __init__(self, shape: CacheShape, num_blocks: int, block_size: int, device: torch.device,
                 groups: list[tuple[list[int], int]] | None = None):
        """groups: layer groups whose pools differ in size (engine/layer_groups.py), as (layers, blocks):
        each gets a tensor of its own. None: one tensor, every layer, num_blocks blocks."""
        self.shape = shape
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.groups = groups or [(list(range(shape.num_layers)), num_blocks)]
        # per group: (2, its layers, its blocks, block_size, kv_heads, head_dim); MLA: (1, ...)
        self.storages = [zeroed((shape.num_parts, len(layers), blocks, block_size, shape.num_kv_heads,
                                 shape.head_dim), shape.storage_dtype, device)
                         for layers, blocks in self.groups]
        # an 8-bit cache's scales, per group: (2 or 1, its layers, its blocks, block_size, kv_heads); None for
        # "auto" and for a per-tensor scale
        self.scale_storages = [zeroed(storage.shape[:-1], SCALE_DTYPE, device)
                               if shape.row_scales else None for storage in self.storages]
        self.row_scales = shape.row_scales  # read in every layer's write and gather
        self.storage = self.storages[0] if groups is None else None  # the one tensor of one group
        self.scales = self.scale_storages[0] if groups is None else None  # None for "auto" too
        self.key_cache = [None] * shape.num_layers  # [layer] -> (its blocks, block_size, kv_heads, head_dim)
        self.value_cache = [None] * shape.num_layers if not shape.latent else []  # MLA: no V
        self.layer_scales = [None] * shape.num_layers  # [layer] -> (2 or 1, its blocks, block_size, kv_heads)
        for (layers, _), storage, scales in zip(self.groups, self.storages, self.scale_storages):
            for index, layer in enumerate(layers):
                self.key_cache[layer] = storage[0, index]
                if not shape.latent:
                    self.value_cache[layer] = storage[1, index]
                if scales is not None:
                    self.layer_scales[layer] = scales[:, index]

    @property
    def nbytes(self) -> int:
        """Bytes the cache tensors hold (values and any scales), measured from the tensors themselves."""
        return sum(self.layer_nbytes())

    def layer_nbytes(self) -> list[int]:
        """Per layer: its K and V blocks (MLA: its latent rows) and any scales."""
        sizes = [0] * self.shape.num_layers
        for (layers, _), storage, scales in zip(self.groups, self.storages, self.scale_storages):
            for index, layer in enumerate(layers):
                sizes[layer] = storage[:, index].nbytes + (scales[:, index].nbytes if scales is not None else 0)
        return sizes

    @property
    def bytes_per_block(self) -> int:
        return self.block_size * self.shape.bytes_per_token

    def write(self, layer: int, key: torch.Tensor, value: torch.Tensor | None, slot_mapping: torch.Tensor) -> None:
        """Store new tokens' keys and values (quantized first, in a quantized cache).

        key, value: (N, kv_heads, head_dim) for the N tokens of this step (MLA: key (N, 1, row), value None).
        slot_mapping: (N,) flat slot of each token.
        """
        kvh, hd = self.shape.num_kv_heads, self.shape.head_dim
        if self.row_scales:
            key, key_scale = quantize(key, self.shape.kv_cache_dtype)  # (N, kvh, hd), (N, kvh)
            self.layer_scales[layer][0].view(-1, kvh)[slot_mapping] = key_scale
            if value is not None:
                value, value_scale = quantize(value, self.shape.kv_cache_dtype)
                self.layer_scales[layer][1].view(-1, kvh)[slot_mapping] = value_scale
        elif self.shape.quantized:  # per tensor, scale 1.0: the values themselves, as codes
            key = truncate_to_e4m3(key)
            value = None if value is None else truncate_to_e4m3(value)
        self.key_cache[layer].view(-1, kvh, hd)[slot_mapping] = key
        if value is not None:
            self.value_cache[layer].view(-1, kvh, hd)[slot_mapping] = value

    def gather_blocks(self, layer: int, block_tables: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Read whole blocks through block tables: (B, blocks) -> K, V: (B, blocks * block_size, kvh, hd),
        in the model's dtype (a quantized cache dequantizes the gathered blocks). MLA: V is None.

        Copying whole blocks is several times faster than gathering token by token.
        """
        rows, kvh, hd = block_tables.shape[0], self.shape.num_kv_heads, self.shape.head_dim
        flat = block_tables.flatten()  # (B * blocks,)
        k = self.key_cache[layer].index_select(0, flat).view(rows, -1, kvh, hd)
        v = None if self.shape.latent else self.value_cache[layer].index_select(0, flat).view(rows, -1, kvh, hd)
        if self.row_scales:
            scales = self.layer_scales[layer]  # (2 or 1, blocks, block_size, kvh)
            k = dequantize(k, scales[0].index_select(0, flat).view(rows, -1, kvh), self.shape.dtype)
            if v is not None:
                v = dequantize(v, scales[1].index_select(0, flat).view(rows, -1, kvh), self.shape.dtype)
        elif self.shape.quantized:  # per tensor, scale 1.0: each code is its value
            k, v = k.to(self.shape.dtype), (None if v is None else v.to(self.shape.dtype))
        return k, v  # (B, blocks * block_size, kvh, hd) each; MLA: (B, blocks * block_size, 1, latent + rope), None

    def copy_blocks(self, src: list[int], dst: list[int], layers: list[int] | None = None) -> int:
        """Copy whole blocks src[i] -> dst[i], K and V (and any scales) of every layer (or of `layers`
        only: a layer group's, whose block ids name only its own layers' slices) in one tensor op;
        returns bytes.

        Copy-on-write uses it when a forked sample first writes into a block it shares.
        """
        src_ids = torch.tensor(src, dtype=torch.long, device=self.storages[0].device)
        dst_ids = torch.tensor(dst, dtype=torch.long, device=self.storages[0].device)
        if layers is None:
            self.storage[:, :, dst_ids] = self.storage[:, :, src_ids]  # (2 or 1, layers, len, block_size, kvh, hd)
            if self.scales is not None:
                self.scales[:, :, dst_ids] = self.scales[:, :, src_ids]  # (2 or 1, layers, len, block_size, kvh)
            return len(src) * self.bytes_per_block
        if self.storage is None:  # a tensor per layer group: `layers` are one group's, copy in its tensor
            group = [group_layers for group_layers, _ in self.groups].index(list(layers))
            storage, scales = self.storages[group], self.scale_storages[group]
            storage[:, :, dst_ids] = storage[:, :, src_ids]  # (2 or 1, L, len, block_size, kvh, hd)
            if scales is not None:
                scales[:, :, dst_ids] = scales[:, :, src_ids]
            return len(src) * self.bytes_per_block * len(layers) // self.shape.num_layers
        layer_ids = torch.tensor(layers, dtype=torch.long, device=self.storage.device)[:, None]  # (L, 1)
        self.storage[:, layer_ids, dst_ids] = self.storage[:, layer_ids, src_ids]  # (2 or 1, L, len, bs, kvh, hd)
        if self.scales is not None:
            self.scales[:, layer_ids, dst_ids] = self.scales[:, layer_ids, src_ids]
        return len(src) * self.bytes_per_block * len(layers) // self.shape.num_layers

    def read_request(self, block_table: list[int], num_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One request's K and V, every layer, read through its block table (dequantized, in the
        model's dtype, from a quantized cache).

        Returns K, V: (layers, num_tokens, kv_heads, head_dim); MLA: K (layers, tokens, 1, row), V None.
        One table serves every layer, so not a cache with a tensor per layer group.
        """
        assert self.storage is not None, "layer groups have a table each; read each group's layers with its own"
        blocks = torch.tensor(block_table, dtype=torch.long, device=self.storage.device)
        parts = []
        for part in range(self.shape.num_parts):  # K, then V (MLA: its latent rows only)
            rows = self.storage[part][:, blocks].flatten(1, 2)[:, :num_tokens]  # (layers, tokens, kvh, hd)
            if self.scales is not None:
                scale = self.scales[part][:, blocks].flatten(1, 2)[:, :num_tokens]  # (layers, tokens, kvh)
                rows = dequantize(rows, scale, self.shape.dtype)
            elif self.shape.quantized:  # per tensor, scale 1.0: each code is its value
                rows = rows.to(self.shape.dtype)
            parts.append(rows)
        return parts[0], (parts[1] if len(parts) == 2 else None)


def quantize(rows: torch.Tensor, kv_cache_dtype: str) -> tuple[torch.Tensor, torch.Tensor]:
    """One scale per row (its absmax over the largest code), then each value divided by it.

    rows: (..., head_dim) keys or values -> codes (..., head_dim) in int8 or fp8, scales (...) float32.
    """
    code_dtype, largest_code = QUANTIZED_DTYPES[kv_cache_dtype]
    rows = rows.float()
    scale = rows.abs().amax(-1) / largest_code  # (...)
    scale = torch.where(scale > 0, scale, 1.0)  # an all-zero row: any scale gives zero codes
    scaled = (rows / scale[..., None]).clamp(-largest_code, largest_code)  # (..., head_dim); clamp: rounding
    if code_dtype == torch.int8:
        scaled = scaled.round()  # int8 stores whole numbers; fp8's conversion rounds to its own grid
    return scaled.to(code_dtype), scale


def dequantize(codes: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """codes (..., head_dim), scale (...) -> values (..., head_dim) in `dtype`: code x scale."""
    return (codes.float() * scale[..., None]).to(dtype)


def zeroed(size: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A tensor of zeros. On the CPU its memory is an anonymous mapping (mmap): pages the system hands
    out already zero when each is first written, so a pool is ready at once and holds memory only where
    blocks are used. torch.zeros writes the whole pool first: SmolLM2's default pool of 9.5 GiB took
    7.4 s and all of its memory on the bench's 2-core machine. The mapping asks for small pages
    (MADV_NOHUGEPAGE): where a first write may be given a 2 MiB page, the system can stop to compact
    memory for it, and on that machine such a write took up to 90 ms where 4 KiB pages took 1 us each
    (numpy's calloc asks for huge pages)."""
    if torch.device(device).type != "cpu":
        return torch.zeros(size, dtype=dtype, device=device)
    nbytes = math.prod(size) * dtype.itemsize
    private = {"flags": mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS} if hasattr(mmap, "MAP_PRIVATE") else {}
    memory = mmap.mmap(-1, max(1, nbytes), **private)  # private: a page only read stays the system's zero page
    if hasattr(mmap, "MADV_NOHUGEPAGE"):  # Linux
        memory.madvise(mmap.MADV_NOHUGEPAGE)
    return torch.frombuffer(memory, dtype=torch.uint8)[:nbytes].view(dtype).view(size)


def slots_for(block_table: list[int], start: int, end: int, block_size: int) -> list[int]:
    """Flat slots of token positions start..end-1 of a request (the slot mapping)."""
    return [block_table[pos // block_size] * block_size + pos % block_size for pos in range(start, end)]


def truncate_to_e4m3(values: torch.Tensor) -> torch.Tensor:
    """values (...) -> fp8 e4m3 codes (...), clamped to +-448 and rounded toward zero, as vLLM's CPU
    kernel writes its fp8 cache (it drops the low mantissa bits). torch's own conversion rounds to
    the nearest code instead; on the bundled model that alone made 6 of 8 greedy outputs of 48 tokens
    part from vLLM's (scripts/bench_kv_dtype.py)."""
    values = values.float().clamp(-448.0, 448.0)
    nearest = values.to(torch.float8_e4m3fn)
    codes = nearest.view(torch.uint8)  # a sign bit, then 7 bits that grow with the magnitude
    rounded_up = nearest.float().abs() > values.abs()  # then one code nearer zero (the sign bit is kept)
    return torch.where(rounded_up, codes - 1, codes).view(torch.float8_e4m3fn)
