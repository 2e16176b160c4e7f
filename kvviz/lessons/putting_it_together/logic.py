"""Putting it together: which cache and which strategy for three jobs, with the loaded model's bill.

The article ends by setting one request beside a serving fleet: for one request the idea is
simple (compute the prefix once, reuse its keys and values); for many, the question is how to fit
their growing caches into limited memory, and dynamic and static caches, grouped-query attention
and paged allocation each answer a different part of it. This page says what to pick for a
script, a chat server and a long-context job, each with its bill.

Every number here is computed from the model's config with kvviz.memory_bill (the article's
formula, with the options each strategy changes), not measured: the lessons before this one
checked that same formula against the bytes the engine's and the strategies' tensors hold.

    jobs(lm.shape, dtype_bytes=4, tokens=128, requests=16, window=64)
    choices(lm.shape, dtype_bytes=4, tokens=512, window=64)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvviz.engine.config import DEFAULTS
from kvviz.memory_bill import kv_cache_bytes
from kvviz.shapes import ModelShape

BLOCK_SIZE = DEFAULTS.block_size  # the engine's default block, as in the Paged lesson
QUANT_GROUP = 32  # values per scale and zero point: the Cache strategies lesson's default


def quant_group(shape: ModelShape) -> int:
    """The quantization group the Cache strategies lesson uses on this model: 32, or a shorter head."""
    return min(QUANT_GROUP, shape.head_dim)


@dataclass(frozen=True, slots=True)
class Choice:
    """One way to hold a long request's cache, and its bill."""

    key: str  # full, mha, mqa, int8, int4, window, paged
    name: str
    num_bytes: int  # for one request at the chosen context
    catch: str  # what it costs or needs


@dataclass(frozen=True, slots=True)
class Job:
    """A kind of work, the cache and strategy that suit it, and the bill that says why."""

    name: str
    workload: str
    advice: str
    bill: list[tuple[str, int]]  # (what, bytes), computed


def whole_context(shape: ModelShape) -> int:
    """The longest context the model was built for (its config's), the long-context job's length."""
    if shape.max_context is None:
        raise ValueError("This model's config states no context length, so there is no whole context to bill; "
                         "load a model whose config gives max_position_embeddings.")
    return shape.max_context


def choices(shape: ModelShape, dtype_bytes: float, tokens: int, window: int) -> list[Choice]:
    """What each way of holding the cache does to one request of `tokens` tokens, the full cache first.

    Shape changes (MHA, MQA, a window) are what-ifs about the architecture; they are left out
    where they do not apply (a model that already has them, or an MLA model, which caches a latent)."""
    group = quant_group(shape)
    rows = [Choice("full", "full cache (this model as it is)", kv_cache_bytes(shape, tokens, 1, dtype_bytes),
                   "every token's keys and values, exactly")]
    mla = shape.kv_lora_rank is not None
    if not mla and shape.num_heads and shape.num_heads != shape.num_kv_heads:
        rows.append(Choice("mha", f"MHA: all {shape.num_heads} query heads cached",
                           kv_cache_bytes(replace(shape, num_kv_heads=shape.num_heads), tokens, 1, dtype_bytes),
                           f"what this model's grouped-query attention ({shape.num_kv_heads} KV heads) avoids"))
    if not mla and shape.num_kv_heads > 1:
        rows.append(Choice("mqa", "MQA: one KV head",
                           kv_cache_bytes(replace(shape, num_kv_heads=1), tokens, 1, dtype_bytes),
                           "an architecture chosen in training (or uptraining), not a cache setting"))
    for bits, catch in ((8, "a small rounding error in every key and value"),
                        (4, "a larger rounding error; Cache strategies measures both")):
        rows.append(Choice(f"int{bits}", f"int{bits} cache, groups of {group}",
                           kv_cache_bytes(shape, tokens, 1, dtype_bytes, quant_bits=bits, quant_group_size=group),
                           catch + " (scales and zero points counted)"))
    if not mla:
        windowed = replace(shape, sliding_window=window, layer_types=None)
        rows.append(Choice("window", f"sliding window of {window:,} tokens in every layer",
                           kv_cache_bytes(windowed, tokens, 1, dtype_bytes),
                           "safe only in layers trained with that window; elsewhere older tokens are lost"))
    rows.append(Choice("paged", f"paged, blocks of {BLOCK_SIZE}",
                       kv_cache_bytes(shape, tokens, 1, dtype_bytes, block_size=BLOCK_SIZE),
                       "the same keys and values; at most one block's empty slots more"))
    return rows


def jobs(shape: ModelShape, dtype_bytes: float, tokens: int, requests: int, window: int) -> list[Job]:
    """A script (one request), a chat server (`requests` at once) and a long-context job (the whole
    context), each with its advice and bill. `tokens`: the length of a script's or a chat's request."""
    context = whole_context(shape)
    if not 1 <= tokens <= context:
        raise ValueError(f"A request of {tokens:,} tokens does not fit this model's {context:,}-token context; "
                         f"pick 1 to {context:,} tokens.")
    one = kv_cache_bytes(shape, tokens, 1, dtype_bytes)
    reserved_one = kv_cache_bytes(shape, tokens, 1, dtype_bytes, reserved_tokens=context)
    exact = kv_cache_bytes(shape, tokens, requests, dtype_bytes)
    paged = kv_cache_bytes(shape, tokens, requests, dtype_bytes, block_size=BLOCK_SIZE)
    reserved = kv_cache_bytes(shape, tokens, requests, dtype_bytes, reserved_tokens=context)
    long = {choice.key: choice.num_bytes for choice in choices(shape, dtype_bytes, context, window)}
    script = Job(
        "A script", f"one request of {tokens:,} tokens",
        "A **dynamic** cache: it grows with the text and reserves nothing. A **static** one only if the "
        "code is compiled (torch.compile, CUDA graphs), which wants one shape at every step.",
        [("dynamic", one), (f"static, reserved for the whole {context:,}-token context", reserved_one)])
    server = Job(
        "A chat server", f"{requests} requests of about {tokens:,} tokens, lengths unknown ahead",
        f"A **paged** cache in blocks of {BLOCK_SIZE} with **continuous batching** and **prefix caching**: "
        "memory is taken a block at a time, requests join and leave at every step, and a shared system "
        "prompt is stored once.",
        [("each request reserving the whole context", reserved), ("paged", paged),
         ("of which empty slots in last blocks", paged - exact)])
    long_job = Job(
        "A long-context job", f"one request of the whole {context:,}-token context",
        "Bytes per token decide. **GQA or MQA** come with the model; a **quantized** cache works on any "
        "model; a **sliding window** only in layers trained with one.",
        [("full cache", long["full"]), ("int8 cache", long["int8"]), ("int4 cache", long["int4"])])
    return [script, server, long_job]
