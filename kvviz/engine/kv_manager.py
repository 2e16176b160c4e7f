"""The KV cache manager: which blocks each request holds. The scheduler decides tokens, this
decides blocks (vLLM's KVCacheManager, nano-vllm's BlockManager).

    hit = kv.find_prefix(request)                  # cached full blocks that start its prompt
    kv.allocate_slots(request, num_new, hit)       # blocks for num_new more tokens, or False
    kv.free(request, "finish")                     # give its blocks back ("preempt" alike)
    kv.truncate(request, num_tokens)               # roll back rejected draft tokens
    kv.fork(parent, child)                         # parallel sampling: share every block
    kv.swap_out(request); kv.swap_in(request, n)   # preemption mode "swap": blocks to CPU and back

A block shared by forked samples is copied before one of them writes into it (copy-on-write).
A model with sliding-window layers has a table per layer group, each from its own pool, and a
sliding group gives back the blocks its window has left behind (layer_groups.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvviz.engine.block_pool import BlockPool, blocks_needed, hash_block
from kvviz.engine.kv_cache import PagedKVCache
from kvviz.engine.layer_groups import LayerGroup
from kvviz.engine.request import Request
from kvviz.engine.swap import SwapSpace


@dataclass(slots=True)
class PrefixHit:
    """The cached full blocks that start a prompt, and their chained hashes."""

    block_ids: list[int]  # in the first layer group
    block_hashes: list[int]
    num_tokens: int
    tables: list[list[int | None]] | None = None  # every group's, with a model of several or a sliding one

    def group_tables(self) -> list[list[int | None]]:
        return self.tables if self.tables is not None else [self.block_ids]


class KVCacheManager:
    def __init__(self, pool: BlockPool, cache: PagedKVCache | None = None, swap: SwapSpace | None = None,
                 groups: list[LayerGroup] | None = None):
        self.pool = pool  # the first layer group's: the only one of most models
        self.block_size = pool.block_size
        self.cache = cache  # the device cache: copy-on-write and swapping move its blocks
        self.swap = swap  # None: preemption recomputes
        self.swapped: dict[int, list[int]] = {}  # request id -> swap slots holding its blocks
        self.groups = groups or [LayerGroup("full", None, [], pool)]
        assert self.groups[0].pool is pool
        self.sliding = [g for g, group in enumerate(self.groups) if group.window is not None]

    def find_prefix(self, request: Request) -> PrefixHit:
        block_ids, hashes = self.pool.find_cached_prefix(request.all_token_ids)
        if len(self.groups) == 1 and not self.sliding:
            return PrefixHit(block_ids, hashes, len(block_ids) * self.block_size)
        # several groups: the shortest hit of them all; a sliding group keeps only its window
        tables = [block_ids] + [group.pool.find_cached_prefix(request.all_token_ids)[0] for group in self.groups[1:]]
        num_blocks = min(len(table) for table in tables)
        num_tokens = num_blocks * self.block_size
        tables = [table[:num_blocks] for table in tables]
        for g in self.sliding:
            first = self.groups[g].first_needed_block(num_tokens, self.block_size)
            tables[g][:first] = [None] * first
        return PrefixHit(block_ids[:num_blocks], hashes[:num_blocks], num_tokens, tables)

    def allocate_slots(self, request: Request, num_new_tokens: int, hit: PrefixHit | None = None) -> bool:
        """Give `request` blocks for `num_new_tokens` tokens after its computed ones (after the
        prefix hit, when it is being admitted), in every layer group. False, and nothing changed
        but the blocks its window left behind (given back first), if they do not fit."""
        start = hit.num_tokens if hit is not None else request.num_computed_tokens
        if hit is None and self.sliding:
            self.drop_outside_window(request)
        num_blocks = blocks_needed(start + num_new_tokens, self.block_size)
        hit_tables = hit.group_tables() if hit is not None else None
        plan = []  # per group: (blocks to allocate, index of a shared block to copy first)
        for g, group in enumerate(self.groups):
            pool = group.pool
            held = hit_tables[g] if hit is not None else request.block_tables[g]
            missing = max(0, num_blocks - len(held))
            # cached blocks of the hit that nobody holds leave the free queue
            reused_free = sum(b is not None and pool.blocks[b].ref_cnt == 0 for b in held) if hit else 0
            shared = self._shared_block(request, start, g) if hit is None else None
            if not pool.can_allocate(missing + reused_free + (shared is not None)):
                return False
            plan.append((missing, shared))
        if hit is not None:
            request.block_tables = [list(table) for table in hit_tables]
            request.block_hashes = list(hit.block_hashes)
            for group, table in zip(self.groups, hit_tables):
                reused = [b for b in table if b is not None]
                if reused:
                    group.pool.touch(reused, request.request_id)
        for g, (missing, shared) in enumerate(plan):
            if shared is not None:
                self._copy_on_write(request, shared, g)
            if missing:
                request.block_tables[g] += self.groups[g].pool.allocate(missing, request.request_id)
        self.cache_full_blocks(request, start + num_new_tokens)
        return True

    def drop_outside_window(self, request: Request) -> None:
        """Each sliding group gives back the blocks of `request` that no query to come will read
        (a "slide" event, then "free"); their entries become None. Given-back entries are always
        the first ones, so only the newly left behind are looked at."""
        for g in self.sliding:
            group, table = self.groups[g], request.block_tables[g]
            first = min(group.first_needed_block(request.num_computed_tokens, self.block_size), len(table))
            start = first
            while start > 0 and table[start - 1] is not None:
                start -= 1
            if start < first:
                left_behind = table[start:first]
                group.pool.note("slide", request.request_id, left_behind)
                group.pool.free(left_behind, request.request_id)
                table[start:first] = [None] * (first - start)

    def can_append(self, request: Request, num_new_tokens: int) -> bool:
        """Would a running request's allocate_slots(request, num_new_tokens) fit? Changes nothing."""
        needed = blocks_needed(request.num_computed_tokens + num_new_tokens, self.block_size)
        return all(group.pool.can_allocate(needed - len(table))
                   for group, table in zip(self.groups, request.block_tables))

    def _shared_block(self, request: Request, start: int, group: int = 0) -> int | None:
        """Index of the block that token `start` goes into, if other samples share it."""
        index, table = start // self.block_size, request.block_tables[group]
        if index < len(table) and self.groups[group].pool.blocks[table[index]].ref_cnt > 1:
            return index
        return None

    def _copy_on_write(self, request: Request, index: int, group: int = 0) -> None:
        """Give `request` its own copy of a shared block before it writes into it."""
        pool, table = self.groups[group].pool, request.block_tables[group]
        shared = table[index]
        (own,) = pool.allocate(1, request.request_id)
        layers = self.groups[group].layers if len(self.groups) > 1 else None  # other groups own the other layers
        num_bytes = self.cache.copy_blocks([shared], [own], layers) if self.cache is not None else 0
        pool.note("copy", request.request_id, [shared, own], num_bytes)
        pool.free([shared], request.request_id)
        table[index] = own

    def fork(self, parent: Request, child: Request) -> None:
        """The child sample shares every block of its parent: ref counts go up, nothing is copied."""
        for group, table in zip(self.groups, parent.block_tables):
            group.pool.share([b for b in table if b is not None], child.request_id)
        child.block_tables = [list(table) for table in parent.block_tables]
        child.block_hashes = list(parent.block_hashes)

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
            if len(self.groups) == 1 and request.block_table[i] is not None:
                request.block_hashes.append(self.pool.cache_full_block(request.block_table[i], parent, block_tokens))
                continue
            for group, table in zip(self.groups, request.block_tables):  # the same hash in every group
                if table[i] is not None:  # not yet left behind by its window
                    group.pool.cache_full_block(table[i], parent, block_tokens)
            request.block_hashes.append(hash_block(parent, block_tokens))

    def uncache_unwritten(self, request: Request) -> None:
        """A step that ran `request` failed: the blocks it was filling may hold partial keys and
        values, so they leave the prefix cache (the blocks before them were written earlier)."""
        for group, table in zip(self.groups, request.block_tables):
            group.pool.uncache(table[request.num_computed_tokens // self.block_size:])

    def truncate(self, request: Request, num_tokens: int) -> list[int]:
        """Keep the keys and values of the first `num_tokens` tokens only (a speculative rollback):
        blocks past them return to the pool. Returns the freed block ids."""
        keep = blocks_needed(num_tokens, self.block_size)
        assert len(request.block_hashes) <= keep, "a cached block must never hold draft tokens"
        freed = request.block_table[keep:]  # the first group's, for the record
        for group, table in zip(self.groups, request.block_tables):
            if table[keep:]:  # past the accepted tokens: never left behind by a window
                group.pool.note("rollback", request.request_id, table[keep:])
                group.pool.free(table[keep:], request.request_id)
                del table[keep:]
        request.num_computed_tokens = num_tokens
        request.high_water = min(request.high_water, num_tokens)  # rejected drafts are not "recomputed" later
        return freed

    def free(self, request: Request, reason: str = "finish") -> None:
        """Drop the request's blocks (reason: "finish" or "preempt", kept as an event)."""
        for group, table in zip(self.groups, request.block_tables):
            held = [b for b in table if b is not None] if self.sliding else table
            if held:
                group.pool.note(reason, request.request_id, held)
                group.pool.free(held, request.request_id)
        if request.request_id in self.swapped:  # finished (aborted) while swapped out
            self.swap.free(self.swapped.pop(request.request_id))
        request.block_tables, request.block_hashes = [[] for _ in self.groups], []
