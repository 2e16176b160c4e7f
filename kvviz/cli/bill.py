"""`python -m kvviz bill`: print the memory bill of a model, formula and all.

kvviz/cli/main.py owns the command line; it calls add_bill_arguments() on its `bill` subparser and
prints what run_bill() returns. run_bill raises ValueError with one sentence for bad input.
"""
from __future__ import annotations

import argparse

from kvviz import memory_bill, shapes


def add_bill_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the `bill` options to a (sub)parser."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--preset", help=f"a known model: {', '.join(shapes.PRESETS)} (default: bundled)")
    source.add_argument("--model", help="a Hugging Face id in the local cache, or a folder with config.json")
    parser.add_argument("--tokens", type=int, default=8192, help="tokens per request (default: 8192)")
    parser.add_argument("--batch", type=int, default=1, help="requests at once (default: 1)")
    parser.add_argument("--dtype", default="bf16",
                        help=f"cache and weights dtype: {', '.join(memory_bill.DTYPE_BYTES)}")
    parser.add_argument("--block-size", type=int, default=None, help="paged cache: round up to blocks of this size")
    parser.add_argument("--quant-bits", type=int, default=None, help="quantized cache: bits per value")
    parser.add_argument("--quant-group-size", type=int, default=64, help="values sharing one scale and zero point")
    parser.add_argument("--memory", default="H100 80GB",
                        help="device memory: an accelerator name, 'this machine', or a size like 48GiB")


def run_bill(args: argparse.Namespace) -> str:
    """The bill as text: the model, each layer kind's formula filled in, the total, weights, fit."""
    model = getattr(args, "model", None)
    # --model bundled, as load_model reads it
    preset = "bundled" if model == "bundled" else getattr(args, "preset", None)
    shape = (shapes.shape_from_pretrained(model) if model and model != "bundled"
             else shapes.get_preset(preset or "bundled"))
    dtype_name = getattr(args, "dtype", "bf16")
    dtype_bytes = memory_bill.dtype_bytes(dtype_name)
    tokens, batch = getattr(args, "tokens", 8192), getattr(args, "batch", 1)
    options = {"block_size": getattr(args, "block_size", None), "quant_bits": getattr(args, "quant_bits", None),
               "quant_group_size": getattr(args, "quant_group_size", 64)}
    device = getattr(args, "memory", "H100 80GB")

    lines = [f"KV cache bill for {shape.name}", "  " + _describe(shape),
             f"  {tokens:,} tokens × {batch:,} request{'s' if batch != 1 else ''}, "
             f"{dtype_name} ({_bytes_word(dtype_bytes)} per value)"
             + (f", {options['quant_bits']}-bit cache" if options["quant_bits"] else "")]
    if shape.max_context and tokens > shape.max_context:  # allowed: the lesson lets you ask anyway
        lines.append(f"  note: {tokens:,} tokens is beyond the model's {shape.max_context:,}-token context")
    lines.append("")
    for line in memory_bill.bill_breakdown(shape, tokens, batch, dtype_bytes, **options):
        lines += [f"{shapes.KIND_LABELS[line.kind]} ({line.num_layers} layers):", f"  {line.formula}"]
    total = memory_bill.kv_cache_bytes(shape, tokens, batch, dtype_bytes, **options)
    per_token = memory_bill.kv_bytes_per_token(shape, dtype_bytes, **options)
    lines += ["", f"KV cache total: {total:,} bytes ({shapes.format_bytes(total)}); "
                  f"{per_token:,} bytes per token inside every window"]
    if shape.num_params is None:
        lines.append("Weights: unknown (the config gives no parameter count and no local checkpoint was found)")
    else:
        weights = memory_bill.weights_bytes(shape, dtype_bytes)
        lines.append(f"Weights ({dtype_name}): {shape.num_params:,} parameters × {_bytes_word(dtype_bytes)} = "
                     f"{weights:,} bytes ({shapes.format_bytes(weights)})")
        name = device if isinstance(device, str) else f"{device:,} bytes"
        lines.append(f"On {name}: " + memory_bill.fit_summary(shape, tokens, batch, device, dtype_bytes, **options))
    return "\n".join(lines)


def _describe(shape: shapes.ModelShape) -> str:
    """One line: layers by kind, heads, sizes, parameters, context."""
    kinds = shape.layer_kinds
    counts = ", ".join(f"{kinds.count(kind)} {shapes.KIND_LABELS[kind]}"
                       for kind in (shapes.FULL, shapes.SLIDING, shapes.MLA) if kind in kinds)
    parts = [f"{shape.num_layers} layers ({counts})"]
    if shape.num_heads:
        parts.append(f"{shape.num_heads} query heads")
    parts.append(f"{shape.num_kv_heads} KV heads of {shape.head_dim} dims")
    if shape.sliding_window and shapes.SLIDING in kinds:
        parts.append(f"window {shape.sliding_window:,}")
    if shape.kv_lora_rank:
        parts.append(f"MLA latent {shape.kv_lora_rank} + RoPE {shape.qk_rope_head_dim}")
    if shape.hidden_size:
        parts.append(f"hidden {shape.hidden_size:,}")
    if shape.num_params:
        parts.append(f"{shape.num_params / 1e9:.2f}B parameters" if shape.num_params >= 1e9
                     else f"{shape.num_params / 1e6:.1f}M parameters")
    if shape.max_context:
        parts.append(f"context up to {shape.max_context:,}")
    return ", ".join(parts)


def _bytes_word(count: float) -> str:
    return f"{count:g} byte" + ("" if count == 1 else "s")


def add_vllm_arguments(parser) -> None:
    """--against-vllm and what it needs."""
    parser.add_argument("--against-vllm", action="store_true",
                        help="start vLLM with --kv-space and compare its allocation with the bill (needs --model)")
    parser.add_argument("--kv-space", default="256MiB", help="with --against-vllm: KV cache space given to vLLM")
    parser.add_argument("--vllm-python", default=None,
                        help="vLLM's interpreter (default: $KVVIZ_VLLM_PYTHON or .venv-vllm/bin/python)")


def bill_against_vllm(args) -> str:
    from kvviz.vllm import backend as vllm  # deferred on purpose: it imports torch, which the bill does without

    if not args.model:
        raise ValueError("--against-vllm needs --model FOLDER (or 'bundled'): vLLM must load the model itself.")
    python = vllm.require_python(args.vllm_python)
    folder = vllm.model_folder(args.model)
    shape = shapes.shape_from_pretrained(folder)
    dtype_bytes = memory_bill.dtype_bytes(args.dtype)
    dtype = {4: "float32", 2: "bfloat16" if "bf" in args.dtype else "float16"}.get(dtype_bytes)
    if dtype is None:
        raise ValueError(f"vLLM runs this comparison in float32, float16 or bfloat16, not {args.dtype!r}.")
    kv_bytes = memory_bill.memory_bytes(args.kv_space)
    context = min(args.tokens, shape.max_context or args.tokens)
    result = vllm.check_result(vllm.run_jobs([vllm.allocation_job(folder, dtype, kv_bytes, context, args.block_size)],
                                             python)[0],
                               args.model)
    return format_comparison(shape.name, dtype, kv_bytes, context, result["block_size"],
                             vllm.compare_allocation(shape, dtype_bytes, kv_bytes, context, result))


def format_comparison(name: str, dtype: str, kv_bytes: int, context: int, block_size: int, c: dict) -> str:
    k, v = c["kvviz"], c["vllm"]
    rows = [("KV blocks", f"{k['num_blocks']:,}", f"{v['num_blocks']:,}"),
            ("tokens that fit", f"{k['kv_cache_tokens']:,}", f"{v['kv_cache_tokens']:,}"),
            (f"requests of {context:,} tokens at once", f"{k['max_concurrency']:.2f}", f"{v['max_concurrency']:.2f}")]
    lines = [f"{name}, {dtype}, {kv_bytes:,} bytes ({shapes.format_bytes(kv_bytes)}) of KV space, "
             f"blocks of {block_size}",
             f"{'':<36}{'kvviz bill':>14}{'vLLM':>14}"]
    lines += [f"{label:<36}{a:>14}{b:>14}" for label, a, b in rows]
    lines.append(c["explanation"])
    return "\n".join(lines)
