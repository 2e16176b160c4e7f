"""Turn a step's scheduled chunks into the flat tensors the forward pass needs."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from kvviz.engine.block_pool import blocks_needed
from kvviz.engine.fast_path import KernelMetadata
from kvviz.engine.kv_cache import slots_for
from kvviz.engine.runner import AttentionGroup, StepBatch, Trace
from kvviz.engine.scheduler import ScheduledChunk

# A traced prefill keeps every query's attention row (heads x T x T per layer) only up to this many prompt
# tokens: SmolLM2 at 1,500 tokens would read back 2.4 GB; longer prompts keep the newest row, as a decode does.
TRIANGLE_MOST_TOKENS = 128


def build_step_batch(chunks: list[ScheduledChunk], cache, block_size: int, device: torch.device,
                     trace_request_id: int | None = None, kernel=None, layer_groups=None) -> StepBatch:
    """Flatten the chunks into one row of N tokens and describe each request's attention.

    With a cache (cached mode), a chunk's keys are every token of its request up to the chunk's
    end, read from cache slots; without one (cache=None), only the chunk's own tokens. With the
    compiled kernel (engine/cpu/kernels.py), attention needs only each request's block table
    and each token's request and position; a traced step keeps the padded groups, whose
    gathered keys and values the trace keeps.

    layer_groups (layer_groups.py), for a model with sliding-window layers: each group gets its
    own view of the step (its block tables and slot mapping), and `layer_views[layer]` picks a
    layer's. Without them the step has one view, the batch itself.
    """
    if not layer_groups or (len(layer_groups) == 1 and layer_groups[0].window is None):
        return _build_view(chunks, cache, block_size, device, trace_request_id, kernel)
    views = [_build_view(chunks, cache, block_size, device, trace_request_id, kernel, g, group.window)
             for g, group in enumerate(layer_groups)]
    views[1:] = [dataclasses.replace(view, trace=views[0].trace) for view in views[1:]]  # one trace for all layers
    layer_views = [None] * sum(len(group.layers) for group in layer_groups)
    for view, group in zip(views, layer_groups):
        for layer in group.layers:
            layer_views[layer] = view
    views[0].layer_views = layer_views
    return views[0]


def _build_view(chunks: list[ScheduledChunk], cache, block_size: int, device: torch.device,
                trace_request_id: int | None, kernel, group: int = 0, window: int | None = None) -> StepBatch:
    """The step as layer group `group` sees it (see build_step_batch)."""
    input_ids, positions, slots, logits_index = [], [], [], []
    offsets = []  # where each chunk starts in the flat row
    for chunk in chunks:
        request = chunk.request
        offsets.append(len(input_ids))
        input_ids += chunk.token_ids
        positions += range(chunk.start, chunk.end)
        if cache is not None:
            slots += slots_for(request.block_tables[group], chunk.start, chunk.end, block_size)
        if chunk.samples:  # the last token, and every draft: each draft is checked against the logits before it
            logits_index += range(len(input_ids) - 1 - chunk.num_drafts, len(input_ids))

    as_long = dict(dtype=torch.long, device=device)
    position_ids = torch.tensor([positions], **as_long)  # (1, N)
    if kernel is not None and trace_request_id is None:
        return StepBatch(
            input_ids=torch.tensor([input_ids], **as_long), position_ids=position_ids,
            slot_mapping=torch.tensor(slots, **as_long), groups=[],
            logits_index=torch.tensor(logits_index, **as_long), cache=cache,
            kernel=kernel, kernel_metadata=_kernel_metadata(chunks, position_ids[0], block_size, group, window),
            window=window)

    decodes = [i for i, c in enumerate(chunks) if c.num_tokens == 1]
    prefills = [i for i, c in enumerate(chunks) if c.num_tokens > 1]
    groups, trace = [], None
    for members in (decodes, prefills):
        if not members:
            continue
        attention_group = _group(chunks, members, offsets, cache is not None, block_size, device, group, window)
        if trace_request_id is not None:
            for row, i in enumerate(members):
                if chunks[i].request.request_id == trace_request_id:
                    trace = Trace(group=len(groups), row=row, query=chunks[i].num_tokens - 1,
                                  num_keys=chunks[i].end if cache is not None else chunks[i].num_tokens,
                                  all_queries=cache is not None and chunks[i].start == 0
                                  and chunks[i].num_tokens <= TRIANGLE_MOST_TOKENS)
        groups.append(attention_group)

    return StepBatch(
        input_ids=torch.tensor([input_ids], **as_long),  # (1, N)
        position_ids=position_ids,  # (1, N)
        slot_mapping=torch.tensor(slots, **as_long) if cache is not None else None,  # (N,)
        groups=groups,
        logits_index=torch.tensor(logits_index, **as_long),  # (R,): 1 + drafts per sampling chunk
        cache=cache,
        trace=trace,
        window=window,
    )


def _kernel_metadata(chunks, positions: torch.Tensor, block_size: int, group: int = 0,
                     window: int | None = None) -> KernelMetadata:
    """Block tables (R, max_blocks), and per token its row and position: int32 for the kernel.
    Filled through numpy: torch.tensor of Python lists costs several times more per element.
    A sliding group's given-back entries (None) become block 0: the kernel reads only the window."""
    tables = [c.request.block_tables[group][:blocks_needed(c.end, block_size)] for c in chunks]
    if window is not None:
        tables = [[block or 0 for block in table] for table in tables]
    block_tables = np.zeros((len(chunks), max(len(t) for t in tables)), dtype=np.int32)  # padding: never read
    for row, table in enumerate(tables):
        block_tables[row, :len(table)] = table
    token_seq = np.repeat(np.arange(len(chunks), dtype=np.int32), [c.num_tokens for c in chunks])  # (N,)
    return KernelMetadata(block_tables=torch.from_numpy(block_tables), token_seq=torch.from_numpy(token_seq),
                          token_pos=positions.to(torch.int32))  # (N,)


def _group(chunks, members, offsets, cached: bool, block_size: int, device, group: int = 0,
           window: int | None = None) -> AttentionGroup:
    """Pad the member chunks to a common query length Tq and key length Lk. A sliding group's
    given-back entries (None) read block 0, whose keys the window mask excludes."""
    max_queries = max(chunks[i].num_tokens for i in members)
    max_keys = max(chunks[i].end if cached else chunks[i].num_tokens for i in members)
    query_span = torch.arange(max_queries)  # (Tq,)
    key_span = torch.arange(max_keys)  # (Lk,)
    starts = torch.tensor([chunks[i].start for i in members])  # (B,)
    lengths = torch.tensor([chunks[i].num_tokens for i in members])  # (B,)
    flat_start = torch.tensor([offsets[i] for i in members])  # (B,)
    # padded queries repeat the row's last real query, so no row is ever fully masked
    query_offset = torch.minimum(query_span[None, :], lengths[:, None] - 1)  # (B, Tq)
    query_index = flat_start[:, None] + query_offset  # (B, Tq)
    query_pos = starts[:, None] + query_offset  # (B, Tq)
    real_query = query_span[None, :] < lengths[:, None]  # (B, Tq)
    if cached:
        num_keys = starts + lengths  # (B,) the whole context so far
        max_blocks = blocks_needed(max_keys, block_size)
        tables = [chunks[i].request.block_tables[group][:max_blocks] for i in members]
        if window is not None:
            tables = [[block or 0 for block in table] for table in tables]
        tables = torch.tensor([t + [0] * (max_blocks - len(t)) for t in tables])  # (B, max_blocks); pad: block 0
        key_index = tables  # whole blocks are read at once; the masked tail of the last is slack
        block_span = torch.arange(max_blocks * block_size)  # (Lk,) with Lk rounded up to blocks
        key_pos = torch.where(block_span[None, :] < num_keys[:, None], block_span[None, :], -1)  # (B, Lk)
    else:
        key_index = flat_start[:, None] + torch.minimum(key_span[None, :], lengths[:, None] - 1)
        key_pos = torch.where(key_span[None, :] < lengths[:, None], key_span[None, :], -1)
    in_order = max_queries == 1 and members == list(range(len(chunks)))  # all decodes, nothing else
    return AttentionGroup(
        in_order=in_order, query_index=query_index.to(device), query_pos=query_pos.to(device),
        key_index=key_index.to(device), key_pos=key_pos.to(device),
        out_select=real_query.flatten().nonzero().squeeze(1).to(device),
        out_index=query_index[real_query].to(device),
    )
