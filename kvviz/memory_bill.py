"""The memory bill: how many bytes a model's KV cache takes, and what fits on a device.

Every layer keeps, for every cached token, one key and one value vector per KV head:

    bytes = 2 (K and V) × layers × KV heads × head_dim × tokens × requests × bytes per value

Real models bend this formula in four ways, all handled here layer by layer:
sliding-window layers keep only the last `window` tokens; MLA layers (DeepSeek-V2/V3) keep one
compressed latent vector per token instead of K and V per head; quantized caches store a few
bits per value plus a scale and a zero point per group; and allocators round up (paged blocks)
or reserve ahead (a static cache sized for the longest request).

Pure Python: torch is imported only inside this_machine_bytes().
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace

from kvviz.shapes import FULL, MLA, SLIDING, ModelShape, check_positive, format_bytes

GiB = 2**30
UNBOUNDED_CONTEXT = 2**40  # max_context's search: a cache that still fits this many tokens has stopped growing


# --- Bytes per value -------------------------------------------------------------------------

DTYPE_BYTES = {"fp32": 4, "float32": 4, "fp16": 2, "float16": 2, "half": 2, "bf16": 2, "bfloat16": 2,
               "fp8": 1, "float8": 1, "int8": 1, "int4": 0.5}


def dtype_bytes(name: str) -> float:
    """Bytes per value for a dtype name ("bf16", "torch.float16", ...); int4 is 0.5, its codes alone."""
    key = str(name).lower().removeprefix("torch.")
    if key not in DTYPE_BYTES:
        raise ValueError(f"Unknown dtype {name!r}; use one of {', '.join(DTYPE_BYTES)}.")
    return DTYPE_BYTES[key]


# --- Quantized values: codes, plus a scale and a zero point per group --------------------------

QUANTIZED_BITS = {"int8": 8, "int4": 4}
QUANT_GROUP_SIZE = 64  # cache values per scale and zero point (transformers' QuantizedCache default)
WEIGHT_GROUP_SIZE = 128  # weights per scale and zero point (the usual GPTQ / AWQ group)


def quantized_row_bits(row_len: int, bits: int, group_size: int, scale_bytes: float) -> int:
    """Bits of one row of row_len values (a key, a value, MLA's latent) stored as `bits`-bit codes.

    Assumption (as in HQQ/quanto caches and kvviz.strategies.quantized): each group of group_size
    values along the row keeps its own scale and zero point, both in scale_bytes (the model's
    dtype); a row that group_size does not divide ends in a short group. At group 64 and bf16
    scales int4 costs 4 + 2 × 16 / 64 = 4.5 bits a value; at group 32, 5 bits.
    """
    groups = math.ceil(row_len / group_size)
    return row_len * bits + groups * 2 * round(scale_bytes * 8)


def cache_format(name: str, scale_bytes: float = 2, group_size: int = QUANT_GROUP_SIZE) -> dict:
    """kv_cache_bytes's dtype_bytes and options for a cache stored as `name`.

    int8 and int4 are quantized caches (codes + a scale and zero point per group, in scale_bytes);
    every other name stores plain values.
        kv_cache_bytes(shape, tokens, batch, **cache_format("int4"))
    """
    key = str(name).lower().removeprefix("torch.")
    if key in QUANTIZED_BITS:
        return {"dtype_bytes": scale_bytes, "quant_bits": QUANTIZED_BITS[key], "quant_group_size": group_size}
    return {"dtype_bytes": dtype_bytes(name)}


def bits_per_value(name: str, scale_bytes: float = 2, group_size: int = QUANT_GROUP_SIZE) -> float:
    """Bits one value costs in this format, its share of the group's scale and zero point included."""
    key = str(name).lower().removeprefix("torch.")
    if key in QUANTIZED_BITS:
        return quantized_row_bits(group_size, QUANTIZED_BITS[key], group_size, scale_bytes) / group_size
    return dtype_bytes(name) * 8


def weight_bytes_per_param(name: str) -> float:
    """Bytes one parameter costs in this dtype; int4/int8 weights pay a bf16 scale and zero point per 128."""
    return bits_per_value(name, 2, WEIGHT_GROUP_SIZE) / 8


# --- The forward question: how many bytes? -------------------------------------------------

def tokens_held(shape: ModelShape, kind: str, tokens: int, *, block_size: int | None = None,
                reserved_tokens: int | None = None) -> int:
    """Token slots one request occupies in one layer of this kind."""
    held = reserved_tokens if reserved_tokens is not None else tokens  # a static cache allocates ahead
    if kind == SLIDING:
        held = min(held, shape.sliding_window)  # older tokens are dropped
    if block_size is not None:
        held = math.ceil(held / block_size) * block_size  # the last block is allocated whole
    return held


def cached_rows(shape: ModelShape, kind: str) -> list[tuple[int, int]]:
    """What one token leaves in one layer of this kind: (row length, rows of that length).

    A key and a value per KV head (DeepSeek-style heads have keys wider than values), or MLA's one
    latent row with its RoPE key beside it."""
    if kind == MLA:
        return [(shape.kv_lora_rank + shape.qk_rope_head_dim, 1)]
    value_len = shape.v_head_dim or shape.head_dim
    if value_len == shape.head_dim:
        return [(shape.head_dim, 2 * shape.num_kv_heads)]
    return [(shape.head_dim, shape.num_kv_heads), (value_len, shape.num_kv_heads)]


def _layer_bits(shape, kind, held, dtype_bytes, quant_bits, quant_group_size, quant_residual_tokens):
    """Bits one request's cache takes in one layer of this kind, for `held` token slots."""
    rows = cached_rows(shape, kind)
    token_bits = sum(length * count for length, count in rows) * round(dtype_bytes * 8)
    if quant_bits is None:
        return held * token_bits
    quantized_token_bits = sum(count * quantized_row_bits(length, quant_bits, quant_group_size, dtype_bytes)
                               for length, count in rows)
    recent = min(held, quant_residual_tokens)  # KIVI-style: the newest tokens stay full precision
    return (held - recent) * quantized_token_bits + recent * token_bits


def _check_cache_args(tokens, batch, dtype_bytes, block_size, reserved_tokens, quant_bits,
                      quant_group_size, quant_residual_tokens):
    if not isinstance(tokens, int) or tokens < 0:
        raise ValueError(f"tokens must be a whole number of zero or more, not {tokens!r}.")
    check_positive("batch", batch)
    if not dtype_bytes or dtype_bytes <= 0 or (dtype_bytes * 8) % 1:
        raise ValueError(f"dtype_bytes must be a positive number of bytes in whole bits "
                         f"(like 2 or 0.5), not {dtype_bytes!r}.")
    check_positive("block_size", block_size, optional=True)
    check_positive("quant_group_size", quant_group_size)
    if quant_bits is not None and (not isinstance(quant_bits, int) or not 1 <= quant_bits <= 16):
        raise ValueError(f"quant_bits must be a whole number from 1 to 16, not {quant_bits!r}.")
    if quant_residual_tokens < 0:
        raise ValueError("quant_residual_tokens cannot be negative; use 0 to quantize every token.")
    if reserved_tokens is not None and reserved_tokens < tokens:
        raise ValueError(f"reserved_tokens ({reserved_tokens:,}) is smaller than tokens ({tokens:,}); "
                         "reserve at least as many slots as the request holds.")


def kv_cache_bytes_per_layer(shape: ModelShape, tokens: int, batch: int = 1, dtype_bytes: float = 2, *,
                             block_size: int | None = None, reserved_tokens: int | None = None,
                             quant_bits: int | None = None, quant_group_size: int = 64,
                             quant_residual_tokens: int = 0) -> list[int]:
    """Bytes of K/V cache in each layer for `batch` requests of `tokens` tokens each.

    block_size: paged allocation, each request's tokens rounded up to whole blocks.
    reserved_tokens: static allocation, each request holds this many slots whatever its length.
    quant_bits: quantized cache; see _layer_bits for the scale/zero-point assumption.
    """
    _check_cache_args(tokens, batch, dtype_bytes, block_size, reserved_tokens, quant_bits,
                      quant_group_size, quant_residual_tokens)
    result = []
    for kind in shape.layer_kinds:
        held = tokens_held(shape, kind, tokens, block_size=block_size, reserved_tokens=reserved_tokens)
        bits = _layer_bits(shape, kind, held, dtype_bytes, quant_bits, quant_group_size, quant_residual_tokens)
        result.append(-(-batch * bits // 8))  # whole bytes, rounded up, in exact integers
    return result


def kv_cache_bytes(shape: ModelShape, tokens: int, batch: int = 1, dtype_bytes: float = 2,
                   **cache_options) -> int:
    """Total bytes of K/V cache; options as in kv_cache_bytes_per_layer.

    >>> kv_cache_bytes(ModelShape(num_layers=32, num_kv_heads=8, head_dim=128), tokens=8192)
    1073741824
    """
    return sum(kv_cache_bytes_per_layer(shape, tokens, batch, dtype_bytes, **cache_options))


def kv_bytes_per_token(shape: ModelShape, dtype_bytes: float = 2, **cache_options) -> int:
    """Bytes one more token adds across all layers while it is inside every window.

    Block rounding is a property of a whole request, not of one token, so it is left out here.
    """
    cache_options = {**cache_options, "block_size": None}
    return kv_cache_bytes(shape, 1, 1, dtype_bytes, **cache_options)


@dataclass(frozen=True, slots=True)
class BillLine:
    """The layers of one kind: how many, what each request keeps in each, the bytes, the formula."""
    kind: str
    num_layers: int
    tokens_held: int
    num_bytes: int
    formula: str


def bill_breakdown(shape: ModelShape, tokens: int, batch: int = 1, dtype_bytes: float = 2,
                   **cache_options) -> list[BillLine]:
    """One BillLine per layer kind present (full, sliding, MLA), each with its filled-in formula."""
    per_layer = kv_cache_bytes_per_layer(shape, tokens, batch, dtype_bytes, **cache_options)
    lines = []
    for kind in (FULL, SLIDING, MLA):
        layer_bytes = [b for k, b in zip(shape.layer_kinds, per_layer) if k == kind]
        if layer_bytes:
            held = tokens_held(shape, kind, tokens, block_size=cache_options.get("block_size"),
                               reserved_tokens=cache_options.get("reserved_tokens"))
            total = sum(layer_bytes)
            formula = _formula(shape, kind, len(layer_bytes), tokens, held, batch, dtype_bytes, cache_options)
            lines.append(BillLine(kind, len(layer_bytes), held, total,
                                  f"{formula} = {total:,} bytes ({format_bytes(total)})"))
    return lines


def _formula(shape, kind, num_layers, tokens, held, batch, dtype_bytes, options) -> str:
    """The left-hand side of the bill for one layer kind, every factor named."""
    block_size, reserved = options.get("block_size"), options.get("reserved_tokens")
    quant_bits, residual = options.get("quant_bits"), options.get("quant_residual_tokens", 0)
    value_len = shape.v_head_dim or shape.head_dim
    kv_heads_text = f"{shape.num_kv_heads} KV head" + ("s" if shape.num_kv_heads != 1 else "")  # MQA: one
    if kind == MLA:
        row = f"({shape.kv_lora_rank} latent + {shape.qk_rope_head_dim} RoPE) dims"
        factors = [f"{num_layers} layers"]
    elif value_len != shape.head_dim:  # one key row and one narrower value row per KV head
        row = f"({shape.head_dim} K + {value_len} V) dims"
        factors = [f"{num_layers} layers", kv_heads_text]
    else:
        row = f"{shape.head_dim} dims"
        factors = ["2 (K and V)", f"{num_layers} layers", kv_heads_text]
    unpaged = min(reserved or tokens, shape.sliding_window) if kind == SLIDING else (reserved or tokens)
    notes = [note for note, applies in (
        ("reserved", reserved is not None),
        ("window", kind == SLIDING and shape.sliding_window < (reserved or tokens)),
        (f"{unpaged:,} rounded up to {block_size}-token blocks", held != unpaged)) if applies]
    token_text = f"{held:,} tokens" + (f" ({', '.join(notes)})" if notes else "")
    request_text = f"{batch:,} request" + ("s" if batch != 1 else "")
    value_text = f"{dtype_bytes:g} byte" + ("s" if dtype_bytes != 1 else "")
    if quant_bits is None:
        return " × ".join(factors + [row, token_text, request_text, value_text])
    group_size = options.get("quant_group_size", QUANT_GROUP_SIZE)
    groups = sum(math.ceil(length / group_size) for length, _ in cached_rows(shape, kind))  # per row above
    quantized = f"{row} × {quant_bits} bits ÷ 8 + {groups} groups × 2 (scale, zero) × {value_text}"
    recent = min(held, residual)
    if not recent:
        return " × ".join(factors + [token_text, request_text, f"({quantized})"])
    # KIVI-style split: the newest tokens are still full precision, the older ones quantized
    mixed = f"[{held - recent:,} tokens × ({quantized}) + {recent:,} recent tokens × {row} × {value_text}]"
    return f"{token_text}: " + " × ".join(factors + [request_text, mixed])


def weights_bytes(shape: ModelShape, dtype_bytes: float = 2) -> int:
    """Bytes of the model's weights: parameter count × bytes per parameter."""
    if shape.num_params is None:
        raise ValueError(f"The shape {shape.name!r} has no parameter count; "
                         "set num_params to weigh its weights.")
    return math.ceil(shape.num_params * dtype_bytes)


def bytes_per_token_by_kind(shape: ModelShape, dtype_bytes: float = 2, **cache_options) -> dict[str, int]:
    """Bytes one more token adds in all layers of each kind (a sliding layer: only until its window is full)."""
    result: dict[str, int] = {}
    per_layer = kv_cache_bytes_per_layer(shape, 1, 1, dtype_bytes, **{**cache_options, "block_size": None})
    for kind, layer_bytes in zip(shape.layer_kinds, per_layer):
        result[kind] = result.get(kind, 0) + layer_bytes
    return result


# --- Tensor parallelism: what each GPU holds --------------------------------------------------

@dataclass(frozen=True, slots=True)
class TensorParallelShare:
    """One GPU's share when a model's heads and matrices are split over `gpus` GPUs."""
    gpus: int
    kv_heads_per_gpu: int  # for MLA: the whole latent, which every GPU keeps
    copies_per_kv_head: int  # GPUs that hold the same KV head (1 unless KV heads < GPUs)
    weights_bytes_per_gpu: int
    cache_bytes_per_gpu: int
    cache_bytes_all_gpus: int  # replicated heads counted once per copy


def per_gpu_shape(shape: ModelShape, gpus: int) -> ModelShape:
    """One GPU's share under tensor parallelism, as a shape of its own (the shape itself for 1 GPU).

    Each GPU runs num_heads / gpus query heads, keeps the KV heads they read and holds 1 / gpus of
    every weight matrix, as vLLM and Megatron split a model. With fewer KV heads than GPUs each
    GPU keeps one KV head, copied onto gpus / kv_heads GPUs (every GPU needs the keys its query
    heads read). MLA's latent is not split by head, so every GPU keeps all of it. Every bill of
    this module, applied to the returned shape, answers for one GPU.
    """
    check_positive("gpus", gpus)
    if gpus == 1:
        return shape
    heads, kv = shape.num_heads or shape.num_kv_heads, shape.num_kv_heads
    if heads % gpus:
        raise ValueError(f"{heads} query heads do not split evenly over {gpus} GPUs; "
                         f"pick a GPU count that divides {heads}.")
    if shape.kv_lora_rank is not None:
        kv_per_gpu = kv
    elif kv >= gpus:
        if kv % gpus:
            raise ValueError(f"{kv} KV heads do not split evenly over {gpus} GPUs; "
                             f"pick a GPU count that divides {kv}.")
        kv_per_gpu = kv // gpus
    else:
        if gpus % kv:
            raise ValueError(f"{gpus} GPUs cannot share {kv} KV heads evenly; pick a multiple of {kv}.")
        kv_per_gpu = 1
    num_params = None if shape.num_params is None else -(-shape.num_params // gpus)
    return replace(shape, name=f"{shape.name} (1 of {gpus} GPUs)", num_heads=heads // gpus,
                   num_kv_heads=kv_per_gpu, num_params=num_params)


def tensor_parallel_share(shape: ModelShape, gpus: int, tokens: int, batch: int = 1, dtype_bytes: float = 2,
                          *, weights_dtype_bytes: float | None = None, **cache_options) -> TensorParallelShare:
    """What each of `gpus` GPUs holds when the model is split over them (see per_gpu_shape)."""
    one = per_gpu_shape(shape, gpus)
    copies = gpus if shape.kv_lora_rank is not None else max(1, gpus // shape.num_kv_heads)
    cache = kv_cache_bytes(one, tokens, batch, dtype_bytes, **cache_options)
    weights = weights_bytes(one, weights_dtype_bytes or dtype_bytes)
    return TensorParallelShare(gpus, one.num_kv_heads, copies, weights, cache, cache * gpus)


# --- The reverse questions: what fits? --------------------------------------------------------

# Nominal capacity as sold; memory chips come in binary sizes, so "80GB" holds 80 GiB. CUDA reports
# a little less (ECC, driver reservation); this_machine_bytes() measures the real number.
ACCELERATORS = {name: size * GiB for name, size in (
    ("H100 80GB", 80), ("H200 141GB", 141), ("A100 40GB", 40), ("A100 80GB", 80),
    ("L4 24GB", 24), ("RTX 4090 24GB", 24), ("T4 16GB", 16))}


def this_machine_bytes() -> int:
    """Memory of this machine as measured: the first CUDA GPU's total, else the RAM's total."""
    try:
        import torch  # lazy: the bill must not need torch
        if torch.cuda.is_available():
            return torch.cuda.get_device_properties(0).total_memory
    except ImportError:
        pass
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024  # the file counts kibibytes
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def memory_bytes(spec: str | int) -> int:
    """Bytes for an accelerator name, "this machine", a byte count, or a size like "48GiB" / "48GB"."""
    if isinstance(spec, int) and not isinstance(spec, bool):
        check_positive("memory size", spec)
        return spec
    text = str(spec).strip()
    by_name = {name.lower(): size for name, size in ACCELERATORS.items()}
    if text.lower() in by_name:
        return by_name[text.lower()]
    if text.lower() == "this machine":
        return this_machine_bytes()
    for suffix, unit in (("gib", GiB), ("gb", 10**9), ("mib", 2**20), ("mb", 10**6), ("", 1)):
        number = text.lower().removesuffix(suffix).strip()
        try:
            size = round(float(number) * unit)
        except (ValueError, OverflowError):  # not a number, or inf / nan
            continue
        if size > 0:
            return size
    raise ValueError(f"Unknown memory size {spec!r}; give an accelerator ({', '.join(ACCELERATORS)}), "
                     "'this machine', or a size like '48GiB'.")


def cache_budget_bytes(shape: ModelShape, device_memory: str | int, dtype_bytes: float = 2,
                       utilization: float = 0.9, *, weights_dtype_bytes: float | None = None, gpus: int = 1) -> int:
    """Bytes left for the cache: the usable share of memory minus the weights (0 if they don't fit).

    gpus > 1: the room of all of them together under tensor parallelism, counted in bytes of the
    unsplit bill (one GPU's room × the share of the KV heads it holds), so it compares with
    kv_cache_bytes(shape, ...): a KV head copied onto two GPUs adds no room.
    """
    if not 0 < utilization <= 1:
        raise ValueError(f"utilization must be above 0 and at most 1, not {utilization!r}.")
    one = per_gpu_shape(shape, gpus)
    usable = int(memory_bytes(device_memory) * utilization)  # like vLLM's gpu_memory_utilization
    room = max(0, usable - weights_bytes(one, weights_dtype_bytes or dtype_bytes))
    shares = 1 if shape.kv_lora_rank is not None else shape.num_kv_heads // one.num_kv_heads
    return room * shares


def max_cached_tokens(shape: ModelShape, device_memory: str | int, dtype_bytes: float = 2,
                      utilization: float = 0.9, *, weights_dtype_bytes: float | None = None, **cache_options) -> int:
    """Token slots a paged pool holds when every layer stores every slot (vLLM's "KV cache size")."""
    budget = cache_budget_bytes(shape, device_memory, dtype_bytes, utilization,
                                weights_dtype_bytes=weights_dtype_bytes)
    return budget // kv_bytes_per_token(shape, dtype_bytes, **cache_options)


def max_requests(shape: ModelShape, context: int, device_memory: str | int, dtype_bytes: float = 2,
                 utilization: float = 0.9, *, weights_dtype_bytes: float | None = None, **cache_options) -> int:
    """How many requests of `context` tokens fit at once (sliding layers cost at most their window)."""
    check_positive("context", context)
    budget = cache_budget_bytes(shape, device_memory, dtype_bytes, utilization,
                                weights_dtype_bytes=weights_dtype_bytes)
    return budget // kv_cache_bytes(shape, context, 1, dtype_bytes, **cache_options)


def max_context(shape: ModelShape, batch: int, device_memory: str | int, dtype_bytes: float = 2,
                utilization: float = 0.9, *, context_limit: int | None = None,
                weights_dtype_bytes: float | None = None, **cache_options) -> int:
    """The longest context each of `batch` requests can have, capped at the model's max_context.

    Beyond a sliding window only full-attention layers keep growing, so the cost is not a
    straight line; the search asks kv_cache_bytes itself rather than inverting a formula.
    """
    budget = cache_budget_bytes(shape, device_memory, dtype_bytes, utilization,
                                weights_dtype_bytes=weights_dtype_bytes)

    def fits(tokens):
        return kv_cache_bytes(shape, tokens, batch, dtype_bytes, **cache_options) <= budget
    limit = context_limit or shape.max_context
    if limit is not None and fits(limit):
        return limit
    low, high = 0, 1  # double high until it no longer fits, then bisect between low and high
    while fits(high):
        low, high = high, high * 2
        if high > UNBOUNDED_CONTEXT:
            raise ValueError(f"The cache of {shape.name!r} stops growing past its sliding window, so the "
                             "context is unbounded; give context_limit to bound the answer.")
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def fit_summary(shape: ModelShape, tokens: int, batch: int, device_memory: str | int, dtype_bytes: float = 2,
                utilization: float = 0.9, *, gpus: int = 1, weights_dtype_bytes: float | None = None,
                **cache_options) -> str:
    """One sentence: does this bill fit on that memory, and what room is left?

    dtype_bytes is the cache's; weights_dtype_bytes the weights' (default: the same). gpus > 1:
    the model is split by tensor parallelism and every figure is one GPU's (per_gpu_shape)."""
    one = per_gpu_shape(shape, gpus)
    usable = int(memory_bytes(device_memory) * utilization)
    weights = weights_bytes(one, weights_dtype_bytes or dtype_bytes)
    if weights > usable:
        if gpus == 1:
            whose, verb, advice = "the weights alone", "exceed", "use a smaller dtype or split the model across devices"
        else:
            whose, verb, advice = "each GPU's share of the weights", "exceeds", "use a smaller dtype or more GPUs"
        return (f"Does not fit: {whose} ({format_bytes(weights)}) {verb} the {format_bytes(usable)} "
                f"usable ({utilization:.0%} of memory); {advice}.")
    cache = kv_cache_bytes(one, tokens, batch, dtype_bytes, **cache_options)
    verdict = "Fits" if weights + cache <= usable else "Does not fit"
    where, each = ("", "") if gpus == 1 else (f" on each of {gpus} GPUs", " per GPU")
    room = max_requests(one, max(tokens, 1), device_memory, dtype_bytes, utilization,
                        weights_dtype_bytes=weights_dtype_bytes, **cache_options)
    return (f"{verdict}{where}: weights {format_bytes(weights)} + cache {format_bytes(cache)}{each} of "
            f"{format_bytes(usable)} usable ({utilization:.0%}); room for {room:,} such requests at once.")


# --- Attention variants for the same model size -----------------------------------------------

@dataclass(frozen=True, slots=True)
class AttentionVariant:
    name: str
    values_per_token_per_layer: int
    bytes_per_token: int
    this_model: bool = False  # how the shape itself attends
    hypothetical: bool = False  # sizes the model does not have (a latent for a model without MLA)


def compare_attention_variants(shape: ModelShape, dtype_bytes: float = 2, *, gqa_kv_heads: int | None = None,
                               **cache_options) -> list[AttentionVariant]:
    """MHA, GQA, MQA and MLA cache per token for one model's layers and query heads.

    Every head keeps a key of head_dim values and a value of v_head_dim (DeepSeek-V3: 192 and 128),
    so MHA caches heads × (key + value) values per token and layer: 40,960 for DeepSeek-V3, 71×
    its 576-value latent (the DeepSeek-V2 paper's Table 1 counts 2 × heads × 128 = 32,768 instead,
    keys without their RoPE part). GQA shows the model's own KV heads, or 8 (or the nearest divisor
    of the query heads below it) for MHA, MQA and MLA models. A model without MLA gets DeepSeek-V3's
    latent scaled to its head size (4 × head_dim + head_dim / 2), marked hypothetical.
    """
    heads = shape.num_heads or shape.num_kv_heads
    mla = shape.kv_lora_rank is not None
    if gqa_kv_heads is None:
        own = not mla and 1 < shape.num_kv_heads < heads
        gqa_kv_heads = shape.num_kv_heads if own else next(d for d in range(min(8, heads), 0, -1) if heads % d == 0)
    if heads % gqa_kv_heads:
        raise ValueError(f"{heads} query heads cannot be shared evenly by {gqa_kv_heads} KV heads; "
                         f"pick a number of KV heads that divides {heads}.")
    heads_only = replace(shape, num_heads=heads, num_kv_heads=heads, kv_lora_rank=None, qk_rope_head_dim=None)
    key, value = shape.head_dim, shape.v_head_dim or shape.head_dim
    widths = f"K {key} + V {value}" if key != value else f"{key} dims"
    latent = shape.kv_lora_rank or 4 * key  # DeepSeek-V3: 512 = 4 × 128
    rope = shape.qk_rope_head_dim or max(1, key // 2)  # DeepSeek-V3: 64 = 128 / 2
    own_kind = "MLA" if mla else "MHA" if shape.num_kv_heads == heads else "MQA" if shape.num_kv_heads == 1 else "GQA"
    rows = [("MHA", f"MHA ({heads} KV heads, {widths})", replace(heads_only, num_kv_heads=heads)),
            ("GQA", f"GQA ({gqa_kv_heads} KV heads, {widths})", replace(heads_only, num_kv_heads=gqa_kv_heads)),
            ("MQA", f"MQA (1 KV head, {widths})", replace(heads_only, num_kv_heads=1)),
            ("MLA", f"MLA (latent {latent} + RoPE {rope}" + (")" if mla else ", hypothetical)"),
             replace(heads_only, kv_lora_rank=latent, qk_rope_head_dim=rope))]
    variants = []
    for kind, name, variant in rows:
        values = sum(length * count for length, count in cached_rows(variant, variant.layer_kinds[0]))
        variants.append(AttentionVariant(name, values, kv_bytes_per_token(variant, dtype_bytes, **cache_options),
                                         this_model=kind == own_kind, hypothetical=kind == "MLA" and not mla))
    return variants
