"""Pool sizing and cache set-up: how many blocks an engine gets, and the pool, cache tensors, layer
groups and swap space it runs on.

    parts = set_up_cache(config, cache_shape, hf_config, max_context, device)
    parts.num_blocks, parts.pool, parts.cache, parts.kv, parts.layer_groups

Without num_blocks the pool is sized from free memory (half of memory_fraction of it), but never
larger than max_num_seqs whole contexts. Whatever the size, it is checked against free memory
before a byte is allocated, so a pool too large is refused in a sentence, not by the allocator.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from kvviz.engine.block_pool import BLOCK_BOOKKEEPING_BYTES, BlockPool, blocks_needed
from kvviz.engine.config import MAX_NUM_BLOCKS, EngineConfig
from kvviz.engine.device_memory import available_memory_bytes
from kvviz.engine import fast_path
from kvviz.engine.errors import EngineError
from kvviz.engine.kv_cache import CacheShape, PagedKVCache
from kvviz.engine.kv_manager import KVCacheManager
from kvviz.engine.layer_groups import LayerGroup, layer_windows, make_groups, pool_sizes
from kvviz.engine.swap import SWAP_SLOT_BOOKKEEPING_BYTES, SwapSpace
from kvviz.shapes import format_bytes


class CacheParts(NamedTuple):
    num_blocks: int  # blocks of every layer that the cache's bytes hold (0 without a cache)
    pool: BlockPool | None  # with layer groups: the full-attention group's pool
    cache: PagedKVCache | None
    kv: KVCacheManager | None
    layer_groups: list[LayerGroup]  # one per distinct sliding window, full attention first; [] for most models


def set_up_cache(config: EngineConfig, shape: CacheShape, hf_config, max_context: int,
                 device: torch.device) -> CacheParts:
    """The pool, cache, KV manager and layer groups for these settings; none of them if use_cache is
    off. Refuses, before allocating anything, what memory cannot hold."""
    if not config.use_cache:
        return CacheParts(0, None, None, None, [])
    block_size = config.block_size
    num_blocks = config.num_blocks or blocks_that_fit(shape, block_size, max_context, config.max_num_seqs,
                                                      config.memory_fraction, device)
    windows = layer_windows(hf_config)
    if config.preemption_mode == "swap" and any(w is not None for w in windows):
        raise EngineError("Preemption mode 'swap' moves one block table per request, but this model's "
                          "sliding-window layers keep a table of their own; use preemption_mode='recompute'.")
    layer_groups = []
    if len(set(windows)) == 1 and windows[0] is None:  # every layer sees the whole context
        check_sizes(config, shape, num_blocks, device)  # before allocating anything
        pool = BlockPool(num_blocks, block_size, config.enable_prefix_caching)
        cache = PagedKVCache(shape, num_blocks, block_size, device)
    else:  # the bytes of num_blocks blocks, shared out between the groups' pools
        most_blocks = min(config.max_num_seqs * blocks_needed(max_context, block_size), MAX_NUM_BLOCKS)
        sizes = pool_sizes(windows, num_blocks, block_size, config.max_num_seqs,
                           config.max_num_batched_tokens, most_blocks)
        check_sizes(config, shape, num_blocks, device, sum(sizes))
        layer_groups = make_groups(windows, num_blocks, block_size, config.enable_prefix_caching, sizes)
        pool = layer_groups[0].pool
        split = None if set(sizes) == {num_blocks} else [(g.layers, g.pool.num_blocks) for g in layer_groups]
        cache = PagedKVCache(shape, num_blocks, block_size, device, split)
    swap = None
    if config.preemption_mode == "swap":
        swap = SwapSpace(shape, config.swap_space_blocks or num_blocks, block_size)
    return CacheParts(num_blocks, pool, cache, KVCacheManager(pool, cache, swap, layer_groups or None), layer_groups)


def blocks_that_fit(shape: CacheShape, block_size: int, max_context: int, max_num_seqs: int,
                    memory_fraction: float, device: torch.device) -> int:
    """Size the pool from free memory, but no larger than max_num_seqs full contexts."""
    block_bytes = block_size * shape.bytes_per_token + BLOCK_BOOKKEEPING_BYTES
    by_memory = int(available_memory_bytes(device) * memory_fraction * 0.5) // block_bytes
    by_need = max_num_seqs * blocks_needed(max_context, block_size)
    return max(1, min(by_memory, by_need, MAX_NUM_BLOCKS))


def check_sizes(config: EngineConfig, shape: CacheShape, num_blocks: int, device: torch.device,
                num_pool_blocks: int | None = None) -> None:
    """Refuse a pool or swap space that memory cannot hold (more than memory_fraction of what is
    free), before any of it is allocated. num_pool_blocks: the Block objects of every layer
    group's pool together (layer_groups.pool_sizes), when not num_blocks."""
    block_size, fraction = config.block_size, config.memory_fraction
    block_bytes = block_size * shape.bytes_per_token
    pool_bytes = num_blocks * block_bytes  # layer groups share out these bytes, never more
    bookkeeping_bytes = (num_pool_blocks or num_blocks) * BLOCK_BOOKKEEPING_BYTES  # in host memory
    swap_slots = (config.swap_space_blocks or num_blocks) if config.preemption_mode == "swap" else 0
    swap_bytes = swap_slots * (block_bytes + SWAP_SLOT_BOOKKEEPING_BYTES)  # host memory too
    pool = f"A pool of {num_blocks:,} block{'s' * (num_blocks != 1)} of {block_size:,} tokens"
    if device.type == "cpu":  # one memory holds all three
        knobs = "num_blocks, block_size or swap_space_blocks" if swap_slots else "num_blocks or block_size"
        check_fits(pool + (f" and {swap_slots:,} swap slots" if swap_slots else ""),
                   pool_bytes + bookkeeping_bytes + swap_bytes, device, knobs, fraction)
    else:
        check_fits(pool, pool_bytes, device, "num_blocks or block_size", fraction)
        check_fits(f"The bookkeeping of {num_blocks:,} blocks and {swap_slots:,} swap slots",
                   bookkeeping_bytes + swap_bytes, torch.device("cpu"), "num_blocks, block_size or swap_space_blocks",
                   fraction)


def check_fits(what: str, num_bytes: int, device: torch.device, knobs: str, memory_fraction: float) -> None:
    """Refuse `what` if its bytes are more than memory_fraction of the memory free on `device`."""
    free = available_memory_bytes(device)
    allowed = free * memory_fraction
    if num_bytes > allowed:
        raise EngineError(f"{what} would take {format_bytes(num_bytes)}, but memory_fraction "
                          f"{memory_fraction:g} of the {format_bytes(free)} free on {device.type} "
                          f"is {format_bytes(allowed)}; lower {knobs}.")


def pick_attention_kernel(config: EngineConfig, shape: CacheShape, cache: PagedKVCache | None,
                          device: torch.device):
    """The compiled paged-attention kernel where it applies, else None: gather + SDPA (engine/fast_path.py)."""
    return fast_path.attention_kernel(config, shape, cache, device)
