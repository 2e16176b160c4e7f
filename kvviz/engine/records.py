"""What one engine step did, as plain data. The UI draws only from these records, so a lesson
can be exported to JSON and replayed without a model."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np


@dataclass(slots=True)
class ChunkRecord:
    request_id: int
    kind: str  # "prefill" (a prompt chunk, or a recompute after preemption) | "decode"
    start: int  # position of the first token run
    num_tokens: int
    token_ids: list[int]
    num_drafts: int = 0  # of those, speculative drafts at the end (see DraftRecord)


@dataclass(slots=True)
class RequestRecord:
    """A request's state after the step."""

    request_id: int
    status: str  # "waiting" | "running" | "finished"
    num_prompt_tokens: int
    num_computed_tokens: int  # tokens whose K and V are in the cache
    num_cached_tokens: int  # of those, found in the prefix cache
    block_table: list[int | None]  # None: a block a sliding window gave back (an all-sliding model)
    output_token_ids: list[int]
    num_preemptions: int = 0
    finish_reason: str | None = None
    parent_id: int | None = None  # the request this sample forked from (SamplingParams.n > 1)
    num_recomputed_tokens: int = 0  # tokens run again after a recompute preemption
    swapped: bool = False  # its blocks wait in the swap space (preemption mode "swap")
    num_looked_up_tokens: int = 0  # over every admission (a recompute after preemption looks up again)
    num_hit_tokens: int = 0  # of those, found in the prefix cache
    # a model with sliding-window layers: every layer group's table (StepRecord.layer_groups), the first
    # being block_table; a block a sliding window left behind is None. Empty for other models
    group_block_tables: list[list[int | None]] = field(default_factory=list)


@dataclass(slots=True)
class DraftRecord:
    """One request's speculative decode in a step: the drafts, the model's verdict, the rollback."""

    request_id: int
    draft_token_ids: list[int]  # proposed by prompt lookup, run after the request's last token
    num_accepted: int  # how many drafts, from the first, equal the model's own greedy choice
    rolled_back_slots: list[int]  # cache slots that held the rejected drafts' K and V
    freed_block_ids: list[int]  # blocks the rollback left empty, back in the pool (a "rollback" event)


@dataclass(slots=True)
class BlockRecord:
    block_id: int
    ref_cnt: int
    owners: list[int]
    cached: bool  # holds a registered prefix hash
    free: bool


@dataclass(slots=True)
class EventRecord:
    kind: str  # allocate | free | prefix_hit | cache | evict | preempt | finish
    #            | fork | copy ([shared, own]) | swap_out | swap_in | swap_full (recompute instead)
    #            | slide (a sliding window left these blocks behind; a free follows)
    request_id: int | None
    block_ids: list[int]
    num_bytes: int = 0  # K/V bytes moved by a copy, swap_out or swap_in
    cpu_slots: list[int] = field(default_factory=list)  # swap space slots of a swap_out or swap_in
    group: int = 0  # the layer group whose pool the blocks belong to (StepRecord.layer_groups)


@dataclass(slots=True)
class LayerGroupRecord:
    """Layers that share a block table (engine/layer_groups.py), and their pool after the step."""

    name: str  # "full" | "sliding"
    window: int | None  # sliding window in tokens; None: the whole context
    layers: list[int]
    num_blocks: int
    num_free_blocks: int
    num_cached_blocks: int


@dataclass(slots=True)
class MemoryRecord:
    """Bytes of the paged cache after the step, measured from the engine's tensors and tables."""

    allocated_bytes: int  # every block of the pool, used or not (sum of the tensors' nbytes)
    used_block_bytes: int  # blocks held by at least one request
    token_bytes: int  # bytes that hold real tokens' K and V
    slack_bytes: int  # empty slots in each request's last block
    layer_used_bytes: list[int]  # per layer, blocks in use
    bytes_per_token: int  # values and, in an 8-bit cache, their scales
    kv_cache_dtype: str = "auto"  # EngineConfig.kv_cache_dtype: what the bytes above are stored in


@dataclass(slots=True)
class TraceRecord:
    """The traced request, read back through its block table after the step.

    In an 8-bit cache (MemoryRecord.kv_cache_dtype "int8" or "fp8") keys, values and latents are the
    dequantized ones (code x scale), the numbers attention read; the per-row scales are not kept apart,
    as they are folded into those numbers and their bytes are in MemoryRecord.bytes_per_token."""

    request_id: int
    keys: np.ndarray  # (layers, tokens, kv_heads, head_dim)
    values: np.ndarray  # (layers, tokens, kv_heads, head_dim)
    attention: np.ndarray  # (layers, heads, tokens): the newest token's attention weights
    logits: np.ndarray | None  # (vocab,) at the newest token, when it sampled
    prompt_attention: np.ndarray | None = None  # (layers, heads, tokens, tokens) at a prefill from 0
    latents: np.ndarray | None = None  # MLA: (layers, tokens, kv_lora_rank + qk_rope_head_dim), the rows cached;
    #                                    keys and values are then the ones rebuilt from them, per head


@dataclass(slots=True)
class StepRecord:
    step: int
    chunks: list[ChunkRecord]
    sampled: list[tuple[int, int]]  # (request_id, token_id)
    requests: list[RequestRecord]
    events: list[EventRecord]
    num_free_blocks: int
    num_cached_blocks: int
    memory: MemoryRecord
    blocks: list[BlockRecord] | None  # every block, only with record_blocks; else see pool_blocks()
    forward_s: float
    step_s: float
    trace: TraceRecord | None = None
    notes: list[str] = field(default_factory=list)
    drafts: list[DraftRecord] = field(default_factory=list)  # speculative decoding, per request
    num_free_swap_slots: int = 0  # preemption mode "swap": free slots of the CPU swap space
    layer_groups: list[LayerGroupRecord] = field(default_factory=list)  # only for models with sliding windows

    @property
    def num_tokens_run(self) -> int:
        return sum(c.num_tokens for c in self.chunks)

    def request(self, request_id: int) -> RequestRecord | None:
        return next((r for r in self.requests if r.request_id == request_id), None)

    def to_dict(self) -> dict:
        """The record as JSON-ready data. A lesson file reads it back, checked field by field, with
        kvviz.lessons.files.typed(data, StepRecord, where); a trace is not read back that way."""
        data = asdict(self)
        if self.trace is not None:
            data["trace"] = {name: _to_list(getattr(self.trace, name)) for name in
                             ("request_id", "keys", "values", "attention", "logits",
                                                                 "prompt_attention", "latents")}
        return data


def first_pool_size(records: list[StepRecord], num_blocks: int) -> int:
    """Blocks of the pool that block_table names: num_blocks, or with layer groups the first group's
    pool, which takes the bytes the sliding pools leave (engine/layer_groups.py) and may hold more."""
    return records[0].layer_groups[0].num_blocks if records and records[0].layer_groups else num_blocks


def pool_blocks(records: list[StepRecord], num_blocks: int) -> list[BlockRecord]:
    """Every block of the pool after the last of `records`, rebuilt from their events.

    `records` must start at the engine's first step. The engine does not list its whole pool
    each step (that would cost in proportion to the pool); a page that draws the pool asks this,
    or keeps a PoolReplay to walk the steps at the cost of one step's events each.
    """
    return PoolReplay(first_pool_size(records, num_blocks)).blocks(records, len(records) - 1)


class PoolReplay:
    """The pool after a chosen step, rebuilt from the records' events at the cost of the steps since
    the last call: a step forward replays one step's events, a step back starts again from the first."""

    def __init__(self, num_blocks: int):
        self.num_blocks = num_blocks  # the first group's pool (first_pool_size)
        self.step = -1  # the last step replayed
        self.owners: dict[int, set[int]] = {}  # held block -> requests holding it; a free block is absent
        self.cached: set[int] = set()  # blocks holding a registered prefix hash

    def advance(self, records: list[StepRecord], step: int) -> None:
        if step < self.step:
            self.__init__(self.num_blocks)
        for record in records[self.step + 1:step + 1]:
            for event in record.events:
                if event.group == 0:  # else another layer group's pool
                    self._apply(event)
        self.step = step

    def _apply(self, event: EventRecord) -> None:
        for block_id in event.block_ids:
            if event.kind in ("allocate", "prefix_hit", "fork"):
                self.owners.setdefault(block_id, set()).add(event.request_id)
            elif event.kind == "free" and block_id in self.owners:
                self.owners[block_id].discard(event.request_id)
                if not self.owners[block_id]:
                    del self.owners[block_id]
            elif event.kind == "cache":
                self.cached.add(block_id)
            elif event.kind == "evict":
                self.cached.discard(block_id)

    def held(self, records: list[StepRecord], step: int) -> list[BlockRecord]:
        """The blocks held or holding a cached prefix after `step`, by id: work in proportion to them."""
        self.advance(records, step)
        return [self._block(block_id) for block_id in sorted(self.owners.keys() | self.cached)]

    def blocks(self, records: list[StepRecord], step: int) -> list[BlockRecord]:
        """Every block of the pool after `step`."""
        self.advance(records, step)
        return [self._block(block_id) for block_id in range(self.num_blocks)]

    def _block(self, block_id: int) -> BlockRecord:
        owners = sorted(self.owners.get(block_id, ()))
        return BlockRecord(block_id, len(owners), owners, block_id in self.cached, not owners)


def _to_list(value):
    return value.tolist() if isinstance(value, np.ndarray) else value
