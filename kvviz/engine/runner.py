"""The runner: one forward pass over every scheduled token of every request, flattened.

The model runs unchanged. kvviz owns attention: it registers `paged_attention` in transformers'
AttentionInterface and switches the model to it. Each attention layer then hands us its new
queries, keys and values (after rotary embeddings); we write the keys and values into the paged
cache through the slot mapping, read each request's whole context back through its block table,
and attend. A mask function that returns None keeps transformers from building a dense mask.

The tokens of a step sit in one row, with no padding: (1, N). On the CPU in float32 a compiled
kernel (cpu/paged_attention.c, loaded by cpu/kernels.py) then reads every request's keys and values
in place, in their blocks (an 8-bit cache's codes decoded row by row as they are read), and the
linear layers multiply with packed weights (cpu/packed_layers.py). Elsewhere (GPU, other dtypes, a
traced lesson step, attention="sdpa") attention gathers the blocks and works on two groups, padded
only inside each group: decodes (one query each) and prefill chunks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from kvviz.engine import fast_path
from kvviz.engine.step_context import engine_step, in_engine_step

ATTENTION_NAME = "kvviz_paged"


@dataclass
class AttentionGroup:
    """Requests padded together for attention: B rows, Tq queries and Lk keys per row."""

    query_index: torch.Tensor  # (B, Tq) token index in the flat step; padding repeats a real token
    query_pos: torch.Tensor  # (B, Tq) position of each query in its request
    key_index: torch.Tensor  # cached: (B, blocks) block table; no cache: (B, Lk) flat step index
    key_pos: torch.Tensor  # (B, Lk) position of each key; -1 marks padding
    out_select: torch.Tensor  # (M,) which of the B*Tq padded queries are real
    out_index: torch.Tensor  # (M,) their flat token index
    in_order: bool = False  # one query per row, rows in flat order: the group is the whole step
    masks: dict = field(default_factory=dict)  # built once per step, shared by every layer

    def mask(self, window: int | None) -> torch.Tensor:
        """(B, 1, Tq, Lk) bool: may query t see key l?"""
        if window not in self.masks:
            key_pos, query_pos = self.key_pos[:, None, :], self.query_pos[:, :, None]
            allowed = (key_pos >= 0) & (key_pos <= query_pos)  # (B, Tq, Lk)
            if window is not None:
                allowed &= key_pos > query_pos - window
            self.masks[window] = allowed[:, None]  # (B, 1, Tq, Lk)
        return self.masks[window]

    def packed_mask(self, window: int | None, group_size: int, dtype: torch.dtype | None) -> torch.Tensor:
        """The mask for attend(): repeated for the G query heads sharing a KV head, and as an
        additive bias (0 or -inf) of `dtype` when dtype is given, so SDPA need not convert it."""
        key = (window, group_size, dtype)
        if key not in self.masks:
            mask = self.mask(window)
            B, _, Tq, Lk = mask.shape
            packed = mask[:, :, None].expand(B, 1, group_size, Tq, Lk).reshape(B, 1, group_size * Tq, Lk)
            if dtype is not None:
                packed = torch.zeros(packed.shape, dtype=dtype,
                                     device=packed.device).masked_fill_(~packed, float("-inf"))
            self.masks[key] = packed  # (B, 1, G*Tq, Lk)
        return self.masks[key]


@dataclass
class Trace:
    """What tracing one request collects during the forward pass."""

    group: int
    row: int
    query: int  # index of the request's newest token within its row
    num_keys: int
    keys: list = field(default_factory=list)  # [layer] (tokens, kv_heads, head_dim)
    values: list = field(default_factory=list)
    attention: list = field(default_factory=list)  # [layer] (heads, tokens)
    all_queries: bool = False  # a short prefill from position 0: keep every query's row, the causal triangle
    prompt_attention: list = field(default_factory=list)  # [layer] (heads, tokens, tokens)
    latents: list = field(default_factory=list)  # MLA: [layer] (tokens, kv_lora_rank + qk_rope_head_dim), as cached


@dataclass
class StepBatch:
    """Everything attention needs for one step, built once and shared by every layer."""

    input_ids: torch.Tensor  # (1, N)
    position_ids: torch.Tensor  # (1, N)
    slot_mapping: torch.Tensor | None  # (N,) flat cache slot per token; None without a cache
    groups: list[AttentionGroup]
    logits_index: torch.Tensor  # (R,) flat index of each token whose logits are sampled (or check a draft)
    cache: object | None  # PagedKVCache, or None in no-cache mode
    trace: Trace | None = None
    kernel: object | None = None  # CpuKernels: attention reads the blocks in place
    kernel_metadata: object | None = None  # KernelMetadata: block tables, each token's request and position
    window: int | None = None  # the sliding window of the layer group whose block tables these are
    layer_views: list | None = None  # [layer] -> its layer group's StepBatch, with sliding-window layers


def attend(query, key, value, packed_mask, scaling, softcap=None) -> torch.Tensor:
    """Grouped-query attention without copying KV heads.

    query: (B, Tq, H, D); key, value: (B, Lk, KVH, D); packed_mask: (B, 1, G*Tq, Lk), bool, or
    an additive bias without softcap (AttentionGroup.packed_mask). Returns (B, Tq, H, D). The
    G = H / KVH query heads that share a KV head are stacked along the query axis, so each KV
    head is read once.
    """
    B, Tq, H, D = query.shape
    kv_heads = key.shape[2]
    group_size = H // kv_heads
    q = query.transpose(1, 2).reshape(B, kv_heads, group_size * Tq, D)  # (B, KVH, G*Tq, D)
    k = key.transpose(1, 2)  # (B, KVH, Lk, D)
    v = value.transpose(1, 2)  # (B, KVH, Lk, Dv)
    if softcap is None:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=packed_mask, scale=scaling)
    else:  # Gemma-2 caps its logits with tanh; SDPA cannot, so do it by hand
        scores = (q @ k.transpose(-1, -2)) * scaling  # (B, KVH, G*Tq, Lk)
        scores = torch.tanh(scores / softcap) * softcap
        scores = scores.masked_fill(~packed_mask, float("-inf"))
        out = scores.softmax(-1).to(v.dtype) @ v
    return out.reshape(B, H, Tq, -1).transpose(1, 2)  # (B, Tq, H, Dv)


def paged_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers calls this in every attention layer.

    query: (1, H, N, D); key, value: (1, KVH, N, D) for the N tokens of this step.
    Returns ((1, N, H, Dv), None).
    """
    batch: StepBatch | None = kwargs.get("kvviz_batch")
    if batch is None:  # someone else (e.g. model.generate) is running the shared model
        return sdpa_attention_forward(module, query, key, value, attention_mask,
                                      dropout=dropout, scaling=scaling, **kwargs)
    layer = module.layer_idx
    window = kwargs.get("sliding_window") or getattr(module, "sliding_window", None)
    if batch.layer_views is not None:  # layer groups (layer_groups.py): this layer's tables and slots
        batch = batch.layer_views[layer]
        if window != batch.window:
            raise ValueError(f"layer {layer} attends with sliding window {window}, but the engine read "
                             f"{batch.window} from the model's config and may have freed blocks it needs")
    softcap = kwargs.get("softcap")
    scaling = scaling if scaling is not None else query.shape[-1] ** -0.5
    q = query[0].transpose(0, 1)  # (N, H, D)
    k_new = key[0].transpose(0, 1)  # (N, KVH, D)
    v_new = value[0].transpose(0, 1)  # (N, KVH, Dv)
    if batch.cache is not None:
        batch.cache.write(layer, k_new, v_new, batch.slot_mapping)
    if batch.kernel is not None:  # every key is now in a block: read them there
        cache = batch.cache
        out = q.new_empty(q.shape)  # (N, H, D)
        scales = cache.layer_scales[layer] if cache.layer_scales is not None else None  # an 8-bit cache's
        batch.kernel(q, cache.key_cache[layer], cache.value_cache[layer], out,
                     batch.kernel_metadata, window, scaling, softcap, scales)
        return out.unsqueeze(0), None
    group_size = q.shape[1] // k_new.shape[1]
    out = None
    for group_id, group in enumerate(batch.groups):  # at most two: decodes, prefill chunks
        if batch.cache is not None:
            k, v = batch.cache.gather_blocks(layer, group.key_index)  # (B, Lk, KVH, D)
        else:
            k, v = k_new[group.key_index], v_new[group.key_index]  # (B, Lk, KVH, D)
        mask = group.packed_mask(window, group_size, None if softcap is not None else q.dtype)
        queries = q[:, None] if group.in_order else q[group.query_index]  # (B, Tq, H, D)
        group_out = attend(queries, k, v, mask, scaling, softcap)  # (B, Tq, H, Dv)
        if group.in_order:  # every token of the step, in order: no scatter needed
            out = group_out.flatten(0, 1)
        else:
            if out is None:
                out = q.new_empty(q.shape[0], q.shape[1], v_new.shape[-1])  # (N, H, Dv)
            out[group.out_index] = group_out.flatten(0, 1)[group.out_select]
        trace = batch.trace
        if trace is not None and trace.group == group_id:
            rows = slice(0, trace.query + 1) if trace.all_queries else slice(trace.query, trace.query + 1)
            _trace_layer(trace, q[group.query_index[trace.row, rows]], k[trace.row], v[trace.row],
                         group.mask(window)[trace.row, 0, rows], scaling, softcap,
                         _num_given_back(trace, window, batch.cache.block_size if batch.window is not None else 0))
    return out.unsqueeze(0), None


def _trace_layer(trace: Trace, query, key, value, mask, scaling, softcap, num_given_back: int = 0) -> None:
    """The traced request's queries against its keys: the newest query, or with all_queries every
    prompt query. query: (Tq, H, D); key: (Lk, KVH, D); mask: (Tq, Lk). The first num_given_back
    keys and values, which a sliding window gave back, are kept as zeros."""
    n = trace.num_keys
    key, value, mask = key[:n], value[:n], mask[:, :n]
    group_size = query.shape[1] // key.shape[1]
    keys_per_head = key.repeat_interleave(group_size, dim=1)  # (n, H, D)
    scores = torch.einsum("thd,nhd->htn", query.float(), keys_per_head.float()) * scaling  # (H, Tq, n)
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    weights = scores.masked_fill(~mask[None], float("-inf")).softmax(-1).cpu()  # (H, Tq, n)
    trace.attention.append(weights[:, -1])  # (H, n): the newest token's row
    if trace.all_queries:
        trace.prompt_attention.append(weights)
    keys, values = key.float().cpu(), value.float().cpu()
    if num_given_back:  # a sliding layer's blocks left behind: block 0 was read in their place
        keys, values = keys.clone(), values.clone()
        keys[:num_given_back] = values[:num_given_back] = 0
    trace.keys.append(keys)
    trace.values.append(values)


def _num_given_back(trace: Trace, window: int | None, block_size: int) -> int:
    """Leading keys of the traced request that its sliding group gave back before this step
    (layer_groups.py): the blocks before the window of the step's first query."""
    if not block_size or window is None:
        return 0
    first_query = trace.num_keys - trace.query - 1  # position of the chunk's first token
    return max(0, (first_query - window + 1) // block_size) * block_size


def _no_dense_mask(*args, **kwargs):
    """Mask function for our attention name: the engine masks by positions, not a dense mask."""
    if in_engine_step():
        return None
    return sdpa_mask(*args, **kwargs)


def install(model: torch.nn.Module) -> None:
    """Route the model's attention through kvviz (idempotent; other callers fall back to SDPA) and
    give its linear layers their packed forms for the engine's CPU steps (cpu/packed_layers.py).
    Only instances change, and only their own forward."""
    AttentionInterface.register(ATTENTION_NAME, paged_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, _no_dense_mask)
    if getattr(model.config, "_attn_implementation", None) != ATTENTION_NAME:
        model.set_attn_implementation(ATTENTION_NAME)
    fast_path.prepare(model)


@torch.inference_mode()
def run_forward(model, batch: StepBatch) -> tuple[torch.Tensor, float]:
    """One forward pass. Returns (logits (R, V) for the sampled positions, seconds)."""
    start = time.perf_counter()
    with engine_step():
        output = model(input_ids=batch.input_ids, position_ids=batch.position_ids, use_cache=False,
                       logits_to_keep=batch.logits_index, kvviz_batch=batch)
        logits = output.logits[0]  # (R, V)
        if logits.device.type == "cuda":
            torch.cuda.synchronize(logits.device)
    return logits, time.perf_counter() - start
