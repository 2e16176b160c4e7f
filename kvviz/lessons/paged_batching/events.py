"""The block pool's events in words, as the Paged lesson's tables show them to a class.

The records keep the engine's kinds ("prefix_hit", "swap_out", ...): files and tests read those.
"""

from __future__ import annotations

from kvviz.engine.records import BlockRecord, PoolReplay, StepRecord, first_pool_size

EVENT_WORDS = {
    "allocate": "took free blocks", "prefix_hit": "found in the prefix cache", "fork": "forked: shares the blocks",
    "cache": "full: added to the prefix cache", "evict": "evicted from the prefix cache",
    "free": "gave blocks back", "finish": "finished", "preempt": "preempted",
    "copy": "copied (copy-on-write)", "swap_out": "swapped out", "swap_in": "swapped in",
    "swap_full": "swap space full: recomputed", "rollback": "rolled back",
}


def event_words(kind: str) -> str:
    """An event kind as words; a kind from a newer file than this code still reads as words."""
    return EVENT_WORDS.get(kind, kind.replace("_", " "))


def event_rows(record: StepRecord, labels: dict[int, str]) -> list[dict]:
    """One row per event of the step: what happened, to which request, which physical blocks."""
    return [{"event": event_words(event.kind), "request": labels.get(event.request_id, "—"),
             "blocks": ", ".join(map(str, event.block_ids))} for event in record.events]


class PoolSteps:
    """The pool at a step, for a run with records, num_blocks and a `pool` field (PoolReplay | None)
    kept between calls, so a step forward costs one step's events (records never change once made)."""

    def pool_blocks(self, step: int) -> list[BlockRecord]:
        """Every physical block after `step`, rebuilt from the events of the records so far."""
        return self._pool().blocks(self.records, step)

    def held_blocks(self, step: int) -> list[BlockRecord]:
        """The blocks held or holding a cached prefix after `step` (the stage's pool)."""
        return self._pool().held(self.records, step)

    def _pool(self) -> PoolReplay:
        if self.pool is None or self.pool.step < 0:  # its size comes from the first record
            self.pool = PoolReplay(first_pool_size(self.records, self.num_blocks))
        return self.pool
