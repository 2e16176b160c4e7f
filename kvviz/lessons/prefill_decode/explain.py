"""Inside one attention layer, computed from the real model for the "Prefill and decode" lesson.

Where the newest token's query, key and value come from (the layer's input times W_Q, W_K, W_V),
that the cache holds keys after the rotary embedding, the shapes of one decode step's attention,
and the article's small example of the work the cache saves.
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass

import numpy as np
import torch

from kvviz.lessons.prefill_decode.logic import per_token_formula
from kvviz.memory_bill import bytes_per_token_by_kind
from kvviz.models import summary_shape
from kvviz.shapes import FULL, SLIDING, format_bytes


def small_example(prompt_tokens: int = 4, generated: int = 3) -> list[dict]:
    """Token computations per step to generate `generated` tokens after a prompt, with and without a cache.

    Without a cache every step runs the whole text again; with it, the prefill runs the prompt once
    and each later step runs only the newest token.
    """
    rows, with_total, without_total = [], 0, 0
    for step in range(generated):
        with_cache = prompt_tokens if step == 0 else 1
        without_cache = prompt_tokens + step
        with_total += with_cache
        without_total += without_cache
        rows.append({"step": step, "predicts": f"token {step + 1}", "with_cache": with_cache,
                     "without_cache": without_cache, "with_cache_total": with_total,
                     "without_cache_total": without_total})
    return rows


def small_example_table(rows: list[dict]) -> list[dict]:
    """small_example() rows as the page's table shows them: the columns named in words."""
    return [{"step": row["step"], "predicts": row["predicts"], "tokens run, with cache": row["with_cache"],
             "tokens run, without": row["without_cache"], "total with cache": row["with_cache_total"],
             "total without": row["without_cache_total"]} for row in rows]


def attention_shapes(heads: int, kv_heads: int, head_dim: int, num_keys: int) -> list[tuple[str, str]]:
    """One decode step's attention in one layer, term by term with its shape."""
    group = heads // kv_heads
    return [
        ("q = x · W_Qᵀ, then RoPE", f"({heads} heads, {head_dim}): one query per head, for the newest token only"),
        ("K_cache, V_cache", f"({num_keys} positions, {kv_heads} KV heads, {head_dim}): read from the cache"),
        ("scores = q · K_cacheᵀ / √d",
         f"({heads}, {num_keys}): each query head against its KV head's {num_keys} keys, "
         f"÷ √{head_dim} = {head_dim ** 0.5:.2f}" + (f"; {group} query heads share each KV head" if group > 1 else "")),
        ("p = softmax(scores)",
         f"({heads}, {num_keys}): attention probabilities, each row sums to 1 over positions 0..{num_keys - 1}"),
        ("out = p · V_cache", f"({heads}, {head_dim}): then W_O mixes the heads back to the model width"),
    ]


@dataclass
class Projection:
    """The newest token in one layer: its input, the three projections, and the cache rows they became."""

    layer: int
    position: int
    x: np.ndarray  # (hidden,) the layer's input after its norm
    w_shapes: dict  # "W_Q" -> (out, in), ...
    q: np.ndarray  # (heads, head_dim) after RoPE
    k_before_rope: np.ndarray  # (kv_heads, head_dim)
    k: np.ndarray  # (kv_heads, head_dim) after RoPE: what the cache stores
    v: np.ndarray  # (kv_heads, head_dim)


@torch.inference_mode()
def project_newest_token(model, token_ids: list[int], layer: int) -> Projection | None:
    """Recompute layer `layer`'s Q, K, V for the last of `token_ids` from the model's own weights.

    Works for Llama-style layers (input_layernorm, self_attn.q_proj/k_proj/v_proj, rotary
    embedding); returns None for other architectures.
    """
    decoder = getattr(getattr(model, "model", None), "layers", None)
    if decoder is None or not hasattr(decoder[layer], "input_layernorm"):
        return None
    block = decoder[layer]
    attention = block.self_attn
    if not all(hasattr(attention, name) for name in ("q_proj", "k_proj", "v_proj")):
        return None
    device = next(model.parameters()).device
    ids = torch.tensor([token_ids], device=device)  # (1, T)
    hidden = model(input_ids=ids, output_hidden_states=True, use_cache=False).hidden_states[layer]  # (1, T, hidden)
    x = block.input_layernorm(hidden[:, -1:])  # (1, 1, hidden)
    head_dim = attention.head_dim
    q = attention.q_proj(x).view(1, 1, -1, head_dim).transpose(1, 2)  # (1, H, 1, D)
    k = attention.k_proj(x).view(1, 1, -1, head_dim).transpose(1, 2)  # (1, KVH, 1, D)
    v = attention.v_proj(x).view(1, 1, -1, head_dim).transpose(1, 2)  # (1, KVH, 1, D)
    if hasattr(attention, "q_norm"):  # Qwen3, OLMo2: norms before the rotation
        q, k = attention.q_norm(q), attention.k_norm(k)
    position = torch.tensor([[len(token_ids) - 1]], device=device)  # (1, 1)
    rotary = model.model.rotary_emb
    if "layer_type" in inspect.signature(rotary.forward).parameters:  # Gemma-3: one rotation per layer type
        cos, sin = rotary(x, position, model.config.get_text_config().layer_types[layer])
    else:
        cos, sin = rotary(x, position)
    rotate = sys.modules[type(attention).__module__].apply_rotary_pos_emb
    q_rot, k_rot = rotate(q, k, cos, sin)
    weights = {name: tuple(getattr(attention, proj).weight.shape)
               for name, proj in (("W_Q", "q_proj"), ("W_K", "k_proj"), ("W_V", "v_proj"))}

    def array(t):
        return t[0, :, 0].float().cpu().numpy()  # (heads, D)
    return Projection(layer=layer, position=len(token_ids) - 1, x=x[0, 0].float().cpu().numpy(), w_shapes=weights,
                      q=array(q_rot), k_before_rope=array(k), k=array(k_rot), v=array(v))


# Logits count as equal below this: float32 keeps about 7 significant digits, and logits of a few
# tens lose a few units in the 6th digit when the same sum is taken in another order.
EQUAL_LOGITS = {"float32": 1e-3, "bfloat16": 0.1, "float16": 0.05}


def logit_difference_note(difference: float | None, dtype: str) -> str:
    """One sentence on why the cached and recomputed logits differ a little, and what counts as equal."""
    tolerance = EQUAL_LOGITS.get(dtype, 1e-3)
    if difference is None:
        return "The difference appears once a step has sampled a token."
    verdict = "equal" if difference <= tolerance else "NOT equal: a real difference, worth a bug report"
    return (f"Not exactly zero because the cached step and the full recompute add the same products in a "
            f"different order (cached blocks against one long row), and {dtype} rounds each partial sum. "
            f"Below {tolerance:g} counts as equal for {dtype}; {difference:.2e} is {verdict}.")


def bill_note(bill: dict) -> str:
    """The memory bill's caption (`bill` from PrefillLesson.bill): the pool, whether formula and measured
    bytes agree, and at the request's last step where its blocks went."""
    pool = f"The engine's whole pool is {format_bytes(bill['pool_bytes'])} (preallocated blocks). "
    difference = bill["token_bytes"] - bill["formula_bytes"]
    if difference == 0:
        verdict = f"Formula and measured bytes agree because the engine stores exactly {bill['stores']}, nothing more."
    elif bill.get("outside_window") and difference == bill["outside_window_bytes"]:
        outside = bill["outside_window"]
        verdict = (f"Measured is {format_bytes(difference)} above the formula: the sliding layers still hold "
                   f"{outside} position{'' if outside == 1 else 's'} outside their window of {bill['window']:,}, "
                   "which the formula (the window alone) leaves out. A block goes back whole, in the step after the "
                   "window has passed all of its positions (the prefill's own attention needed every one).")
    else:
        verdict = (f"Formula and measured bytes differ by {format_bytes(abs(difference))}: the engine holds "
                   f"{'more' if difference > 0 else 'less'} than {bill['stores']} for this request's tokens.")
    if not bill["returned"]:
        return pool + verdict
    blocks = f"{bill['blocks']} block{'' if bill['blocks'] == 1 else 's'}"
    return (pool + verdict + f" The request finished at this step: the figures are what it held during the step, "
            f"and its {blocks} then went back to the pool, which now holds nothing for it.")


def work_table(rows: list[dict]) -> list[dict]:
    """Lesson.work() rows as the Work saved table shows them: named columns, and the logit difference
    as text, so that a tiny difference is not rounded to 0.00 and a missing one does not read "None"."""
    def difference(value: float | None) -> str:
        if value is None:
            return "not compared (no token sampled)"
        return "0 (identical)" if value == 0 else f"{value:.1e}"

    return [{"step": row["step"], "tokens run, with cache": row["with_cache_tokens"],
             "tokens run, without": row["without_cache_tokens"], "total with cache": row["with_cache_total"],
             "total without": row["without_cache_total"],
             "largest logit difference": difference(row["max_logit_difference"])} for row in rows]


def cache_per_layer_text(lesson, step: int) -> str:
    """What a position costs, under the Cache per layer view (markdown): in every layer; or, for a model with
    sliding layers, in every layer while inside the window and in the full layers alone once given back."""
    info, record = lesson.model_info, lesson.records[step]
    per_token, num_tokens = record.memory.bytes_per_token, lesson.num_tokens_at(step)
    added = per_token * (num_tokens if step == 0 else 1)
    if not info.get("sliding_window") or not info.get("layer_types"):
        return (f"Every position costs **{format_bytes(per_token)}**: {per_token_formula(info)}. "
                f"This step added **{format_bytes(added)}**.")
    by_kind = bytes_per_token_by_kind(summary_shape(info), info["dtype_bytes"])
    sliding = sum(kind == "sliding_attention" for kind in info["layer_types"])
    given_back = lesson.given_back(step)
    return (f"A position costs **{format_bytes(per_token)}** while it is inside the window "
            f"({per_token_formula(info)}): **{format_bytes(by_kind.get(FULL, 0))}** in the "
            f"{info['layers'] - sliding} full layers, which keep it for good, and "
            f"**{format_bytes(by_kind.get(SLIDING, 0))}** "
            f"in the {sliding} sliding layers, which give it back once their window of {info['sliding_window']:,} "
            f"has passed its whole block. "
            + (f"They have given back the oldest {given_back:,} positions (grey)." if given_back else
               f"No position is outside the window yet: a prompt past {info['sliding_window']:,} tokens shows it."))
