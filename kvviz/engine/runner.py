"""The runner: one forward pass over every scheduled token of every request, flattened.

The model runs unchanged. kvviz owns attention: it registers `paged_attention` in transformers'
AttentionInterface and switches the model to it. Each attention layer then hands us its new
queries, keys and values (after rotary embeddings); we write the keys and values into the paged
cache through the slot mapping, read each request's whole context back through its block table,
and attend. A mask function that returns None keeps transformers from building a dense mask.

The tokens of a step sit in one row, with no padding: (1, N). On the CPU in float32 a compiled
kernel (paged_attention.c, through cpu_kernels.py) then reads every request's keys and values in
place, in their blocks. Elsewhere (GPU, other dtypes, a traced lesson step, attention="sdpa")
attention gathers the blocks and works on two groups, padded only inside each group: decodes
(one query each) and prefill chunks.
"""

from __future__ import annotations

import contextvars
import time
import types
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from kvviz.engine.cpu import kernels as cpu_kernels

ATTENTION_NAME = "kvviz_paged"
_IN_ENGINE_FORWARD = contextvars.ContextVar("kvviz_in_engine_forward", default=False)


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
                packed = torch.zeros(packed.shape, dtype=dtype, device=packed.device).masked_fill_(~packed, float("-inf"))
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
    all_queries: bool = False  # a prefill from position 0: keep every query's row, the causal triangle
    prompt_attention: list = field(default_factory=list)  # [layer] (heads, tokens, tokens)


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
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
        return sdpa_attention_forward(module, query, key, value, attention_mask,
                                      dropout=dropout, scaling=scaling, **kwargs)
    layer = module.layer_idx
    window = kwargs.get("sliding_window") or getattr(module, "sliding_window", None)
    softcap = kwargs.get("softcap")
    scaling = scaling if scaling is not None else query.shape[-1] ** -0.5
    q = query[0].transpose(0, 1)  # (N, H, D)
    k_new = key[0].transpose(0, 1)  # (N, KVH, D)
    v_new = value[0].transpose(0, 1)  # (N, KVH, Dv)
    if batch.cache is not None:
        batch.cache.write(layer, k_new, v_new, batch.slot_mapping)
    if batch.kernel is not None:  # every key is now in a block: read them there
        out = q.new_empty(q.shape)  # (N, H, D)
        batch.kernel(q, batch.cache.key_cache[layer], batch.cache.value_cache[layer], out,
                     batch.kernel_metadata, window, scaling, softcap)
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
                         group.mask(window)[trace.row, 0, rows], scaling, softcap)
    return out.unsqueeze(0), None


def _trace_layer(trace: Trace, query, key, value, mask, scaling, softcap) -> None:
    """The traced request's queries against its keys: the newest query, or with all_queries every
    prompt query. query: (Tq, H, D); key: (Lk, KVH, D); mask: (Tq, Lk)."""
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
    trace.keys.append(key.float().cpu())
    trace.values.append(value.float().cpu())


def _no_dense_mask(*args, **kwargs):
    """Mask function for our attention name: the engine masks by positions, not a dense mask."""
    if _IN_ENGINE_FORWARD.get():
        return None
    from transformers.masking_utils import sdpa_mask
    return sdpa_mask(*args, **kwargs)


FEW_ROWS = 256  # tokens in a step at or below which CPU linears compute (W @ x^T)^T


def _turned_product(module: torch.nn.Linear, x: torch.Tensor, rows: int) -> torch.Tensor:
    """(W @ x^T)^T: the same sums as x @ W^T, with the weight as the matrix library's left operand."""
    flat = x.reshape(rows, x.shape[-1])  # (N, in)
    if module.bias is None:
        out = torch.mm(module.weight, flat.T)  # (out, N)
    else:
        out = torch.addmm(module.bias[:, None], module.weight, flat.T)  # (out, N)
    return _transposed(out).view(*x.shape[:-1], module.out_features)  # (..., out); rows may be 0


def _transposed(matrix: torch.Tensor) -> torch.Tensor:
    """(out, N) -> (N, out), contiguous: the compiled tiled transpose when there is one (several
    times faster than PyTorch's strided copy on the bench's CPU), else matrix.T.contiguous()."""
    kernel = cpu_kernels.load() if matrix.dtype == torch.float32 else None
    return kernel.transpose(matrix) if kernel is not None else matrix.T.contiguous()


def _few_rows_on_cpu(x: torch.Tensor) -> int | None:
    """The number of rows when this is an engine step's few rows on the CPU, else None."""
    rows = x.numel() // x.shape[-1]
    if rows > FEW_ROWS or x.device.type != "cpu" or not _IN_ENGINE_FORWARD.get():
        return None
    return rows


def lm_head_for_steps(module: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """The LM head's nn.Linear.forward, turned around for the engine's CPU decode steps.

    x: (..., hidden) -> (..., vocab). A decode step multiplies a few rows of activations (N,
    hidden) by the widest weight of the model (vocab, hidden). On this project's CPUs the matrix
    library runs that product 1.2-1.5 times faster as W @ x^T, many rows times a few columns,
    than as x @ W^T, with one thread or more; the sums are the same and in float32 came out bit
    for bit equal. Prefill steps (many rows), GPUs and every caller outside the engine keep the
    plain product.
    """
    if module.kvviz_packed is not None and x.device.type == "cpu" and _IN_ENGINE_FORWARD.get():
        return _packed_product(module, x)
    rows = _few_rows_on_cpu(x)
    if rows is None:
        return F.linear(x, module.weight, module.bias)
    return _turned_product(module, x, rows)


def linear_for_steps(module: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """Every other nn.Linear of the model: the same turned product, with two threads or more.

    A decode step reads every weight of the model from memory to multiply it by a few rows, and
    the whole model does not fit in the CPU's cache. Over the bench's mixed workload (2-core CPU,
    two threads, an interleaved A/B of two engines) the turned product cut the forward passes'
    total time by 8%, most at the end of a batch when few requests are left (at 3 rows it ran
    the cold weights 2.2 times faster). With one thread the same A/B was 8% slower, so one
    thread keeps F.linear.
    """
    if module.kvviz_packed is not None and x.device.type == "cpu" and _IN_ENGINE_FORWARD.get():
        return _packed_product(module, x)
    rows = _few_rows_on_cpu(x)
    if rows is None or torch.get_num_threads() < 2:
        return F.linear(x, module.weight, module.bias)
    return _turned_product(module, x, rows)


def _packed_product(module: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """x @ W^T + b with oneDNN, on the weight packed once at install (fused_layers.pack_linears).
    x: (..., in) -> (..., out)."""
    return torch.ops.mkldnn._linear_pointwise(x, module.kvviz_packed.weight, module.bias, "none", [], "")


def install(model: torch.nn.Module) -> None:
    """Route the model's attention through kvviz (idempotent; other callers fall back to SDPA),
    give its linear layers the few-rows product for decode steps (lm_head_for_steps,
    linear_for_steps), and its RMSNorms and gated MLPs their compiled one-pass forms
    (fused_layers.py). Only instances change, and only their own forward."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    from kvviz.engine.cpu import fused_layers

    AttentionInterface.register(ATTENTION_NAME, paged_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, _no_dense_mask)
    if getattr(model.config, "_attn_implementation", None) != ATTENTION_NAME:
        model.set_attn_implementation(ATTENTION_NAME)
    head = model.get_output_embeddings()
    for module in model.modules():
        if type(module) is torch.nn.Linear and "forward" not in vars(module):
            turned = lm_head_for_steps if module is head else linear_for_steps
            module.forward = types.MethodType(turned, module)
            module.kvviz_packed = None  # fused_layers.pack_linears fills it where it can
    fused_layers.install(model)


@torch.inference_mode()
def run_forward(model, batch: StepBatch) -> tuple[torch.Tensor, float]:
    """One forward pass. Returns (logits (R, V) for the sampled positions, seconds)."""
    token = _IN_ENGINE_FORWARD.set(True)
    start = time.perf_counter()
    try:
        output = model(input_ids=batch.input_ids, position_ids=batch.position_ids, use_cache=False,
                       logits_to_keep=batch.logits_index, kvviz_batch=batch)
        logits = output.logits[0]  # (R, V)
        if logits.device.type == "cuda":
            torch.cuda.synchronize(logits.device)
    finally:
        _IN_ENGINE_FORWARD.reset(token)
    return logits, time.perf_counter() - start
