"""The block pool: fixed-size physical blocks, reference counts, and the prefix cache.

A block holds the keys and values of `block_size` consecutive tokens of one or more requests.
Free blocks wait in an LRU queue. A full block gets a hash chained from its parent's hash and
its own tokens, so a later request whose prompt starts with the same tokens can reuse it (a
prefix hit) instead of recomputing. A cached block whose last owner finishes stays in the
free queue with its contents intact, and is evicted only when a new block is needed and it is
the least recently freed.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field


# host memory one block costs outside the cache tensor: its Block, empty owner set and free-queue
# entry (459 bytes measured with tracemalloc over a pool of 10**6 blocks); the engine counts it
# before building a pool
BLOCK_BOOKKEEPING_BYTES = 460


def blocks_needed(num_tokens: int, block_size: int) -> int:
    """Blocks that hold num_tokens tokens: the last one may be partly empty (ceil(tokens / block_size))."""
    return -(-num_tokens // block_size)


def hash_block(parent_hash: int | None, token_ids: tuple[int, ...]) -> int:
    """Chained hash: a block's identity depends on every token before it, not just its own."""
    return hash((parent_hash, token_ids))


@dataclass(slots=True)
class Block:
    block_id: int
    ref_cnt: int = 0
    block_hash: int | None = None  # set once the block is full and registered in the cache
    parent_hash: int | None = None
    token_ids: tuple[int, ...] | None = None  # kept to verify a hash hit against the tokens
    owners: set[int] = field(default_factory=set)


@dataclass(slots=True)
class PoolEvent:
    kind: str  # "allocate" | "free" | "prefix_hit" | "evict" | "cache" | "preempt" | "finish"
    #          | "fork" | "copy" | "swap_out" | "swap_in" | "swap_full"
    request_id: int | None
    block_ids: list[int]
    num_bytes: int = 0  # K/V bytes moved ("copy", "swap_out", "swap_in")
    cpu_slots: list[int] = field(default_factory=list)  # swap space slots ("swap_out", "swap_in")


class BlockPool:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        assert num_blocks > 0 and block_size > 0
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_queue: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self.cached_blocks: dict[int, int] = {}  # block hash -> block id
        self.events: list[PoolEvent] = []
        self.num_evictions = 0

    # ---- queries -------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return len(self.free_queue)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self.free_queue)

    def can_allocate(self, num_blocks: int) -> bool:
        return num_blocks <= len(self.free_queue)

    def find_cached_prefix(self, token_ids: list[int]) -> tuple[list[int], list[int]]:
        """The longest run of cached full blocks that starts the sequence.

        Returns (block_ids, block_hashes). The hit never covers the last token: that token
        must run through the model so that there are logits to sample from.
        """
        if not self.enable_prefix_caching:
            return [], []
        block_ids, hashes, parent = [], [], None
        for i in range((len(token_ids) - 1) // self.block_size):
            tokens = tuple(token_ids[i * self.block_size:(i + 1) * self.block_size])
            block_hash = hash_block(parent, tokens)
            block_id = self.cached_blocks.get(block_hash)
            if block_id is None:
                break
            block = self.blocks[block_id]
            if block.token_ids != tokens or block.parent_hash != parent:  # a hash collision
                break
            block_ids.append(block_id)
            hashes.append(block_hash)
            parent = block_hash
        return block_ids, hashes

    # ---- changes -------------------------------------------------------------------------
    def allocate(self, num_blocks: int, owner: int) -> list[int]:
        """Take `num_blocks` from the front of the free queue, evicting cached ones."""
        assert self.can_allocate(num_blocks), "the scheduler checks can_allocate first"
        block_ids = []
        for _ in range(num_blocks):
            block_id, _ = self.free_queue.popitem(last=False)
            block = self.blocks[block_id]
            assert block.ref_cnt == 0
            if block.block_hash is not None:
                self._evict(block)
            block.ref_cnt = 1
            block.owners.add(owner)
            block_ids.append(block_id)
        self.events.append(PoolEvent("allocate", owner, block_ids))
        return block_ids

    def touch(self, block_ids: list[int], owner: int) -> None:
        """Share cached blocks with `owner` (a prefix hit)."""
        for block_id in block_ids:
            block = self.blocks[block_id]
            if block.ref_cnt == 0:
                del self.free_queue[block_id]
            block.ref_cnt += 1
            block.owners.add(owner)
        self.events.append(PoolEvent("prefix_hit", owner, list(block_ids)))

    def share(self, block_ids: list[int], owner: int) -> None:
        """A forked sample takes a reference to its parent's blocks (no copy until it writes)."""
        for block_id in block_ids:
            block = self.blocks[block_id]
            assert block.ref_cnt > 0, "only held blocks are shared"
            block.ref_cnt += 1
            block.owners.add(owner)
        self.events.append(PoolEvent("fork", owner, list(block_ids)))

    def free(self, block_ids: list[int], owner: int) -> None:
        """Drop `owner`'s references, last block first.

        Freeing in reverse puts a request's tail at the front of the eviction order, so the
        shared head of a prompt (its first blocks) stays cached longest.
        """
        for block_id in reversed(block_ids):
            block = self.blocks[block_id]
            assert block.ref_cnt > 0 and owner in block.owners
            block.ref_cnt -= 1
            block.owners.discard(owner)
            if block.ref_cnt == 0:
                self.free_queue[block_id] = None
        self.events.append(PoolEvent("free", owner, list(reversed(block_ids))))

    def cache_full_block(self, block_id: int, parent_hash: int | None,
                         token_ids: tuple[int, ...]) -> int:
        """Register a block that just became full; returns its chained hash."""
        block_hash = hash_block(parent_hash, token_ids)
        if not self.enable_prefix_caching:
            return block_hash
        block = self.blocks[block_id]
        if block.block_hash is None and block_hash not in self.cached_blocks:
            block.block_hash, block.parent_hash, block.token_ids = block_hash, parent_hash, token_ids
            self.cached_blocks[block_hash] = block_id
            self.events.append(PoolEvent("cache", next(iter(block.owners), None), [block_id]))
        return block_hash

    def _evict(self, block: Block) -> None:
        del self.cached_blocks[block.block_hash]
        block.block_hash = block.parent_hash = block.token_ids = None
        self.num_evictions += 1
        self.events.append(PoolEvent("evict", None, [block.block_id]))

    def uncache(self, block_ids: list[int]) -> None:
        """Take blocks out of the prefix cache (their contents can no longer be trusted)."""
        for block_id in block_ids:
            block = self.blocks[block_id]
            if block.block_hash is not None and self.cached_blocks.get(block.block_hash) == block_id:
                self._evict(block)

    def reset_prefix_cache(self) -> None:
        """Forget every cached hash (used blocks keep their contents)."""
        for block in self.blocks:
            block.block_hash = block.parent_hash = block.token_ids = None
        self.cached_blocks.clear()

    def note(self, kind: str, request_id: int | None, block_ids: list[int], num_bytes: int = 0,
             cpu_slots: list[int] | None = None) -> None:
        """Record why blocks change hands or move (a "preempt" or "finish" before a free, a "copy")."""
        self.events.append(PoolEvent(kind, request_id, list(block_ids), num_bytes, list(cpu_slots or [])))

    def drain_events(self) -> list[PoolEvent]:
        events, self.events = self.events, []
        return events

    def check_invariants(self, owners_by_block: dict[int, set[int]] | None = None) -> None:
        """Cheap consistency checks, for tests: no leaks, counts add up."""
        assert self.num_free_blocks + sum(b.ref_cnt > 0 for b in self.blocks) == self.num_blocks
        for block in self.blocks:
            assert block.ref_cnt == len(block.owners)
            assert (block.ref_cnt == 0) == (block.block_id in self.free_queue)
            if owners_by_block is not None:
                assert block.owners == owners_by_block.get(block.block_id, set())
        for block_hash, block_id in self.cached_blocks.items():
            assert self.blocks[block_id].block_hash == block_hash
