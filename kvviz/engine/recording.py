"""Building the records (records.py) of what an engine step did, from the engine's live state.

    record = step_record(engine, chunks, sampled, forward_s, step_s, trace, drafts, finished)
    memory = memory_record(engine)   # the cache's bytes: allocated, in used blocks, holding tokens

A record's cost follows the live requests and the events, not the pool: only record_blocks
(off by default) lists every block.
"""

from __future__ import annotations

import numpy as np
import torch

from kvviz.engine.records import (
    BlockRecord,
    ChunkRecord,
    DraftRecord,
    EventRecord,
    LayerGroupRecord,
    MemoryRecord,
    RequestRecord,
    StepRecord,
    TraceRecord,
)
from kvviz.engine.request import Request
from kvviz.engine.runner import Trace
from kvviz.engine.scheduler import ScheduledChunk


def step_record(engine, chunks: list[ScheduledChunk], sampled: list[tuple[int, int]], forward_s: float,
                step_s: float, trace: TraceRecord | None, drafts: list[DraftRecord],
                finished: list[Request]) -> StepRecord:
    """What this step did: `finished` are the requests that finished since the last record."""
    running, pool = engine.scheduler.running, engine.pool
    live = running + [r for r in finished if r not in running]
    requests = [request_record(engine, r) for r in live] + [waiting_record(engine, r) for r in engine.scheduler.waiting]
    requests.sort(key=lambda r: r.request_id)
    events = pool.drain_events() if pool is not None else []
    event_records = [EventRecord(e.kind, e.request_id, e.block_ids, e.num_bytes, e.cpu_slots) for e in events]
    for g, group in enumerate(engine.layer_groups[1:], start=1):  # the first group's pool is engine.pool
        event_records += [EventRecord(e.kind, e.request_id, e.block_ids, e.num_bytes, e.cpu_slots, group=g)
                          for e in group.pool.drain_events()]
    blocks = None
    if engine.record_blocks and pool is not None:  # the whole pool: O(num_blocks), off by default
        blocks = [BlockRecord(b.block_id, b.ref_cnt, sorted(b.owners), b.block_hash is not None,
                              b.ref_cnt == 0) for b in pool.blocks]
    swap = engine.kv.swap if engine.kv else None
    return StepRecord(
        step=engine.step_index,
        chunks=[ChunkRecord(c.request.request_id, c.kind, c.start, c.num_tokens, c.token_ids, c.num_drafts)
                for c in chunks],
        sampled=sampled, requests=requests,
        events=event_records,
        num_free_blocks=pool.num_free_blocks if pool else 0,
        num_cached_blocks=len(pool.cached_blocks) if pool else 0,
        memory=memory_record(engine), blocks=blocks, forward_s=forward_s, step_s=step_s, trace=trace,
        drafts=drafts, num_free_swap_slots=swap.num_free_slots if swap else 0,
        layer_groups=[LayerGroupRecord(g.name, g.window, list(g.layers), g.pool.num_blocks, g.pool.num_free_blocks,
                                       len(g.pool.cached_blocks)) for g in engine.layer_groups])


def request_record(engine, r: Request) -> RequestRecord:
    return RequestRecord(r.request_id, r.status.value, r.num_prompt_tokens,
                         r.num_computed_tokens if engine.use_cache else 0, r.num_cached_tokens,
                         list(r.block_table), list(r.output_token_ids), r.num_preemptions, r.finish_reason,
                         r.parent_id, r.num_recomputed_tokens, engine.kv is not None and engine.kv.is_swapped(r),
                         r.num_looked_up_tokens, r.num_hit_tokens,
                         [list(table) for table in r.block_tables] if engine.layer_groups else [])


def waiting_record(engine, r: Request) -> RequestRecord:
    """A waiting request changes only when it is preempted: reuse its record until then."""
    key = (r.num_preemptions, len(r.output_token_ids))
    if getattr(r, "record_key", None) != key:
        r.record_key, r.last_record = key, request_record(engine, r)
    return r.last_record


def trace_record(trace: Trace, request_id: int, logits: torch.Tensor,
                 sampling_chunks: list[ScheduledChunk]) -> TraceRecord:
    """The traced request's keys, values and attention in this step (runner.py's Trace), and
    its row of `logits` (S, V), one row per sampling chunk, if it sampled."""
    row = next((i for i, c in enumerate(sampling_chunks) if c.request.request_id == request_id), None)
    return TraceRecord(
        request_id=request_id,
        keys=torch.stack(trace.keys).numpy(),  # (layers, tokens, kv_heads, head_dim)
        values=torch.stack(trace.values).numpy(),
        attention=torch.stack(trace.attention).numpy(),  # (layers, heads, tokens)
        logits=None if row is None else logits[row].float().cpu().numpy().astype(np.float32),  # (V,)
        prompt_attention=torch.stack(trace.prompt_attention).numpy() if trace.prompt_attention else None,
        latents=torch.stack(trace.latents).numpy() if trace.latents else None)  # MLA only


def memory_record(engine) -> MemoryRecord:
    """The cache's bytes now: allocated, in used blocks, holding tokens, and the slack between."""
    shape = engine.cache_shape
    if not engine.use_cache:
        return MemoryRecord(0, 0, 0, 0, [0] * shape.num_layers, shape.bytes_per_token, shape.kv_cache_dtype)
    if engine.layer_groups:
        return _grouped_memory(engine)
    block_bytes, block_size = engine.cache.bytes_per_block, engine.block_size
    used_blocks = engine.pool.num_used_blocks
    # shared blocks count once: bytes holding tokens = used blocks minus the empty slots of
    # each distinct last block (forked samples share theirs until one writes)
    slack_by_block = {r.block_table[-1]: len(r.block_table) * block_size - r.num_computed_tokens
                      for r in engine.scheduler.running if r.block_table}
    slack_slots = sum(slack_by_block.values())
    used_bytes = used_blocks * block_bytes
    per_layer = used_blocks * block_bytes // shape.num_layers
    return MemoryRecord(
        allocated_bytes=engine.cache.nbytes, used_block_bytes=used_bytes,
        token_bytes=used_bytes - slack_slots * shape.bytes_per_token,
        slack_bytes=slack_slots * shape.bytes_per_token,
        layer_used_bytes=[per_layer] * shape.num_layers, bytes_per_token=shape.bytes_per_token,
        kv_cache_dtype=shape.kv_cache_dtype)


def _grouped_memory(engine) -> MemoryRecord:
    """memory_record with layer groups: a block of a group holds only that group's layers, so a
    sliding layer's used bytes stop growing once its window is full."""
    shape, block_size = engine.cache_shape, engine.block_size
    layer_block_bytes = engine.cache.bytes_per_block // shape.num_layers  # one block, one layer
    layer_token_bytes = shape.bytes_per_token // shape.num_layers
    layer_used_bytes = [0] * shape.num_layers
    slack_bytes = 0
    for g, group in enumerate(engine.layer_groups):
        for layer in group.layers:
            layer_used_bytes[layer] = group.pool.num_used_blocks * layer_block_bytes
        slack_by_block = {r.block_tables[g][-1]: len(r.block_tables[g]) * block_size - r.num_computed_tokens
                          for r in engine.scheduler.running if r.block_tables[g]}
        slack_bytes += sum(slack_by_block.values()) * layer_token_bytes * len(group.layers)
    used_bytes = sum(layer_used_bytes)
    return MemoryRecord(
        allocated_bytes=engine.cache.nbytes, used_block_bytes=used_bytes, token_bytes=used_bytes - slack_bytes,
        slack_bytes=slack_bytes, layer_used_bytes=layer_used_bytes, bytes_per_token=shape.bytes_per_token,
        kv_cache_dtype=shape.kv_cache_dtype)
