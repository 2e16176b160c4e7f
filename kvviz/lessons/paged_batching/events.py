"""The block pool's events in words, as the Paged lesson's tables show them to a class.

The records keep the engine's kinds ("prefix_hit", "swap_out", ...): files and tests read those.
"""

from __future__ import annotations

from kvviz.engine.records import StepRecord

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
