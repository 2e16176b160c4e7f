"""Why decode is memory-bound: bytes read and FLOPs of one step, and the roofline they sit under.

A decode step runs one new token per request through every weight matrix (2 FLOPs per weight and
token) and reads every such matrix once, plus each request's whole cache. The input embedding is no
such matrix: a lookup reads one row per token (a few KiB), so an untied embedding is neither read
whole nor multiplied; a tied one is, once, as the output projection. A few FLOPs per byte read is far
below what an accelerator can do per byte its memory delivers, so the step waits on memory: its time
is bytes ÷ bandwidth, and batching (more tokens per weight read) is what raises the ceiling.

Pure Python except `measure_this_machine`, which times torch on this machine.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, replace

from kvviz import memory_bill
from kvviz.memory_bill import QUANT_GROUP_SIZE, kv_cache_bytes
from kvviz.shapes import ModelShape, format_bytes

# The three words of the roofline, as the lesson defines them on screen.
DEFINITIONS = (
    ("Arithmetic intensity", ("The FLOPs a step does for each byte it reads from memory. A decode step "
                              "multiplies each weight it reads by one token per request, so it does about 2 FLOPs "
                              "per weight: about 1 FLOP per byte in bf16.")),
    ("Roofline", ("The fastest a step can run at a given intensity: the smaller of the chip's peak FLOP/s and "
                  "its memory bandwidth × the intensity. Below the ridge the memory slope is the roof; above it, "
                  "the flat compute peak.")),
    ("Ridge point", ("The intensity where the two roofs meet: peak FLOP/s ÷ bandwidth in bytes/s. A step with "
                     "fewer FLOPs per byte than that waits on memory, however fast the chip computes.")),
)


@dataclass(frozen=True)
class Accelerator:
    name: str
    peak_flops: float  # dense 16-bit FLOP/s (this machine: measured fp32 matmul)
    bandwidth: float  # bytes/s from memory
    memory_bytes: int  # what it holds: weights and cache must fit in it
    note: str

    @property
    def ridge(self) -> float:
        """FLOPs per byte where the roof turns: below it, memory bounds the time."""
        return self.peak_flops / self.bandwidth


# Vendor data sheets: dense BF16 tensor-core peak (no sparsity) and HBM bandwidth, SXM parts.
# Memory sizes as the Memory bill counts them (kvviz.memory_bill.ACCELERATORS).
ACCELERATORS = {a.name: a for a in (
    Accelerator("H100 SXM", 989e12, 3.35e12, memory_bill.ACCELERATORS["H100 80GB"],
                "NVIDIA data sheet: 989 TFLOP/s BF16 dense, 3.35 TB/s HBM3, 80 GB"),
    Accelerator("H200 SXM", 989e12, 4.8e12, memory_bill.ACCELERATORS["H200 141GB"],
                "NVIDIA data sheet: 989 TFLOP/s BF16 dense, 4.8 TB/s HBM3e, 141 GB"),
    Accelerator("A100 80GB SXM", 312e12, 2.039e12, memory_bill.ACCELERATORS["A100 80GB"],
                "NVIDIA data sheet: 312 TFLOP/s BF16 dense, 2.0 TB/s HBM2e, 80 GB"),
    Accelerator("A100 40GB", 312e12, 1.555e12, memory_bill.ACCELERATORS["A100 40GB"],
                "NVIDIA data sheet: 312 TFLOP/s BF16 dense, 1.6 TB/s HBM2, 40 GB"),
)}


# Mixture-of-experts models read only the experts each token is routed to, so "every weight once"
# does not hold and the bytes read depend on the routing; the roofline view leaves them out.
MIXTURE_OF_EXPERTS = {"mixtral-8x7b", "deepseek-v3"}


@dataclass(frozen=True)
class StepCost:
    """One decode step of `batch` requests, each with `context` tokens in its cache."""

    label: str
    batch: int
    context: int
    weight_bytes: int  # read this step: every matrix that multiplies the tokens
    cache_bytes: int
    flops: float
    held_bytes: int  # what must sit in memory for it: all weights (the embedding too) and the cache

    @property
    def bytes_read(self) -> int:
        return self.weight_bytes + self.cache_bytes

    @property
    def intensity(self) -> float:
        """FLOPs per byte read."""
        return self.flops / self.bytes_read

    def seconds(self, device: Accelerator) -> float:
        """The roofline's lower bound on the step time: the slower of compute and memory."""
        return max(self.flops / device.peak_flops, self.bytes_read / device.bandwidth)

    def bound(self, device: Accelerator) -> str:
        return "memory" if self.intensity < device.ridge else "compute"

    def fits(self, device: Accelerator) -> bool:
        """Do the weights and the cache fit in the device's memory at all?"""
        return self.held_bytes <= device.memory_bytes

    def tokens_per_second(self, device: Accelerator) -> float:
        """The ceiling: tokens generated per second if the step ran exactly at the roof."""
        return self.batch / self.seconds(device)


def untied_embedding_params(shape: ModelShape) -> int:
    """Parameters of an input embedding that is not also the output layer (0 if tied or not known).

    Llama-3.1-8B: 128,256 × 4,096 = 525,336,576 of its 8,030,261,248."""
    if shape.tied_embeddings is False and shape.vocab_size and shape.hidden_size:
        return shape.vocab_size * shape.hidden_size
    return 0


def multiplied_params(shape: ModelShape, num_params: int) -> int:
    """Parameters every token multiplies (2 FLOPs each): all but an untied input embedding."""
    return num_params - untied_embedding_params(shape)


def decode_step(shape: ModelShape, num_params: int, context: int, *, batch: int = 1, weight_bytes: float = 2,
                cache_bytes: float = 2, label: str = "decode", cache_per_token: int | None = None,
                **cache_options) -> StepCost:
    """Bytes and FLOPs of one decode step.

    Reads: every multiplied weight once (shared by the batch) + each request's cache for `context`
    tokens (the memory bill; cache_options as kvviz.memory_bill.kv_cache_bytes takes them; or the
    engine's measured `cache_per_token`, all layers, when given). FLOPs:
    2 per multiplied weight per token, plus attention's q·Kᵀ and probabilities·V, 2 × 2 × heads ×
    head_dim per cached token per layer.
    """
    if context < 1 or batch < 1:
        raise ValueError("context and batch must be at least 1 token and 1 request.")
    multiplied = multiplied_params(shape, num_params)
    if cache_per_token is None:
        cache = kv_cache_bytes(shape, context, batch, cache_bytes, **cache_options)
    else:
        cache = cache_per_token * context * batch
    heads = shape.num_heads or shape.num_kv_heads
    attention = 4 * shape.num_layers * heads * shape.head_dim * context
    return StepCost(label, batch, context, round(multiplied * weight_bytes), cache,
                    batch * (2 * multiplied + attention), round(num_params * weight_bytes) + cache)


def prefill_step(shape: ModelShape, num_params: int, prompt_tokens: int, *, weight_bytes: float = 2,
                 cache_bytes: float = 2) -> StepCost:
    """The prefill of one prompt: every multiplied weight read once for all its tokens, so many FLOPs per byte."""
    multiplied = multiplied_params(shape, num_params)
    heads = shape.num_heads or shape.num_kv_heads
    # causal attention: query i reads i + 1 keys, about T²/2 in all
    attention = 4 * shape.num_layers * heads * shape.head_dim * prompt_tokens * (prompt_tokens + 1) // 2
    written = kv_cache_bytes(shape, prompt_tokens, 1, cache_bytes)
    return StepCost("prefill", 1, prompt_tokens, round(multiplied * weight_bytes), written,
                    2 * multiplied * prompt_tokens + attention, round(num_params * weight_bytes) + written)


def variants(shape: ModelShape, num_params: int, context: int, *, batch: int = 1, weight_bytes: float = 2,
             cache_bytes: float = 2, cache_per_token: int | None = None) -> list[StepCost]:
    """The same step with this model's KV heads (its cache at the engine's measured `cache_per_token`
    when given), with every head cached (MHA), one (MQA), and int8/int4 caches."""
    heads = shape.num_heads or shape.num_kv_heads
    cached = (f"MLA latent {shape.kv_lora_rank} + RoPE {shape.qk_rope_head_dim}" if shape.kv_lora_rank is not None
              else f"{shape.num_kv_heads} KV heads")
    rows = [decode_step(shape, num_params, context, batch=batch, weight_bytes=weight_bytes, cache_bytes=cache_bytes,
                        cache_per_token=cache_per_token, label=f"this model ({cached})")]
    if shape.kv_lora_rank is not None:  # MLA caches a latent, not heads: only the dtype moves it
        heads = shape.num_kv_heads
    if shape.num_kv_heads != heads:
        rows.append(decode_step(replace(shape, num_kv_heads=heads), num_params, context, batch=batch,
                                weight_bytes=weight_bytes, cache_bytes=cache_bytes, label=f"MHA ({heads} KV heads)"))
    if shape.num_kv_heads != 1 and shape.kv_lora_rank is None:
        rows.append(decode_step(replace(shape, num_kv_heads=1), num_params, context, batch=batch,
                                weight_bytes=weight_bytes, cache_bytes=cache_bytes, label="MQA (1 KV head)"))
    for bits in (8, 4):  # codes + a scale and zero point per group, in the model's dtype: the Memory bill's int4
        if bits / 8 < cache_bytes:
            per_value = memory_bill.bits_per_value(f"int{bits}", cache_bytes, QUANT_GROUP_SIZE)
            rows.append(decode_step(shape, num_params, context, batch=batch, weight_bytes=weight_bytes,
                                    cache_bytes=cache_bytes, quant_bits=bits, quant_group_size=QUANT_GROUP_SIZE,
                                    label=f"int{bits} cache ({per_value:g} bits a value with its scales)"))
    return rows


def what_if_problems(shape: ModelShape, step: StepCost, device: Accelerator) -> list[str]:
    """One sentence for each reason this step could not run as asked: memory, and the model's context."""
    problems = []
    if not step.fits(device):
        problems.append(f"This step needs {format_bytes(step.held_bytes)} in memory (weights "
                        f"{format_bytes(step.held_bytes - step.cache_bytes)} + "
                        f"cache {format_bytes(step.cache_bytes)}), "
                        f"more than the {format_bytes(device.memory_bytes)} of the {device.name}, so no ceiling is "
                        "shown; lower the requests or the tokens, or split the model over GPUs (Memory bill).")
    if shape.max_context and step.context > shape.max_context:
        problems.append(f"{shape.name} was built for {shape.max_context:,} tokens and cannot attend to "
                        f"{step.context:,}, so these figures describe a step it could never run.")
    return problems


@functools.lru_cache(maxsize=1)
def measure_this_machine(size: int = 1024, megabytes: int = 128, repeats: int = 5) -> Accelerator:
    """This machine's roof, measured once per process: a square fp32 matmul's FLOP/s and a large
    copy's bytes/s (read + write), each the median of `repeats` warm runs."""
    import torch  # deferred on purpose: the roofline's arithmetic is pure Python; only this measurement needs torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    def median_seconds(work) -> float:
        work()  # warm up
        times = []
        for _ in range(repeats):
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            work()
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        return sorted(times)[len(times) // 2]

    a = torch.randn(size, size, device=device)  # (n, n)
    b = torch.randn(size, size, device=device)  # (n, n)
    flops = 2 * size**3 / median_seconds(lambda: a @ b)
    source = torch.empty(megabytes * 2**20 // 4, device=device)  # fp32
    target = torch.empty_like(source)
    bandwidth = 2 * source.nbytes / median_seconds(lambda: target.copy_(source))
    name = torch.cuda.get_device_name(0) if device.type == "cuda" else "this machine (CPU)"
    return Accelerator(name, flops, bandwidth, memory_bill.this_machine_bytes(),
                       f"measured here: {size}×{size} fp32 matmul and a {megabytes} MiB copy, "
                       f"median of {repeats} warm runs")


def decode_step_from_counts(num_params: int, weight_bytes: int, bytes_per_token: int, num_layers: int,
                            attention_width: int, context: int) -> StepCost:
    """The same bound from a measured model's own counts (Model lab): weights' nbytes, cache bytes per
    token, and attention_width = query heads × head_dim."""
    attention = 4 * num_layers * attention_width * context
    cache = bytes_per_token * context
    return StepCost("decode", 1, context, weight_bytes, cache, 2 * num_params + attention, weight_bytes + cache)
