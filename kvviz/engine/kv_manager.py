"""The KV cache manager: which blocks each request holds. The scheduler decides tokens, this
decides blocks (vLLM's KVCacheManager, nano-vllm's BlockManager).

    hit = kv.find_prefix(request)                  # cached full blocks that start its prompt
    kv.allocate_slots(request, num_new, hit)       # blocks for num_new more tokens, or False
    kv.free(request, "finish")                     # give its blocks back ("preempt" alike)
    kv.truncate(request, num_tokens)               # roll back rejected draft tokens
    kv.fork(parent, child)                         # parallel sampling: share every block
    kv.swap_out(request); kv.swap_in(request, n)   # preemption mode "swap": blocks to CPU and back

A block shared by forked samples is copied before one of them writes into it (copy-on-write).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvviz.engine.block_pool import BlockPool
from kvviz.engine.kv_cache import PagedKVCache
from kvviz.engine.request import Request
from kvviz.engine.swap import SwapSpace


def blocks_needed(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


@dataclass(slots=True)
class PrefixHit:
    """The cached full blocks that start a prompt, and their chained hashes."""

    block_ids: list[int]
    block_hashes: list[int]
    num_tokens: int


class KVCacheManager:
    def __init__(self, pool: BlockPool, cache: PagedKVCache | None = None, swap: SwapSpace | None = None):
        self.pool = pool
        self.block_size = pool.block_size
        self.cache = cache  # the device cache: copy-on-write and swapping move its blocks
        self.swap = swap  # None: preemption recomputes
        self.swapped: dict[int, list[int]] = {}  # request id -> swap slots holding its blocks

    def find_prefix(self, request: Request) -> PrefixHit:
        block_ids, hashes = self.pool.find_cached_prefix(request.all_token_ids)
        return PrefixHit(block_ids, hashes, len(block_ids) * self.block_size)

    def allocate_slots(self, request: Request, num_new_tokens: int, hit: PrefixHit | None = None) -> bool:
        """Give `request` blocks for `num_new_tokens` tokens after its computed ones (after the
        prefix hit, when it is being admitted). False, and nothing changed, if they do not fit."""
        pool = self.pool
        start = hit.num_tokens if hit is not None else request.num_computed_tokens
        held = hit.block_ids if hit is not None else request.block_table
        missing = max(0, blocks_needed(start + num_new_tokens, self.block_size) - len(held))
        reused_free = sum(pool.blocks[b].ref_cnt == 0 for b in hit.block_ids) if hit else 0  # leave the free queue
        shared = self._shared_block(request, start) if hit is None else None
        if not pool.can_allocate(missing + reused_free + (shared is not None)):
            return False
        if hit is not None:
            if hit.block_ids:
                pool.touch(hit.block_ids, request.request_id)
            request.block_table, request.block_hashes = list(hit.block_ids), list(hit.block_hashes)
        if shared is not None:
            self._copy_on_write(request, shared)
        if missing:
            request.block_table += pool.allocate(missing, request.request_id)
        self.cache_full_blocks(request, start + num_new_tokens)
        return True

    def can_append(self, request: Request, num_new_tokens: int) -> bool:
        """Would a running request's allocate_slots(request, num_new_tokens) fit? Changes nothing."""
        needed = blocks_needed(request.num_computed_tokens + num_new_tokens, self.block_size)
        return self.pool.can_allocate(needed - len(request.block_table))

    def _shared_block(self, request: Request, start: int) -> int | None:
        """Index of the block that token `start` goes into, if other samples share it."""
        index = start // self.block_size
        if index < len(request.block_table) and self.pool.blocks[request.block_table[index]].ref_cnt > 1:
            return index
        return None

    def _copy_on_write(self, request: Request, index: int) -> None:
        """Give `request` its own copy of a shared block before it writes into it."""
        shared = request.block_table[index]
        (own,) = self.pool.allocate(1, request.request_id)
        num_bytes = self.cache.copy_blocks([shared], [own]) if self.cache is not None else 0
        self.pool.note("copy", request.request_id, [shared, own], num_bytes)
        self.pool.free([shared], request.request_id)
        request.block_table[index] = own

    def fork(self, parent: Request, child: Request) -> None:
        """The child sample shares every block of its parent: ref counts go up, nothing is copied."""
        self.pool.share(parent.block_table, child.request_id)
        child.block_table, child.block_hashes = list(parent.block_table), list(parent.block_hashes)

    def is_swapped(self, request: Request) -> bool:
        return request.request_id in self.swapped

    def swap_out(self, request: Request) -> bool:
        """Copy a preempted request's blocks to the swap space and free them here. False (and
        a "swap_full" event) if there is no swap space or not enough of it: then recompute."""
        blocks = request.block_table
        if self.swap is None or not blocks:
            return False
        if not self.swap.can_hold(len(blocks)):
            self.pool.note("swap_full", request.request_id, blocks)
            return False
        slots = self.swap.swap_out(self.cache, blocks)
        self.pool.note("preempt", request.request_id, blocks)
        self.pool.note("swap_out", request.request_id, blocks, len(blocks) * self.swap.bytes_per_block, slots)
        self.pool.free(blocks, request.request_id)
        self.swapped[request.request_id] = slots
        request.block_table, request.block_hashes = [], []
        return True

    def swap_in(self, request: Request, num_new_tokens: int) -> bool:
        """Fresh blocks for a swapped-out request's computed tokens plus `num_new_tokens`, its
        blocks copied back into them. False, and nothing changed, if they do not fit."""
        slots = self.swapped[request.request_id]
        num_tokens = request.num_computed_tokens + num_new_tokens
        needed = blocks_needed(num_tokens, self.block_size)
        if not self.pool.can_allocate(needed):
            return False
        block_ids = self.pool.allocate(needed, request.request_id)
        self.swap.swap_in(self.cache, slots, block_ids[:len(slots)])
        self.pool.note("swap_in", request.request_id, block_ids[:len(slots)],
                       len(slots) * self.swap.bytes_per_block, slots)
        del self.swapped[request.request_id]
        request.block_table, request.block_hashes = block_ids, []
        self.cache_full_blocks(request, num_tokens)
        return True

    def cache_full_blocks(self, request: Request, num_tokens: int) -> None:
        """Register the blocks this step fills, before the forward pass runs.

        A request admitted later in the same step can then hit them: in every layer the forward
        pass writes all new keys and values before any request reads its context, so the
        blocks hold their keys and values by the time the second request attends to them.
        """
        size = self.block_size
        num_tokens = min(num_tokens, request.num_tokens)  # never a block that holds draft tokens
        for i in range(len(request.block_hashes), num_tokens // size):
            parent = request.block_hashes[-1] if request.block_hashes else None
            block_tokens = tuple(request.token_slice(i * size, (i + 1) * size))
            request.block_hashes.append(self.pool.cache_full_block(request.block_table[i], parent, block_tokens))

    def uncache_unwritten(self, request: Request) -> None:
        """A step that ran `request` failed: the blocks it was filling may hold partial keys and
        values, so they leave the prefix cache (the blocks before them were written earlier)."""
        self.pool.uncache(request.block_table[request.num_computed_tokens // self.block_size:])

    def truncate(self, request: Request, num_tokens: int) -> list[int]:
        """Keep the keys and values of the first `num_tokens` tokens only (a speculative rollback):
        blocks past them return to the pool. Returns the freed block ids."""
        keep = blocks_needed(num_tokens, self.block_size)
        assert len(request.block_hashes) <= keep, "a cached block must never hold draft tokens"
        freed = request.block_table[keep:]
        if freed:
            self.pool.note("rollback", request.request_id, freed)
            self.pool.free(freed, request.request_id)
            del request.block_table[keep:]
        request.num_computed_tokens = num_tokens
        request.high_water = min(request.high_water, num_tokens)  # rejected drafts are not "recomputed" later
        return freed

    def free(self, request: Request, reason: str = "finish") -> None:
        """Drop the request's blocks (reason: "finish" or "preempt", kept as an event)."""
        if request.block_table:
            self.pool.note(reason, request.request_id, request.block_table)
            self.pool.free(request.block_table, request.request_id)
        if request.request_id in self.swapped:  # finished (aborted) while swapped out
            self.swap.free(self.swapped.pop(request.request_id))
        request.block_table, request.block_hashes = [], []
