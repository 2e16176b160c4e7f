"""Two views of the "Prefill and decode" lesson: inside attention, and why decode is memory-bound.

Each takes the lesson and the step being looked at; every number comes from kvviz.lessons.prefill_decode.explain and
kvviz.lessons.prefill_decode.roofline, computed from the lesson's records and the real model.
"""

from __future__ import annotations

import numpy as np
import streamlit as st

from kvviz.lessons.model_lab.state import LAB
from kvviz.lessons.prefill_decode import explain, roofline
from kvviz.lessons.prefill_decode import explain_figures as figures
from kvviz.lessons.prefill_decode.logic import MAX_TRIANGLE_TOKENS

from kvviz.shapes import PRESETS, ModelShape, format_bytes
from kvviz.ui.session_keys import Keys
from kvviz.ui.text import plain

# layer and head choices fit one model
KEYS = Keys(clears=frozenset({"lesson_inside_layer", "lesson_inside_head", "lesson_roofline_device",
                              "lesson_roofline_batch", "lesson_roofline_model", "lesson_roofline_context"}))

MACHINE = "this machine (measured)"


def lesson_shape(info: dict) -> ModelShape:
    return ModelShape(name=info["name"], num_layers=info["layers"], num_kv_heads=info["kv_heads"],
                      head_dim=info["head_dim"], num_heads=info["heads"], num_params=info["parameters"],
                      hidden_size=info.get("hidden_size"), max_context=info.get("max_context"),
                      kv_lora_rank=info.get("kv_lora_rank"), qk_rope_head_dim=info.get("qk_rope_head_dim"))


def decode_rows(lesson, step: int, layer: int, head: int) -> list[np.ndarray]:
    """Each decode step's single attention row (layer, head) up to `step`."""
    return [trace.attention[layer, head] for trace in lesson.traces[1:step + 1]]  # each (positions,)


@st.fragment
def inside_attention(lesson, step: int) -> None:
    info = lesson.model_info
    heads, kv_heads, head_dim = info["heads"], info["kv_heads"], info["head_dim"]
    num_keys = lesson.num_tokens_at(step)
    a, b = st.columns(2)
    layer = a.selectbox("Layer", range(info["layers"]), key="lesson_inside_layer")
    head = b.selectbox("Query head", range(heads), key="lesson_inside_head",
                       format_func=lambda h: f"head {h} (reads KV head {h // (heads // kv_heads)})")

    st.markdown("#### 1 · Where q, k and v come from")
    st.markdown(
        f"Each layer multiplies its input row **x** (the token's current vector, width {info['hidden_size']}) "
        f"by three learned matrices: **q = x·W_Qᵀ**, **k = x·W_Kᵀ**, **v = x·W_Vᵀ**, then splits the result "
        f"into heads: {heads} query heads, {kv_heads} key/value heads of {head_dim} numbers each. Keys and "
        "queries are then turned by the rotary position embedding (RoPE), which encodes the position as "
        "a rotation; the cache stores the key **after** that rotation, so it is never redone.")
    projection = None
    if lesson.engine is not None:
        token_ids = (lesson.prompt_token_ids + [t for r in lesson.records[:step] for _, t in r.sampled])[:num_keys]
        projection = explain.project_newest_token(lesson.engine.model, token_ids, layer)
    if projection is None:
        st.info(_no_projection(lesson, info))
    else:
        trace = lesson.trace(step)  # every cached K/V row after this step
        kv_head = head // (heads // kv_heads)
        shapes = ", ".join(f"{name} {rows}×{cols}" for name, (rows, cols) in projection.w_shapes.items())
        cached_k = trace.keys[layer, projection.position]  # (kv_heads, head_dim)
        cached_v = trace.values[layer, projection.position]
        k_gap = float(np.abs(cached_k - projection.k).max())
        v_gap = float(np.abs(cached_v - projection.v).max())
        st.markdown(f"Recomputed here from the weights ({shapes}) for the newest token, position "
                    f"{projection.position}: its k after RoPE differs from the cached row by at most "
                    f"**{k_gap:.1e}** and its v by **{v_gap:.1e}** (rounding only), while k before RoPE "
                    f"differs by {float(np.abs(cached_k - projection.k_before_rope).max()):.2f}.")
        st.plotly_chart(figures.qkv_vectors(projection.q, projection.k_before_rope, projection.k, projection.v,
                                            kv_head, heads // kv_heads), width="stretch")

    st.markdown("#### 2 · Why K and V are cached and Q is not")
    st.markdown(
        "A query is used once, by its own step: the newest token asks its question of every earlier key, "
        "and the answer is done. Every **later** token will ask again, against the same earlier keys and "
        "values. So keys and values are worth keeping; an old query never is.")
    st.markdown("#### 3 · Causality")
    st.markdown(
        "Attention in a decoder is **causal**: a token attends only to itself and to earlier tokens. "
        "An earlier token never sees a later one, so nothing that comes later can change its key or "
        "value. That is what makes them safe to store and reuse. Below, the prefill step's whole "
        "attention matrix for the prompt is a triangle (nothing above the diagonal); each decode step "
        "adds one row, the newest query against every cached key.")
    triangle = lesson.traces[0].prompt_attention if lesson.traces else None
    if triangle is None:
        st.info(f"The prefill's whole attention matrix is kept for prompts of up to {MAX_TRIANGLE_TOKENS} "
                "tokens; shorten the prompt to see the triangle.")
    else:
        texts = lesson.token_texts
        st.plotly_chart(figures.causal_attention(triangle[layer, head],
                                                 decode_rows(lesson, step, layer, head), texts, layer, head),
                        width="stretch")

    st.markdown("#### 4 · The formula with this step's shapes")
    st.latex(r"\mathrm{out} = \mathrm{softmax}\!\left(\frac{q\,K_{\mathrm{cache}}^{\top}}{\sqrt{d}}\right)"
             r"V_{\mathrm{cache}}")
    st.table([{"term": term, "shape at this step": shape}
              for term, shape in explain.attention_shapes(heads, kv_heads, head_dim, num_keys)])
    st.markdown("#### 5 · The article's small example")
    rows = explain.small_example(prompt_tokens=4, generated=4)
    last = rows[-1]
    st.markdown(
        f"A 4-token prompt, 3 tokens generated, and the 4th being predicted. Without a cache that step runs "
        f"all {last['without_cache']} tokens again, and the four steps run **{last['without_cache_total']}** "
        f"token computations; with the cache, **{last['with_cache_total']}** (4 at prefill, then 1 a step).")
    st.dataframe(explain.small_example_table(rows), hide_index=True, width="stretch")


def _no_projection(lesson, info: dict) -> str:
    """Why step 1 recomputes no q, k and v: a replay has no model, an MLA layer caches no per-head k and v."""
    if lesson.engine is None:
        return "Recomputing q, k and v needs the model and a Llama-style layer; a replayed lesson has no model."
    if info.get("kv_lora_rank") is not None:
        return (f"This model uses multi-head latent attention (MLA): each layer caches one row per token, a "
                f"{info['kv_lora_rank']}-value latent and a {info['qk_rope_head_dim']}-value RoPE key, and rebuilds "
                "every head's k and v from it, so there is no per-head k and v to recompute here (the Keys and "
                "values view shows the cached rows).")
    return "Recomputing q, k and v needs a Llama-style layer (q_proj, k_proj, v_proj); this model's layers differ."


def _device_choice() -> roofline.Accelerator:
    names = list(roofline.ACCELERATORS) + [MACHINE]
    name = st.selectbox("Accelerator", names, key="lesson_roofline_device")
    if name == MACHINE:
        with st.spinner("Measuring this machine's matmul and copy speed…"):
            return roofline.measure_this_machine()
    return roofline.ACCELERATORS[name]


THIS_MODEL = "this lesson's model"
WHAT_IF_CONTEXTS = [1024, 8192, 32768, 131072]


@st.fragment
def memory_bound(lesson, step: int) -> None:
    info = lesson.model_info
    step_context = lesson.num_tokens_at(step)
    a, b = st.columns([2, 1])
    with a:
        device = _device_choice()
    batch = b.select_slider("Requests decoded together", [1, 2, 4, 8, 16, 32, 64, 128, 256], value=1,
                            key="lesson_roofline_batch")
    c, d = st.columns([2, 1])
    dense = [name for name, shape in PRESETS.items() if shape.num_params and name not in roofline.MIXTURE_OF_EXPERTS]
    model_name = c.selectbox("Model", [THIS_MODEL] + dense, key="lesson_roofline_model",
                             help="A preset asks what-if: the same step for a real model's shape, in bf16. "
                                  "Mixture-of-experts models (Mixtral, DeepSeek-V3) are left out: a token reads "
                                  "only its experts' weights.")
    chosen = d.selectbox("Tokens in the cache", [0] + WHAT_IF_CONTEXTS, key="lesson_roofline_context",
                         format_func=lambda c: f"{step_context:,} (this step)" if c == 0 else f"{c:,} (what if)")
    context = chosen or step_context
    if model_name == THIS_MODEL:
        shape, num_params, weight_bytes = lesson_shape(info), info["parameters"], info["dtype_bytes"]
    else:
        shape = PRESETS[model_name]
        num_params, weight_bytes = shape.num_params, 2
    cache_bytes = weight_bytes
    measured = lesson.records[step].memory.bytes_per_token if model_name == THIS_MODEL else None  # the engine's row
    costs = roofline.variants(shape, num_params, context, batch=batch, weight_bytes=weight_bytes,
                              cache_bytes=cache_bytes, cache_per_token=measured)
    step_cost = costs[0]
    prefill = roofline.prefill_step(shape, num_params, len(lesson.prompt_token_ids),
                                    weight_bytes=weight_bytes, cache_bytes=cache_bytes)
    multiplied, looked_up = roofline.multiplied_params(shape, num_params), roofline.untied_embedding_params(shape)
    st.markdown(
        f"One decode step of {'this model' if model_name == THIS_MODEL else model_name} with "
        f"**{context:,} tokens** in the cache"
        + (f", for {batch} requests at once" if batch > 1 else "")
        + f": it reads every weight it multiplies once (**{format_bytes(step_cost.weight_bytes)}**: {multiplied:,} "
          f"parameters × {weight_bytes} bytes"
        + (f"; the {looked_up:,} of the input embedding are looked up, one row per token, not read whole"
           if looked_up else "")
        + f") and the whole cache (**{format_bytes(step_cost.cache_bytes)}**, "
          f"the memory bill for {context:,} tokens), and does **{step_cost.flops:,.0f} FLOPs** (2 per multiplied "
          f"parameter per token, plus attention's q·Kᵀ and its softmax probabilities times V).")
    st.markdown("\n".join(f"- **{term}**: {text}" for term, text in roofline.DEFINITIONS))
    for problem in roofline.what_if_problems(shape, step_cost, device):
        st.warning(plain(problem))  # it names the model, which a replayed file may have named anything

    def ceiling(cost) -> str:
        return f"{cost.tokens_per_second(device):,.0f}" if cost.fits(device) else "does not fit"

    c1, c2, c3, c4 = st.columns(4)
    c1.metric("Bytes read", format_bytes(step_cost.bytes_read), help="Weights + cache, per step.")
    c2.metric("Arithmetic intensity (FLOP/byte)", f"{step_cost.intensity:.2f}",
              help=f"The roof of {device.name} turns at {device.ridge:.0f} FLOPs per byte.")
    c3.metric("Bound by", step_cost.bound(device),
              help=f"{step_cost.intensity:.2f} FLOP/B is {'below' if step_cost.intensity < device.ridge else 'above'} "
                   f"the ridge at {device.ridge:.0f} FLOP/B.")
    c4.metric("Ceiling (tokens/s)", ceiling(step_cost),
              help=f"{batch} token(s) per step ÷ the step's least time, max(FLOPs ÷ peak, bytes ÷ bandwidth); "
                   f"none when the weights and the cache do not fit in {format_bytes(device.memory_bytes)}.")
    st.plotly_chart(figures.roofline(device, costs, prefill), width="stretch")
    st.caption(f"{device.name}: {device.note}. The prefill point runs all {prefill.context} prompt tokens per "
               "weight read, so it sits far further right.")
    st.table([{"cache": cost.label, "cache bytes": format_bytes(cost.cache_bytes),
               "bytes read": format_bytes(cost.bytes_read), "FLOPs per byte": f"{cost.intensity:.2f}",
               "ceiling (tokens/s)": ceiling(cost)} for cost in costs])
    measured_against_bound()
    st.markdown(
        "Fewer KV heads (GQA, MQA) and fewer bits per cached value shrink the cache share of the bytes "
        "read; at short contexts the weights dominate and the ceiling barely moves, at long contexts and "
        "large batches the cache dominates and these choices set the speed. Batching raises the FLOPs per "
        "byte of the weights, because every request in the step shares one read of them.")


def measured_against_bound() -> None:
    """The Model lab's measured decode step times beside the roofline bound for this machine."""
    result, shape = LAB.result, LAB.result_shape
    if result is None or shape is None or not result.timings:
        st.caption("Measure a model in the **Model lab** to see its decode step times here beside the bound.")
        return
    if not hasattr(result.timings[0], "cached_spread_s"):
        st.caption("This Model lab result has no spread of its timings, so it is not shown.")
        return
    machine = roofline.measure_this_machine()
    width = shape.num_heads * (shape.head_dim or shape.hidden_size // shape.num_heads)
    contexts = [t.context for t in result.timings]
    bound_ms = [1e3 * roofline.decode_step_from_counts(result.num_params, result.weight_bytes, result.bytes_per_token,
                                                       shape.num_layers, width, c).seconds(machine) for c in contexts]
    measured = [(t.context, 1e3 * t.cached_s, 1e3 * (t.cached_spread_s[1] - t.cached_s),
                 1e3 * (t.cached_s - t.cached_spread_s[0])) for t in result.timings]
    st.plotly_chart(figures.step_time_vs_context(contexts, bound_ms, measured, machine.name), width="stretch")
    ratio = measured[-1][1] / bound_ms[-1]
    st.caption(f"{result.name} from the Model lab on {result.device}: measured medians (bars: fastest to slowest "
               f"step) against the roofline's least time on this machine. At {contexts[-1]:,} tokens the step "
               f"takes {ratio:.1f}× the bound: the rest is framework and kernel overhead, which a small model on "
               "a CPU pays in full and a large model on a GPU hides.")
