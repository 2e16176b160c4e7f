"""Swap space: a copy of the paged cache in CPU memory, where preempted requests' blocks wait.

In preemption mode "swap" a victim's blocks are copied here and freed in the device pool; when
it resumes they are copied back into fresh blocks, so no token is computed again. The price is
the bytes moved, twice. Each slot holds one block; free slots wait in a queue. A quantized cache
swaps its codes and their scales, as they are: nothing is dequantized on the way.
"""

from __future__ import annotations

from collections import deque

import torch

from kvviz.engine.kv_cache import CacheShape, PagedKVCache


SWAP_SLOT_BOOKKEEPING_BYTES = 40  # a free-slot queue entry and its int (40 bytes measured over 10**6 slots)


class SwapSpace:
    def __init__(self, shape: CacheShape, num_slots: int, block_size: int):
        assert num_slots > 0
        self.num_slots = num_slots
        self.cache = PagedKVCache(shape, num_slots, block_size, torch.device("cpu"))
        self.free_slots: deque[int] = deque(range(num_slots))

    @property
    def num_free_slots(self) -> int:
        return len(self.free_slots)

    @property
    def bytes_per_block(self) -> int:
        return self.cache.bytes_per_block

    def can_hold(self, num_blocks: int) -> bool:
        return num_blocks <= len(self.free_slots)

    def swap_out(self, device_cache: PagedKVCache, block_ids: list[int]) -> list[int]:
        """Copy device blocks into free slots, K and V of every layer at once; returns the slots."""
        assert self.can_hold(len(block_ids)), "the KV manager checks can_hold first"
        slots = [self.free_slots.popleft() for _ in block_ids]
        blocks = torch.tensor(block_ids, dtype=torch.long, device=device_cache.storage.device)
        # (2, layers, len(slots), block_size, kv_heads, head_dim)
        self.cache.storage[:, :, torch.tensor(slots)] = device_cache.storage[:, :, blocks].cpu()
        if device_cache.scales is not None:  # (2, layers, len(slots), block_size, kv_heads)
            self.cache.scales[:, :, torch.tensor(slots)] = device_cache.scales[:, :, blocks].cpu()
        return slots

    def swap_in(self, device_cache: PagedKVCache, slots: list[int], block_ids: list[int]) -> None:
        """Copy slots back into (fresh) device blocks, then free the slots."""
        assert len(slots) == len(block_ids)
        blocks = torch.tensor(block_ids, dtype=torch.long, device=device_cache.storage.device)
        device_cache.storage[:, :, blocks] = self.cache.storage[:, :, torch.tensor(slots)].to(blocks.device)
        if device_cache.scales is not None:
            device_cache.scales[:, :, blocks] = self.cache.scales[:, :, torch.tensor(slots)].to(blocks.device)
        self.free(slots)

    def free(self, slots: list[int]) -> None:
        assert not set(slots) & set(self.free_slots), "a slot is freed once"
        self.free_slots.extend(slots)
