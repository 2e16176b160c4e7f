"""The "Memory bill" lesson without Streamlit: the shape the sliders describe, and the notes under the charts.

The page (lessons/memory_bill.py) keeps its sliders' numbers in session state under the keys of
slider_values; these functions turn them into a ModelShape and say whether it is still the preset
it started from.
"""

from __future__ import annotations

from dataclasses import replace

from kvviz.engine.cache_dtype import measured_bytes_per_token
from kvviz.engine.kv_cache import CacheShape, PagedKVCache
from kvviz.memory_bill import (
    QUANT_GROUP_SIZE,
    AttentionVariant,
    cache_format,
    compare_attention_variants,
    kv_bytes_per_token,
)
from kvviz.shapes import FULL, PRESETS, SLIDING, ModelShape, format_bytes
from kvviz.ui.text import plain

CUSTOM = "custom (sliders moved)"  # the preset box's entry once the sliders leave the preset's numbers
_MLA_KEYS = ("bill_layers", "bill_heads", "bill_latent", "bill_rope")  # an MLA model shows only these
_HEADS_KEYS = ("bill_layers", "bill_heads", "bill_kv_heads", "bill_head_dim", "bill_window")


def slider_values(preset: ModelShape) -> dict[str, int]:
    """The sliders' numbers for a preset, by widget key (0: no window, no latent)."""
    return {"bill_layers": preset.num_layers, "bill_heads": preset.num_heads or preset.num_kv_heads,
            "bill_kv_heads": preset.num_kv_heads, "bill_head_dim": preset.head_dim,
            "bill_window": preset.sliding_window or 0, "bill_latent": preset.kv_lora_rank or 0,
            "bill_rope": preset.qk_rope_head_dim or 0}


def is_preset(preset: ModelShape, values: dict[str, int]) -> bool:
    """Do the sliders that this kind of model shows still hold the preset's numbers?"""
    own = slider_values(preset)
    return all(values[key] == own[key] for key in (_MLA_KEYS if preset.kv_lora_rank else _HEADS_KEYS))


def shape_from_sliders(preset: ModelShape, values: dict[str, int]) -> ModelShape:
    """The preset with the sliders' numbers, named "<preset> (modified)" once they differ from it.

    Impossible numbers (KV heads that do not divide the query heads, a window longer than the
    context) raise kvviz's one-sentence ValueError.
    """
    name = preset.name if is_preset(preset, values) else f"{preset.name} (modified)"
    if preset.kv_lora_rank is not None:  # MLA: the latent and RoPE sizes, never KV heads or a window
        return replace(preset, name=name, num_layers=values["bill_layers"], num_heads=values["bill_heads"],
                       kv_lora_rank=values["bill_latent"], qk_rope_head_dim=values["bill_rope"])
    window, layers = values["bill_window"] or None, values["bill_layers"]
    layer_types = None  # no window, or not a hybrid: every layer alike
    if window and preset.layer_types:  # a hybrid keeps its pattern of sliding and full layers at any depth
        period = next(i + 1 for i, kind in enumerate(preset.layer_types) if kind != SLIDING)
        layer_types = tuple(SLIDING if (i + 1) % period else FULL for i in range(layers))
    return replace(preset, name=name, num_layers=layers, num_heads=values["bill_heads"],
                   num_kv_heads=values["bill_kv_heads"], head_dim=values["bill_head_dim"],
                   sliding_window=window, layer_types=layer_types)


def variants_note(shape: ModelShape, variants: list[AttentionVariant], dtype_name: str) -> str:
    """The caption under the MHA · GQA · MQA · MLA chart: what each bar counts and which baseline "× less" uses."""
    heads = shape.num_heads or shape.num_kv_heads
    value = shape.v_head_dim or shape.head_dim
    sizes = (f"keys of {shape.head_dim} and values of {value} numbers" if value != shape.head_dim
             else f"keys and values of {shape.head_dim} numbers")
    mha = variants[0]
    parts = [(f"All four for {shape.num_layers} layers and {heads} query heads, {sizes} per head, {dtype_name}. "
              f"The dark bar is how your settings attend; \"× less\" is against the MHA bar, where every head "
              f"caches its own key and value: {mha.values_per_token_per_layer:,} numbers per token and layer.")]
    mla = next(v for v in variants if v.name.startswith("MLA"))
    if shape.kv_lora_rank is not None:
        key_without_rope = shape.head_dim - shape.qk_rope_head_dim
        paper = 2 * heads * key_without_rope
        parts.append(f"The DeepSeek-V2 paper (Table 1) counts MHA as 2 × {heads} heads × {key_without_rope} = "
                     f"{paper:,} numbers, keys without their {shape.qk_rope_head_dim} RoPE values: "
                     f"{paper / mla.values_per_token_per_layer:.0f}× the {mla.values_per_token_per_layer:,}-number "
                     "latent, where the MHA bar is "
                     f"{mha.values_per_token_per_layer / mla.values_per_token_per_layer:.0f}×.")
    if mla.hypothetical:
        parts.append("The hatched MLA bar is hypothetical: this model has no latent, so the bar uses DeepSeek-V3's "
                     "proportions (a latent of 4 head sizes and a RoPE key of half a head) at this head size.")
    return " ".join(parts)


def measured_mla_note(lm) -> str:
    """Markdown: bytes per token and layer that kvviz's engine caches for an MLA model `lm` (a LoadedModel),
    measured from the storage tensor of a one-block paged cache, beside the bill's MLA row and MHA row
    for the same shape."""
    shape = lm.shape
    block_size = 16
    cache = PagedKVCache(CacheShape.from_model(lm.model), num_blocks=1, block_size=block_size, device=lm.device)
    measured = cache.nbytes // (block_size * shape.num_layers)  # the tensor's bytes ÷ token slots ÷ layers
    dtype_bytes = shape.dtype_bytes
    formula = kv_bytes_per_token(shape, dtype_bytes) // shape.num_layers
    mha = compare_attention_variants(shape, dtype_bytes)[0].bytes_per_token // shape.num_layers
    return (f"Measured in kvviz's engine on **{plain(lm.name)}** ({str(lm.dtype).removeprefix('torch.')}): its paged "
            f"cache holds **{measured:,} bytes** per token and layer, the storage tensor's bytes ÷ token slots "
            f"÷ layers. The formula: ({shape.kv_lora_rank} latent + {shape.qk_rope_head_dim} RoPE) × "
            f"{dtype_bytes} bytes = {formula:,} bytes. Its {shape.num_heads} heads caching their own K and V "
            f"would take {mha:,} bytes, {mha / measured:.1f}× more.")


def engine_bytes_note() -> str:
    """The 8-bit rows measured: bytes per token of kvviz's engine cache for the bundled model at each
    kv_cache_dtype, read off a PagedKVCache built in that dtype, beside this page's formula."""
    bundled = PRESETS["bundled"]
    rows = []
    for engine_dtype, bill_dtype in (("auto", "fp32"), ("int8", "int8"), ("fp8", "fp8")):
        measured = measured_bytes_per_token(bundled, engine_dtype)
        formula = kv_bytes_per_token(bundled, **cache_format(bill_dtype))
        label = "auto (fp32)" if engine_dtype == "auto" else engine_dtype
        rows.append(f"{label} **{measured:,} bytes** (formula {formula:,g} bytes)")
    return (f"**Measured in kvviz's engine** on the bundled model ({bundled.num_layers} layers, "
            f"{bundled.num_kv_heads} KV heads, head size {bundled.head_dim}), bytes per token by kv_cache_dtype: "
            + "; ".join(rows) + ". The engine's int8 and fp8 caches store one byte per value plus a float32 scale "
            f"per key row and per value row; the int8 formula counts a bf16 scale and zero point per group of "
            f"{QUANT_GROUP_SIZE} values, the fp8 formula the values alone.")


def pair_table(rows) -> str:
    """Two models' caches after the same text (kvviz.lessons.memory_bill.pair), as a Markdown table."""
    lines = ["| model | query heads per KV head | layers | one token, every layer | one more token past the "
             f"windows | {rows[0].tokens:,} tokens: formula | {rows[0].tokens:,} tokens: held by the engine |",
             "|---|---:|---|---:|---:|---:|---:|"]
    for row in rows:
        layers = " + ".join(f"{kind.layers} " + ("full" if kind.window is None else f"sliding ({kind.window:,})")
                            for kind in row.kinds)
        formula = sum(kind.formula_bytes for kind in row.kinds)
        lines.append(f"| {row.name} | {row.heads // row.kv_heads} ({row.heads} over {row.kv_heads}) | {layers} | "
                     f"{format_bytes(row.first_token_bytes)} | {format_bytes(row.later_token_bytes)} | "
                     f"{format_bytes(formula)} | {format_bytes(row.held_bytes)} |")
    return "\n".join(lines)
