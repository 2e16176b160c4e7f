"""The paged cache's storage (kvviz/engine/kv_cache.py)."""

import os

import torch

from kvviz.engine.kv_cache import CacheShape, PagedKVCache


def resident_bytes() -> int:
    """This process's resident memory (Linux's /proc/self/statm)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_a_cpu_pool_is_zeros_and_holds_memory_only_where_blocks_are_written():
    shape = CacheShape(num_layers=4, num_kv_heads=2, head_dim=64, dtype=torch.float32)
    before = resident_bytes()
    cache = PagedKVCache(shape, num_blocks=8192, block_size=16, device=torch.device("cpu"))  # 512 MiB
    pool_bytes = cache.storage.nbytes
    assert pool_bytes == 2 * 4 * 8192 * 16 * 2 * 64 * 4
    assert resident_bytes() - before < pool_bytes // 10  # torch.zeros would hold all of it at once
    cache.storage[:, :, 5] = 1.0  # one block of every layer, K and V
    assert cache.storage[:, :, 5].eq(1.0).all() and cache.storage.sum() == cache.storage[:, :, 5].numel()
    assert resident_bytes() - before < pool_bytes // 10  # the sum read the rest as zeros without holding it
