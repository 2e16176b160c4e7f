"""The scheduler: which requests run which tokens this step (continuous batching).

Every step has a token budget (`max_num_batched_tokens`). Running requests go first, oldest
first: a decode costs one token, an unfinished prompt a chunk of what is left (chunked prefill).
Then waiting requests join while budget, sequence slots and blocks last, starting from the
longest cached prefix of their prompt. When a running request needs a block and none is free,
the newest running request is preempted: its blocks are freed and it waits to be recomputed
(or, in preemption mode "swap", its blocks are copied to CPU memory and back when it resumes).
Which blocks a request holds is the KV manager's business (kv_manager.py), not the scheduler's.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from kvviz.engine.kv_manager import KVCacheManager
from kvviz.engine.request import Request, Status


@dataclass(slots=True)
class ScheduledChunk:
    """`num_tokens` tokens of `request`, from position `start`, run this step."""

    request: Request
    start: int
    num_tokens: int  # the drafts included
    draft_token_ids: list[int] = field(default_factory=list)  # speculative guesses run after the last token

    @property
    def end(self) -> int:
        return self.start + self.num_tokens

    @property
    def num_drafts(self) -> int:
        return len(self.draft_token_ids)

    @property
    def token_ids(self) -> list[int]:
        """The tokens this chunk runs: the request's own, then its drafts."""
        return self.request.token_slice(self.start, self.end - self.num_drafts) + self.draft_token_ids

    @property
    def samples(self) -> bool:
        """Does this chunk reach the request's last token, so that a new token is sampled?"""
        return self.end - self.num_drafts == self.request.num_tokens

    @property
    def kind(self) -> str:
        is_decode = self.num_tokens == 1 + self.num_drafts and self.start >= self.request.num_prompt_tokens
        return "decode" if is_decode else "prefill"


class Scheduler:
    def __init__(self, kv: KVCacheManager | None, max_num_seqs: int, max_num_batched_tokens: int,
                 enable_chunked_prefill: bool = True):
        self.kv = kv  # None: no cache, every step recomputes every token
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.enable_chunked_prefill = enable_chunked_prefill
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.num_preemptions = 0

    def add(self, request: Request) -> None:
        self.waiting.append(request)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> list[ScheduledChunk]:
        if self.kv is None:
            return self._schedule_without_cache()
        budget = self.max_num_batched_tokens
        chunks: list[ScheduledChunk] = []
        preempted = False
        index = 0
        while index < len(self.running) and budget > 0:
            request = self.running[index]
            num_new = min(request.num_tokens - request.num_computed_tokens, budget)
            drafts = self._drafts_that_fit(request, num_new, budget)
            num_new += len(drafts)
            while not self.kv.allocate_slots(request, num_new):
                victim = self.running.pop()  # the newest request gives its blocks back
                self.preempt(victim)
                preempted = True
                if victim is request:
                    break
            else:
                chunks.append(ScheduledChunk(request, request.num_computed_tokens, num_new, drafts))
                budget -= num_new
                index += 1
                continue
            break
        # new requests join only when nothing had to be preempted this step
        while self.waiting and budget > 0 and not preempted and len(self.running) < self.max_num_seqs:
            request = self.waiting[0]
            if len(self.running) + request.num_seqs > self.max_num_seqs and self.running:
                break  # n parallel samples need n sequence slots once they fork
            swapped = self.kv.is_swapped(request)  # its blocks wait in CPU memory: no prefix lookup
            hit = None if swapped else self.kv.find_prefix(request)
            start = request.num_computed_tokens if swapped else hit.num_tokens
            needed = request.num_tokens - start
            num_new = min(needed, budget)
            # without chunked prefill a prompt waits for a step with room for all of it; only a
            # recompute after preemption too long for any step runs in chunks
            if num_new < needed <= self.max_num_batched_tokens and not self.enable_chunked_prefill:
                break
            if not (self.kv.swap_in(request, num_new) if swapped else self.kv.allocate_slots(request, num_new, hit)):
                break
            self.waiting.popleft()
            if not swapped:
                request.num_computed_tokens = request.num_cached_tokens = hit.num_tokens
                request.num_looked_up_tokens += request.num_tokens
                request.num_hit_tokens += hit.num_tokens
            request.status = Status.RUNNING
            self.running.append(request)
            chunks.append(ScheduledChunk(request, start, num_new))
            budget -= num_new
        return chunks

    def _drafts_that_fit(self, request: Request, num_new: int, budget: int) -> list[int]:
        """A decode's speculative drafts, when the step's budget and the free blocks hold them:
        drafts are a bet, so they never cost another request its blocks."""
        drafts = request.draft_token_ids[:budget - num_new]
        if drafts and not self.kv.can_append(request, num_new + len(drafts)):
            return []
        return drafts

    def preempt(self, request: Request) -> None:
        """Take a running request's blocks back: swapped out to CPU memory (preemption mode
        "swap", while the swap space has room), else freed, to be recomputed when it runs again."""
        if not self.kv.swap_out(request):
            self.kv.free(request, "preempt")
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
        elif request in self.waiting:
            self.waiting.remove(request)
        if self.kv is not None:
            self.kv.free(request, "finish")
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
