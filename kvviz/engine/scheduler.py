"""The scheduler: which requests run which tokens this step (continuous batching).

Every step has a token budget (`max_num_batched_tokens`). Running requests go first, oldest
first: a decode costs one token, an unfinished prompt a chunk of what is left (chunked prefill).
Then waiting requests join while budget, sequence slots and blocks last, starting from the
longest cached prefix of their prompt. When a running request needs a block and none is free,
the newest running request is preempted: its blocks are freed and it waits to be recomputed.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from kvviz.engine.block_pool import BlockPool, PoolEvent
from kvviz.engine.request import Request, Status


@dataclass(slots=True)
class ScheduledChunk:
    """`num_tokens` tokens of `request`, from position `start`, run this step."""

    request: Request
    start: int
    num_tokens: int

    @property
    def end(self) -> int:
        return self.start + self.num_tokens

    @property
    def samples(self) -> bool:
        """Does this chunk reach the request's last token, so that a new token is sampled?"""
        return self.end == self.request.num_tokens

    @property
    def kind(self) -> str:
        is_decode = self.num_tokens == 1 and self.start >= self.request.num_prompt_tokens
        return "decode" if is_decode else "prefill"


def blocks_needed(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


class Scheduler:
    def __init__(self, pool: BlockPool | None, max_num_seqs: int, max_num_batched_tokens: int,
                 use_cache: bool = True, enable_chunked_prefill: bool = True):
        self.pool = pool
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.use_cache = use_cache
        self.enable_chunked_prefill = enable_chunked_prefill
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.num_preemptions = 0

    def add(self, request: Request) -> None:
        self.waiting.append(request)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> list[ScheduledChunk]:
        if not self.use_cache:
            return self._schedule_without_cache()
        budget = self.max_num_batched_tokens
        chunks: list[ScheduledChunk] = []
        preempted = False
        index = 0
        while index < len(self.running) and budget > 0:
            request = self.running[index]
            num_new = min(request.num_tokens - request.num_computed_tokens, budget)
            while not self._reserve(request, request.num_computed_tokens + num_new):
                victim = self.running.pop()  # the newest request gives its blocks back
                self.preempt(victim)
                preempted = True
                if victim is request:
                    break
            else:
                chunks.append(ScheduledChunk(request, request.num_computed_tokens, num_new))
                self._cache_full_blocks(request, request.num_computed_tokens + num_new)
                budget -= num_new
                index += 1
                continue
            break
        # new requests join only when nothing had to be preempted this step
        while (self.waiting and budget > 0 and not preempted
               and len(self.running) < self.max_num_seqs):
            chunk = self._admit(self.waiting[0], budget)
            if chunk is None:
                break
            self.waiting.popleft()
            chunks.append(chunk)
            budget -= chunk.num_tokens
        return chunks

    def _admit(self, request: Request, budget: int) -> ScheduledChunk | None:
        """Start `request` from its longest cached prefix, if its first chunk's blocks fit."""
        pool = self.pool
        hit_blocks, hit_hashes = pool.find_cached_prefix(request.all_token_ids)
        num_cached = len(hit_blocks) * pool.block_size
        num_new = min(request.num_tokens - num_cached, budget)
        if num_new < request.num_tokens - num_cached and not self.enable_chunked_prefill:
            return None
        num_fresh = blocks_needed(num_cached + num_new, pool.block_size) - len(hit_blocks)
        reused_free = sum(pool.blocks[b].ref_cnt == 0 for b in hit_blocks)  # leave the free queue
        if not pool.can_allocate(num_fresh + reused_free):
            return None
        if hit_blocks:
            pool.touch(hit_blocks, request.request_id)
        request.block_table = hit_blocks + pool.allocate(num_fresh, request.request_id)
        request.block_hashes = hit_hashes
        request.num_computed_tokens = request.num_cached_tokens = num_cached
        request.status = Status.RUNNING
        self.running.append(request)
        self._cache_full_blocks(request, num_cached + num_new)
        return ScheduledChunk(request, num_cached, num_new)

    def _cache_full_blocks(self, request: Request, num_tokens: int) -> None:
        """Register the blocks this step fills, before the forward pass runs.

        A request admitted later in the same step can then hit them: in every layer the forward
        pass writes all new keys and values before any request reads its context, so the
        blocks hold their keys and values by the time the second request attends to them.
        """
        tokens = request.all_token_ids
        block_size = self.pool.block_size
        for i in range(len(request.block_hashes), num_tokens // block_size):
            parent = request.block_hashes[-1] if request.block_hashes else None
            block_tokens = tuple(tokens[i * block_size:(i + 1) * block_size])
            request.block_hashes.append(self.pool.cache_full_block(request.block_table[i], parent, block_tokens))

    def _reserve(self, request: Request, num_tokens: int) -> bool:
        """Make sure `request` has blocks for its first `num_tokens` tokens."""
        missing = blocks_needed(num_tokens, self.pool.block_size) - len(request.block_table)
        if missing <= 0:
            return True
        if not self.pool.can_allocate(missing):
            return False
        request.block_table += self.pool.allocate(missing, request.request_id)
        return True

    def preempt(self, request: Request) -> None:
        """Free a running request's blocks; it will recompute its tokens when it runs again."""
        self.pool.events.append(PoolEvent("preempt", request.request_id, list(request.block_table)))
        self.pool.free(request.block_table, request.request_id)
        request.block_table, request.block_hashes = [], []
        request.num_computed_tokens = 0
        request.status = Status.WAITING
        request.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(request)

    def finish(self, request: Request, reason: str) -> None:
        request.status = Status.FINISHED
        request.finish_reason = reason
        if request in self.running:
            self.running.remove(request)
        if self.pool is not None:
            self.pool.events.append(PoolEvent("finish", request.request_id, list(request.block_table)))
            self.pool.free(request.block_table, request.request_id)
        request.block_table = []

    def _schedule_without_cache(self) -> list[ScheduledChunk]:
        """No cache: every running request runs all of its tokens again, every step."""
        while self.waiting and len(self.running) < self.max_num_seqs:
            request = self.waiting.popleft()
            request.status = Status.RUNNING
            self.running.append(request)
        chunks, budget = [], self.max_num_batched_tokens
        for request in self.running:
            if chunks and request.num_tokens > budget:
                break
            chunks.append(ScheduledChunk(request, 0, request.num_tokens))
            budget -= request.num_tokens
        return chunks
