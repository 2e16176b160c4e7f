"""Multi-head latent attention (MLA, DeepSeek-V2/V3) on the paged cache: one latent row per token.

An MLA layer squeezes each token's hidden state into a latent c of kv_lora_rank values
(normalised by kv_a_layernorm) and one rotary key k_rope of qk_rope_head_dim values that every
head shares. Every head's key and value are linear in c, so the cache keeps only the row
[c, k_rope], for all heads together, and attention rebuilds what it needs from it:

    key of head h   = [W_uk[h] @ c, k_rope]    qk_nope_head_dim + qk_rope_head_dim values
    value of head h =  W_uv[h] @ c              v_head_dim values
    (W_uk and W_uv are the rows of kv_b_proj)

This file takes the readable form: read the request's latent rows back through its block table,
rebuild K and V per head for every cached token, and attend as any other layer does. The
absorbed form of DeepSeek's kernels folds W_uk into the query and W_uv into the output, so
attention runs on the latent rows themselves and nothing is rebuilt; it gives the same numbers
with less work per cached token, but hides where the keys and values came from.

transformers hands an attention function keys and values already rebuilt per head, which is too
late for a latent cache. So for DeepSeek-V3 attention layers the engine replaces the module's
own forward (on the instance, as engine/cpu/packed_layers.py does for linear layers); outside the
engine's steps the module runs its own forward unchanged.
"""

from __future__ import annotations

import types

import torch
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as deepseek_v3

from kvviz.engine.runner import StepBatch, _trace_layer, attend


def install(model: torch.nn.Module) -> int:
    """Switch every DeepSeek-V3 attention layer of the model to mla_attention; returns how many.
    Idempotent; other models are left alone."""
    layers = [m for m in model.modules() if isinstance(m, deepseek_v3.DeepseekV3Attention)]
    for module in layers:
        if "forward" not in vars(module):
            module.forward = types.MethodType(mla_attention, module)
    return len(layers)


def mla_attention(module, hidden_states: torch.Tensor, position_embeddings, attention_mask=None,
                  cache=None, **kwargs) -> tuple[torch.Tensor, None]:
    """One DeepSeek-V3 attention layer over a step's flat row of N tokens.

    hidden_states: (1, N, hidden); position_embeddings: cos, sin (1, N, qk_rope_head_dim).
    Writes each new token's latent row (kv_lora_rank + qk_rope_head_dim values) into the paged
    cache through the step's slot mapping, reads every request's rows back through its block
    table, rebuilds per-head K and V from them and attends causally within each request.
    Returns ((1, N, hidden), None).
    """
    batch: StepBatch | None = kwargs.get("kvviz_batch")
    if batch is None:  # not the engine's step (model.generate, a lesson's twin): the module's own forward
        return type(module).forward(module, hidden_states, position_embeddings, attention_mask, cache=cache, **kwargs)
    heads, nope, rope, rank = module.num_heads, module.qk_nope_head_dim, module.qk_rope_head_dim, module.kv_lora_rank
    tokens = hidden_states[0]  # (N, hidden)
    num_tokens = tokens.shape[0]
    if module.q_lora_rank is None:
        queries = module.q_proj(tokens)  # (N, H * (nope + rope))
    else:  # DeepSeek-V3 compresses the queries too (only to save activations; they are not cached)
        queries = module.q_b_proj(module.q_a_layernorm(module.q_a_proj(tokens)))
    query_nope, query_rope = queries.view(num_tokens, heads, nope + rope).split([nope, rope], -1)  # (N, H, nope|rope)
    latent, key_rope = module.kv_a_proj_with_mqa(tokens).split([rank, rope], -1)  # (N, rank), (N, rope)
    latent = module.kv_a_layernorm(latent)  # (N, rank)
    cos, sin = position_embeddings  # (1, N, rope) each
    rotate = (deepseek_v3.apply_rotary_pos_emb_interleave if module.config.rope_interleave
              else deepseek_v3.apply_rotary_pos_emb)  # as the module's own forward picks it
    query_rope, key_rope = rotate(query_rope[None], key_rope[None, :, None], cos, sin,
                                  unsqueeze_dim=2)  # (1, N, H, rope), (1, N, 1, rope)
    rows = torch.cat([latent, key_rope[0, :, 0]], -1)  # (N, rank + rope): all the cache keeps of a token
    if batch.cache is not None:
        batch.cache.write(module.layer_idx, rows[:, None], None, batch.slot_mapping)  # one "KV head", no V
    query = torch.cat([query_nope, query_rope[0]], -1)  # (N, H, nope + rope)
    out = query.new_empty(num_tokens, heads, module.v_head_dim)  # (N, H, v_head_dim)
    for group_id, group in enumerate(batch.groups):  # at most two: decodes, prefill chunks
        if batch.cache is not None:
            cached = batch.cache.gather_blocks(module.layer_idx, group.key_index)[0][:, :, 0]  # (B, Lk, rank + rope)
        else:
            cached = rows[group.key_index]  # (B, Lk, rank + rope): the chunk's own tokens
        keys, values = rebuild_keys_values(module, cached)  # (B, Lk, H, nope + rope), (B, Lk, H, v_head_dim)
        queries_in_group = query[:, None] if group.in_order else query[group.query_index]  # (B, Tq, H, nope + rope)
        mask = group.packed_mask(None, 1, query.dtype)  # (B, 1, Tq, Lk): causal, within each request
        group_out = attend(queries_in_group, keys, values, mask, module.scaling)  # (B, Tq, H, v_head_dim)
        if group.in_order:  # every token of the step, in order
            out = group_out.flatten(0, 1)
        else:
            out[group.out_index] = group_out.flatten(0, 1)[group.out_select]
        trace = batch.trace
        if trace is not None and trace.group == group_id:
            picked = slice(0, trace.query + 1) if trace.all_queries else slice(trace.query, trace.query + 1)
            _trace_layer(trace, query[group.query_index[trace.row, picked]], keys[trace.row], values[trace.row],
                         group.mask(None)[trace.row, 0, picked], module.scaling, None)
            trace.latents.append(cached[trace.row, :trace.num_keys].float().cpu())  # (tokens, rank + rope)
    return module.o_proj(out.reshape(1, num_tokens, -1)), None  # (1, N, hidden)


def rebuild_keys_values(module, cached: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-head keys and values out of latent rows (the readable, not the absorbed, form).

    cached: (B, L, kv_lora_rank + qk_rope_head_dim). Returns keys (B, L, H, qk_nope + qk_rope)
    and values (B, L, H, v_head_dim).
    """
    rows, length = cached.shape[:2]
    latent, key_rope = cached.split([module.kv_lora_rank, module.qk_rope_head_dim], -1)  # (B, L, rank), (B, L, rope)
    per_head = module.kv_b_proj(latent).view(rows, length, module.num_heads, -1)  # (B, L, H, nope + v)
    key_nope, values = per_head.split([module.qk_nope_head_dim, module.v_head_dim], -1)
    shared_rope = key_rope[:, :, None].expand(-1, -1, module.num_heads, -1)  # (B, L, H, rope): one for all heads
    return torch.cat([key_nope, shared_rope], -1), values
