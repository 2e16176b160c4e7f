"""Lesson 2: the memory bill. What the cache weighs, what fits, and what GQA, MQA and MLA save."""

import streamlit as st

from kvviz import memory_bill, shapes
from kvviz.lessons.memory_bill import figures
from kvviz.lessons.memory_bill import logic as bill
from kvviz.hub.fetch import fetch_command, fetched_folder
from kvviz.lessons.budget import click_seconds
from kvviz.lessons.memory_bill.state import BILL
from kvviz.lessons.memory_bill.pair import PAIR, PAIR_LEAST_TOKENS, PAIR_TOKENS, measure_pair, pair_tokens, pair_work
from kvviz.memory_bill import ACCELERATORS, GiB
from kvviz.models import TINY_MLA, default_heldout_text
from kvviz.shapes import MLA, PRESETS, SLIDING, format_bytes
from kvviz.ui.common import current_model, shared_model

DTYPES = ["fp32", "bf16", "fp8", "int4"]
CONTEXTS = [2**i for i in range(7, 21)]  # 128 tokens to 1M
BATCHES = [2**i for i in range(0, 11)]  # 1 to 1,024 requests
DEVICES = list(ACCELERATORS) + ["this machine", "custom size"]
DEFAULT_PRESET = "llama-3.1-8b"
GPU_COUNTS = [1, 2, 4, 8, 16]


def _load_preset() -> None:
    """Set the sliders to the chosen preset's numbers (picking "custom" leaves them as they are)."""
    name = BILL.preset
    if name == bill.CUSTOM:
        _slider_moved()  # sliders still on the preset: the box goes back to its name
    else:
        BILL.base = name
        st.session_state.update(bill.slider_values(PRESETS[name]))


def _slider_state() -> dict[str, int]:
    """The sliders' numbers; a slider this model does not show (KV heads for MLA) keeps the preset's."""
    return {key: st.session_state.get(key, value) for key, value in bill.slider_values(PRESETS[BILL.base]).items()}


def _slider_moved() -> None:
    """Show "custom" in the preset box once the sliders leave the preset, so that picking it again restores it."""
    base = PRESETS[BILL.base]
    BILL.preset = base.name if bill.is_preset(base, _slider_state()) else bill.CUSTOM


if not BILL.has("preset"):
    BILL.preset = DEFAULT_PRESET
    _load_preset()

st.title("The memory bill")
st.markdown(
    "Every attention layer keeps, for every token it has seen, one **key** and one **value** vector per "
    "**KV head**. Nothing else about the token is stored, so the bill is one multiplication: "
    "**2 × layers × KV heads × head size × tokens × requests × bytes per value**. Start from a real model, "
    "then move a slider and watch which factor the bill follows.")

controls, results = st.columns([1, 2], gap="large")
with results:  # what the class watches, right above the bill it changes (a 1280x720 screen holds both)
    context_col, batch_col, dtype_col, device_col = st.columns([1, 1, 1, 1.15])  # one-line labels in presenter type
    context_col.select_slider("Context", CONTEXTS, value=8192, key="bill_context",
                              format_func=lambda tokens: f"{tokens:,}", help="Tokens per request.")
    batch_col.select_slider("Batch", BATCHES, value=1, key="bill_batch", help="Requests at once.")
    dtype_col.select_slider("Cache dtype", DTYPES, value="bf16", key="bill_dtype",
                            format_func=lambda name: f"{name} ({memory_bill.bits_per_value(name):g} bits)",
                            help=f"Bits per cached value. int4 stores 4-bit codes plus a bf16 scale and zero point "
                                 f"for every {memory_bill.QUANT_GROUP_SIZE} values, as the Cache strategies lesson "
                                 "measures.")
    device_col.selectbox("Accelerator", DEVICES, key="bill_device")
    if BILL.device == "custom size":
        device_col.number_input("Memory (GiB)", 1, 4096, 48, key="bill_custom_gib")
with controls:
    st.selectbox("Start from a model", list(PRESETS) + [bill.CUSTOM], key="bill_preset", on_change=_load_preset,
                 help="Moving a slider below turns this into \"custom\"; pick the model again to restore its numbers.")
    if BILL.preset == bill.CUSTOM:
        st.caption(f"Sliders moved from **{BILL.base}**; pick it above to restore its numbers.")
    preset = PRESETS[BILL.base]
    st.slider("Layers", 1, 128, key="bill_layers", on_change=_slider_moved)
    st.slider("Query heads", 1, 128, key="bill_heads", on_change=_slider_moved)
    if preset.kv_lora_rank is None:
        st.slider("KV heads", 1, 128, key="bill_kv_heads", on_change=_slider_moved,
                  help="Heads whose keys and values are cached. Equal to the query heads: MHA; fewer: GQA; one: MQA. "
                       "Each KV head serves the same number of query heads, so it must divide them.")
        st.slider("Head size (values per key or value vector)", 8, 512, step=8, key="bill_head_dim",
                  on_change=_slider_moved)
        st.number_input("Sliding window in tokens (0: none)", 0, 2**21, step=512, key="bill_window",
                        on_change=_slider_moved,
                        help="Sliding-window layers keep only the newest tokens. In a hybrid model "
                             "(Gemma) only some layers slide.")
    else:  # MLA caches a latent per token, not K and V per head: only its two sizes apply
        st.number_input("MLA latent size (values cached per token and layer)", 16, 8192, step=64, key="bill_latent",
                        on_change=_slider_moved,
                        help="The compressed vector from which every head's key and value are rebuilt.")
        st.number_input("MLA RoPE key size (values cached beside the latent)", 8, 1024, step=16, key="bill_rope",
                        on_change=_slider_moved,
                        help="A small key that carries the rotary position, shared by all heads.")
    st.select_slider("Weights dtype (bytes per parameter)", DTYPES, value="bf16", key="bill_weights_dtype",
                     format_func=lambda name: f"{name} ({memory_bill.weight_bytes_per_param(name):g} B)",
                     help="Chosen apart from the cache: an int4 cache with bf16 weights is common. int4 weights "
                          f"carry a bf16 scale and zero point for every {memory_bill.WEIGHT_GROUP_SIZE} weights.")
    st.select_slider("GPUs (tensor parallel)", GPU_COUNTS, value=1, key="bill_gpus",
                     help="Each GPU runs a share of the heads and holds a share of every weight matrix.")
    st.slider("Share of memory the server may use", 0.5, 1.0, 0.9, 0.05, key="bill_utilization",
              help="Like vLLM's gpu_memory_utilization: the rest is held back for activations and the runtime.")

dtype_name = BILL.dtype
cache_format = memory_bill.cache_format(dtype_name)  # int4: codes + scales and zero points, bf16
weights_dtype_bytes = memory_bill.weight_bytes_per_param(BILL.weights_dtype)
context, batch, utilization = BILL.context, BILL.batch, BILL.utilization
device_name = BILL.device
device = int(BILL.custom_gib * GiB) if device_name == "custom size" else device_name


def per_token_by_kind(shape, by_kind: dict, tokens: int) -> str:
    """Markdown: what one more token costs in each kind of layer, and whether it still costs it now."""
    lines = ["**Per token, by layer type**"]
    for kind, cost in by_kind.items():
        layers = shape.layer_kinds.count(kind)
        if kind == SLIDING:
            still = "still growing" if tokens < shape.sliding_window else "full: older tokens drop out, cost now 0"
            lines.append(f"- {layers} sliding-window layers: **{format_bytes(cost)}** per token for the first "
                         f"{shape.sliding_window:,} tokens, then nothing ({still} at {tokens:,} tokens)")
        else:
            lines.append(f"- {layers} {shapes.KIND_LABELS[kind]} layers: **{format_bytes(cost)}** per token, "
                         "for every token")
    return "\n".join(lines)


def tensor_parallel(shape, gpus: int) -> None:
    """What each GPU holds when the model is split over `gpus` GPUs, and whether that fits one of them."""
    share = memory_bill.tensor_parallel_share(shape, gpus, context, batch, **cache_format, **weights_options)
    st.markdown(f"**Split over {gpus} GPUs (tensor parallel): each GPU holds**")
    a, b, c = st.columns(3)
    a.metric("Weights per GPU", format_bytes(share.weights_bytes_per_gpu), help=f"All weights ÷ {gpus}.")
    if shape.kv_lora_rank is not None:
        b.metric("KV heads per GPU", "whole latent", help="MLA's latent is not split by head: every GPU keeps it.")
    else:
        b.metric("KV heads per GPU", f"{share.kv_heads_per_gpu}",
                 help=f"{shape.num_kv_heads} KV heads over {gpus} GPUs"
                      + (f"; each KV head is copied onto {share.copies_per_kv_head} GPUs, because there are "
                         "fewer KV heads than GPUs." if share.copies_per_kv_head > 1 else "."))
    c.metric("Cache per GPU", format_bytes(share.cache_bytes_per_gpu))
    per_gpu_total = share.weights_bytes_per_gpu + share.cache_bytes_per_gpu
    verdict = "fits" if per_gpu_total <= usable_bytes else "does not fit"
    copies = share.copies_per_kv_head
    st.caption(f"Per GPU: {format_bytes(share.weights_bytes_per_gpu)} + {format_bytes(share.cache_bytes_per_gpu)} = "
               f"{format_bytes(per_gpu_total)}, which {verdict} in {format_bytes(usable_bytes)} usable. "
               + (f"With {copies} copies of each KV head the {gpus} GPUs hold "
                  f"{format_bytes(share.cache_bytes_all_gpus)} of cache together, {copies}× the single-device "
                  "bill." if copies > 1 else
                  f"Together the GPUs hold exactly the single-device bill of {format_bytes(cache_bytes)}."))


try:
    shape = bill.shape_from_sliders(preset, _slider_state())
    BILL.last_good = shape
    error = None
except ValueError as problem:  # one sentence from kvviz.shapes; show the last settings that worked
    error = str(problem)
    shape = BILL.get("last_good", preset)
variants = memory_bill.compare_attention_variants(shape, **cache_format)
cache_bytes = memory_bill.kv_cache_bytes(shape, context, batch, **cache_format)

total_bytes = memory_bill.memory_bytes(device)
usable_bytes = int(total_bytes * utilization)
weights_bytes = memory_bill.weights_bytes(shape, weights_dtype_bytes)
weights_options = {"weights_dtype_bytes": weights_dtype_bytes}
gpus, split_error = BILL.gpus, None
try:  # with tensor parallelism, what fits is asked of one GPU's share
    one_gpu = memory_bill.per_gpu_shape(shape, gpus)
except ValueError as problem:
    gpus, one_gpu, split_error = 1, shape, str(problem)
on_device = device_name if gpus == 1 else f"each of {gpus} × {device_name}"

with results:
    if error:
        st.error(error)
        st.caption("The numbers below are still those of the last settings that made sense.")
    per_token = memory_bill.kv_bytes_per_token(shape, **cache_format)
    by_kind = memory_bill.bytes_per_token_by_kind(shape, **cache_format)
    a, b, c = st.columns(3)
    a.metric("KV cache", format_bytes(cache_bytes),
             help=f"{batch:,} request(s) × {context:,} tokens, as kvviz.memory_bill.kv_cache_bytes computes it.")
    if SLIDING in by_kind:
        b.metric("Per token, at this length", format_bytes(cache_bytes / (context * batch)),
                 help="The bill ÷ tokens ÷ requests: sliding layers stop growing at their window, so the "
                      "average cost per token falls as the context grows.")
    else:
        b.metric("Per token", format_bytes(per_token), help="One more token in every layer's cache.")
    c.metric("Weights", format_bytes(weights_bytes),
             help=f"The preset's {shape.num_params:,} parameters × {weights_dtype_bytes:g} bytes; the sliders "
                  "change the cache, not the parameter count.")
    if split_error:
        st.warning(f"{split_error} The figures below are for one GPU.")
    summary = memory_bill.fit_summary(shape, context, batch, device, utilization=utilization, gpus=gpus,
                                      **cache_format, **weights_options)
    (st.success if summary.startswith("Fits") else st.warning)(summary)
    if SLIDING in by_kind:
        st.markdown(per_token_by_kind(shape, by_kind, context))
    st.markdown("**The formula, filled in**")
    for line in memory_bill.bill_breakdown(shape, context, batch, **cache_format):
        st.code(f"{shapes.KIND_LABELS[line.kind]}: {line.formula}", language=None, wrap_lines=True)
    if MLA in by_kind:  # the formula's MLA row against the engine's own tensor, on the loaded or the tiny MLA model
        loaded = current_model()
        st.caption(bill.measured_mla_note(loaded if loaded.shape.kv_lora_rank else shared_model(TINY_MLA)))
    if dtype_name == "fp8":  # the 8-bit row, measured: kvviz's engine can cache in int8 or fp8
        st.caption(bill.engine_bytes_note())
    if context > (shape.max_context or context):
        st.warning(f"{shape.name} was built for {shape.max_context:,} tokens; the bill above is for "
                   f"{context:,} anyway.")
    name_on_chart = device_name if device_name != "custom size" else "custom"
    st.plotly_chart(figures.memory_stack(name_on_chart if gpus == 1 else f"one of {gpus} × {name_on_chart}",
                                         total_bytes, usable_bytes,
                                         memory_bill.weights_bytes(one_gpu, weights_dtype_bytes),
                                         memory_bill.kv_cache_bytes(one_gpu, context, batch, **cache_format)),
                    width="stretch")
    room = memory_bill.cache_budget_bytes(shape, device, utilization=utilization, gpus=gpus, **weights_options)
    model_limit = shape.max_context or CONTEXTS[-1]
    longest = memory_bill.max_context(one_gpu, batch, device, utilization=utilization, context_limit=model_limit,
                                      **cache_format, **weights_options)
    requests = memory_bill.max_requests(one_gpu, context, device, utilization=utilization,
                                        **cache_format, **weights_options)
    slots = memory_bill.max_cached_tokens(one_gpu, device, utilization=utilization, **cache_format, **weights_options)
    a, b, c = st.columns(3)
    a.metric("Requests that fit", f"{requests:,}", help=f"Requests of {context:,} tokens each, at once.")
    b.metric("Longest context", f"{longest:,}",
             help=(f"Tokens each of {batch:,} requests can hold" if batch > 1 else "Tokens one request can hold")
                  + (", capped at the model's own context length." if longest == model_limit else "."))
    c.metric("Token slots", f"{slots:,}",
             help=f"{format_bytes(room)} left for the cache ÷ {format_bytes(per_token)} per token"
                  + ("." if gpus == 1 else f", both counted over all {gpus} GPUs."))
    st.caption(f"**The reverse questions.** On {on_device}, {requests:,} requests of {context:,} tokens fit "
               f"at once; {f'{batch:,} requests can each' if batch > 1 else 'one request can'} hold up to "
               f"{longest:,} tokens"
               + (" (the model's own limit)" if longest == model_limit else "")
               + f"; the cache has room for {slots:,} tokens in all.")

    if gpus > 1:
        tensor_parallel(shape, gpus)

st.subheader("Why the cache, not the weights, limits batch and context")
st.markdown(
    "The weights are paid once, however many people use the model. The cache is paid **per token, per "
    "request**: once the weights are loaded, what is left is shared by everyone in the batch. Double the "
    "context and only half as many requests fit; double the batch and each request gets half the context. "
    "The dashed red line is the room your accelerator leaves for the cache: where a line crosses it, "
    "memory runs out.")
left, right = st.columns([1, 3])
left.radio("Compare", ["models", "dtypes"], key="bill_compare", horizontal=True)
if BILL.compare == "models":
    right.multiselect("Models to compare (each in its own colour)", list(PRESETS),
                      default=["llama-3.1-70b", "qwen2.5-7b", "gemma-2-9b"], key="bill_compare_models",
                      max_selections=6)
    lines = [(shape, dtype_name, cache_format)] + [(PRESETS[name], dtype_name, cache_format)
                                                   for name in BILL.compare_models
                                                   if name != shape.name]  # yours is drawn already
else:
    right.caption("Your model in every dtype: same colour, one line style per dtype.")
    lines = [(shape, name, memory_bill.cache_format(name)) for name in DTYPES]
current = (shape, dtype_name, cache_format)
budget_label = f"room for the cache on {device_name if gpus == 1 else f'{gpus} × {device_name}'}: {format_bytes(room)}"

context_tab, batch_tab, variants_tab, layers_tab = st.tabs(
    ["Against context", "Against batch", "MHA · GQA · MQA · MLA", "Per layer"])
with context_tab:
    st.plotly_chart(figures.cache_vs_context(lines, CONTEXTS, batch, current, context, room, budget_label),
                    width="stretch")
with batch_tab:
    st.plotly_chart(figures.cache_vs_batch(lines, BATCHES, context, current, batch, room, budget_label),
                    width="stretch")
with variants_tab:
    st.markdown(
        "The bill counts **KV heads**, not query heads. *Multi-head attention* (MHA) caches keys and values for "
        "every head. *Grouped-query attention* (GQA) lets a group of query heads share one KV head, so the cache "
        "shrinks by the group size; *multi-query attention* (MQA) shares a single KV head among all of them. "
        "*Multi-head latent attention* (MLA, DeepSeek-V2 and V3) caches one compressed vector per token and "
        "layer. Conceptually each head's keys and values are projections of that vector; in practice the "
        "kernels fold those projections into the query and the output, and attend to the cached vectors.")
    st.plotly_chart(figures.attention_variants(variants, context, batch), width="stretch")
    st.caption(bill.variants_note(shape, variants, dtype_name))
with layers_tab:
    kinds = shape.layer_kinds
    st.plotly_chart(figures.layer_breakdown(memory_bill.kv_cache_bytes_per_layer(shape, context, batch, **cache_format),
                                            kinds), width="stretch")
    if SLIDING in kinds and len(set(kinds)) > 1:
        st.caption(f"A hybrid model: sliding-window layers stop growing at {shape.sliding_window:,} tokens, "
                   "full-attention layers keep every token. Try the context slider.")
    elif MLA in kinds:
        st.caption("Every MLA layer keeps one latent row per token instead of K and V for each head.")
    else:
        st.caption("Every layer keeps the same tokens, so every layer costs the same. Pick gemma-2-9b or "
                   "gemma-3-27b to see a hybrid of sliding-window and full-attention layers.")

st.subheader("Two real models, one prompt: SmolLM2 and Gemma 3")
st.markdown(
    "Both are small real models, but their caches are built differently. **SmolLM2-135M** shares **3 KV heads** "
    "among its 9 query heads (GQA) and all 30 of its layers keep every position. **Gemma 3 270M** has twice the "
    "parameters, yet shares **one KV head among 4 query heads** (MQA), and 15 of its 18 layers keep only a "
    "**window of the last 512 positions**: past it, each new token costs only its 3 full layers. Run the same "
    "text through both, cut to 2,000 of each model's tokens, and read what each engine's cache really holds.")
missing = [name for name in PAIR if fetched_folder(name) is None]
if missing:
    st.caption("This needs both models on the server: run "
               + " and ".join(f"`{fetch_command(name)}`" for name in missing)
               + " once (the app itself never downloads).")
else:
    # the models load on the click, not on every visit; the run takes what fits one click on this server now
    if st.button(f"Run up to {PAIR_TOKENS:,} tokens through both", key="bill_pair_run"):
        lms = [shared_model(name) for name in PAIR]
        tokens = pair_tokens(lms) or PAIR_LEAST_TOKENS  # none fits now: measure_pair refuses in a sentence
        del BILL.pair_error
        del BILL.pair_note
        if tokens < PAIR_TOKENS:
            BILL.pair_note = (
                f"{PAIR_TOKENS:,} tokens would take longer than one click's {click_seconds():,.0f} s on this server "
                f"now, so each model ran {tokens:,}, the most that fit (past Gemma 3's window of 512).")
        seconds = pair_work(lms, tokens).seconds(next(lms[0].model.parameters()).device)
        with st.spinner(f"Two prefills of {tokens:,} tokens; estimated about {seconds:,.0f} s on this server",
                        show_time=True):
            try:
                BILL.pair = measure_pair(lms, default_heldout_text(), tokens)
            except ValueError as error:  # WorkTooLarge on a slow server: one sentence
                BILL.pair_error = str(error)
    if BILL.pair_error:
        st.error(BILL.pair_error)
    elif BILL.pair_note:
        st.caption(BILL.pair_note)
    rows = BILL.pair
    if rows:
        st.markdown(bill.pair_table(rows))
        for row in rows:
            st.caption(f"**{row.name}**: "
                       + "; ".join(f"{kind.formula.split(' = ')[0]} = {format_bytes(kind.formula_bytes)}"
                                   f" by the formula, {format_bytes(kind.held_bytes)} held" for kind in row.kinds)
                       + ".")
