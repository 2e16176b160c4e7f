"""Faster linear layers and norms for the engine's CPU float32 steps: weights laid out once for the
product, and RMSNorm in one compiled pass.

Each float32 nn.Linear keeps two copies of its weight W (out, in), made once, each laid out for its
product. A product of up to 256 rows (SMALL_ROWS: a decode step's batch) runs on W's panels, PANEL
outputs side by side per input, which a compiled kernel (small_products.c) reads once, in order, at
the memory's speed. A product of more rows (a prefill chunk) runs on W^T stored row by row, which MKL
multiplies without transposing, on a CPU made by Intel; on any other (mkl_first() False: AMD's, where
MKL does not take its fastest code) on W reordered into oneDNN's blocked layout (torch.ops.mkldnn,
the layout vLLM's CPU backend multiplies with too). A gated MLP (Llama, Qwen, Mistral, OLMo) packs
its gate and up projections as one weight, so both come out of one product, and applies silu(gate)
* up in one compiled pass (layer_ops.c); an attention with rotary embeddings (Llama, Qwen2) packs q,
k and v the same way and rotates its query and key heads in one compiled pass, in place (seven
PyTorch ops a layer before):

    linear(x)     ->  x @ W^T + b                                       on W's panels, W^T or oneDNN's W
    mlp(x)        ->  down_proj(silu_and_mul(x @ [W_gate; W_up]^T))     on the copies of [W_gate; W_up]
    attention(x)  ->  o_proj(attend(rotary(x @ [W_q; W_k; W_v]^T)))    attend: the model's attention function
    norm(x)       ->  rms_norm(x, weight, eps)                          one pass instead of six ops

Linears whose packed product replaced theirs (gate, up, q, k, v) get no copies of their own.

An RMSNorm (a module with a float32 `weight` and a `variance_epsilon`, as transformers' Llama,
Qwen, Mistral and others write it) is switched only where the kernel gives what its own forward
gives on a random input; one that scales by (1 + weight), as Gemma's does, keeps its own.

Measured on a 2-core AMD EPYC (Zen 4, AVX-512), SmolLM2's shapes, weights cold as in a step (30
copies of each in turn), a step's products together, medians of 6 rounds: at 1, 2, 8 and 16 rows the
panels took 13.4, 8.9-13.0, 13.3-15.2 and 21-23 ms, reading 28-33 GB/s (a plain sum of a tensor reads
31-33 here); oneDNN 19-21, 21-23, 19-24 and 25-28 ms; MKL on W^T 27, 36-49, 47-57 and 57-82 ms. From
32 to 128 rows the panels took 0.86-0.93 of oneDNN's time; from 256 to 2,048 the two were even
(0.96-1.04), MKL 1.14-1.27x behind oneDNN; oneDNN's time over W^T's for each shape alone: 0.19-0.97
at every row count from 1 to 2,048. On a 2-core Xeon (AVX-512, an earlier machine, where the panels
were not measured) it was the other way: oneDNN's over W^T's 1.01-1.44 for q/k/v, o and down at 2
to 2,048 rows, 1.16 for gate-up at 512, 1.05 for the head at 2,048.

Everything is decided once, when an engine installs into the model: which modules qualify (by
what they compute, checked on a random input, not by their class name), and whether the copies fit
(they cost at most twice the linear weights' memory, so they are made only when that is under a
quarter of the free memory). The verdict is kept on the model (`kvviz_why_not_packed`). At each call
a switched module asks one question, kvviz.engine.step_context.in_engine_step(): outside the engine's steps
(model.generate in another session, a lesson's no-cache twin) it runs exactly its own forward.
"""

from __future__ import annotations

import functools
import types
from pathlib import Path

import torch
import torch.nn.functional as F

from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.llama.modeling_llama import eager_attention_forward

from kvviz.engine.device_memory import available_memory_bytes
from kvviz.engine.cpu import kernels as cpu_kernels
from kvviz.engine.step_context import in_engine_step

CHECK_ROWS = 3  # rows of the random input each gated MLP and norm is checked on
PACK_MEMORY_FRACTION = 0.25  # the copies of the linear weights may take this much of free memory
SMALL_ROWS = range(1, 257)  # products of this many rows run on the panels (small_products.c)


@functools.cache
def mkl_first() -> bool:
    """Whether products of many rows run on W^T with MKL (a CPU made by Intel, or one whose maker cannot
    be read); False on AMD's, where they run on oneDNN's copy."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("vendor_id"):
                return line.split(":", 1)[1].strip() != "AuthenticAMD"
    except OSError:
        pass
    return True


class Packed:
    """A weight's two copies, kept beside a module: its panels, for products of a few rows, and a copy for
    many rows (W^T, or oneDNN's blocked layout where MKL does not come first). oneDNN's tensors cannot be
    deep-copied, so a copied model gets None here and packs again when an engine installs into it."""

    __slots__ = ("panels", "large", "in_features", "out_features")

    def __init__(self, panels: torch.Tensor | None, large: torch.Tensor, in_features: int, out_features: int):
        self.panels = panels  # (ceil(out / PANEL), in, PANEL); None without the compiled kernels
        self.large = large  # W^T (in, out) contiguous, or an opaque mkldnn tensor
        self.in_features, self.out_features = in_features, out_features

    def __deepcopy__(self, memo):
        return None

    @classmethod
    def of(cls, weight: torch.Tensor) -> "Packed":
        """weight: (out, in) float32 -> its panels and its copy for many rows."""
        weight = weight.detach()
        kernels = cpu_kernels.load()
        panels = kernels.pack_panels(weight) if kernels is not None else None
        large = weight.t().contiguous() if mkl_first() else torch.ops.mkldnn._reorder_linear_weight(weight, None)
        return cls(panels, large, weight.shape[1], weight.shape[0])

    def product(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """x: (..., in) -> (..., out): x @ W^T + b, on the copy laid out for this many rows."""
        rows = x.numel() // self.in_features
        if self.panels is not None and rows in SMALL_ROWS:
            flat = x.reshape(rows, self.in_features)
            out = cpu_kernels.load().small_product(flat if flat.stride(1) == 1 else flat.contiguous(), self.panels,
                                                   bias, self.out_features)
            return out.view(*x.shape[:-1], self.out_features)
        if self.large.is_mkldnn:
            return torch.ops.mkldnn._linear_pointwise(x, self.large, bias, "none", [], "")
        out = torch.matmul(x, self.large)
        return out if bias is None else out.add_(bias)


def install(model: torch.nn.Module) -> list[str]:
    """Switch the model's RMSNorms to the compiled kernel, and pack its float32 linears, gated MLPs and
    attention projections where the copies fit and switch those; returns the switched modules' names
    (none when the model is not on the CPU; only the norms when model.kvviz_why_not_packed says why the
    rest keep their own). Idempotent, and packs again after a deepcopy."""
    if next(model.parameters()).device.type != "cpu":
        return []
    with torch.inference_mode():
        norms = {name: m for name, m in model.named_modules() if _is_rms_norm(m)}  # no copies: always switched
    for module in norms.values():
        if "forward" not in vars(module):
            module.forward = types.MethodType(fused_rms_norm, module)
    linears = {name: m for name, m in model.named_modules()
               if type(m) is torch.nn.Linear and m.weight.dtype == torch.float32}
    model.kvviz_why_not_packed = why_not_packed(linears.values())
    if model.kvviz_why_not_packed is not None:
        return sorted(norms)
    try:
        with torch.inference_mode():
            mlps = {name: m for name, m in model.named_modules() if _is_gated_silu_mlp(m)}
            for module in mlps.values():
                if getattr(module, "kvviz_gate_up_packed", None) is None:
                    module.kvviz_gate_up_packed = Packed.of(torch.cat([module.gate_proj.weight,
                                                                       module.up_proj.weight]))
                if "forward" not in vars(module):
                    module.forward = types.MethodType(packed_gated_mlp, module)
            attentions = {name: m for name, m in model.named_modules() if _is_rotary_attention(m)}
            for module in attentions.values():
                if getattr(module, "kvviz_qkv_packed", None) is None:
                    parts = [module.q_proj, module.k_proj, module.v_proj]
                    module.kvviz_qkv_packed = Packed.of(torch.cat([p.weight for p in parts]))
                    module.kvviz_qkv_bias = None if parts[0].bias is None else torch.cat([p.bias for p in parts])
                if "forward" not in vars(module):
                    module.forward = types.MethodType(packed_attention, module)
            replaced = {f"{name}.{part}" for name in mlps for part in ("gate_proj", "up_proj")}
            replaced |= {f"{name}.{part}" for name in attentions for part in ("q_proj", "k_proj", "v_proj")}
            # only the packed copy multiplies
            linears = {name: m for name, m in linears.items() if name not in replaced}
            for module in linears.values():
                if getattr(module, "kvviz_packed", None) is None:
                    module.kvviz_packed = Packed.of(module.weight)
                if "forward" not in vars(module):
                    module.forward = types.MethodType(packed_linear, module)
    except (RuntimeError, AttributeError) as error:  # an op this build lacks
        for module in model.modules():
            for name in ("kvviz_packed", "kvviz_gate_up_packed", "kvviz_qkv_packed"):
                if hasattr(module, name):
                    setattr(module, name, None)  # the switched forwards then run the plain product
        model.kvviz_why_not_packed = (f"oneDNN could not pack the linear weights ({error}); "
                                      "linear layers keep MKL's product.")
        return sorted(norms)
    return sorted(linears) + sorted(mlps) + sorted(attentions) + sorted(norms)


def why_not_packed(linears) -> str | None:
    """Why these linears cannot be packed, in one sentence; None when they can."""
    if not torch.backends.mkldnn.is_available():
        return "This PyTorch has no oneDNN (mkldnn), so linear layers keep MKL's product."
    needed = 2 * sum(m.weight.nbytes for m in linears if getattr(m, "kvviz_packed", None) is None)
    if needed > PACK_MEMORY_FRACTION * available_memory_bytes(torch.device("cpu")):
        return (f"Copies of the linear weights ({needed / 2**30:.1f} GiB) would take over a quarter "
                "of the free memory, so linear layers keep MKL's product.")
    return None


def packed_linear(module: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """x: (..., in) -> (..., out): x @ W^T + b, on a copy of W inside the engine's steps."""
    packed = module.kvviz_packed
    if packed is None or not in_engine_step():
        return F.linear(x, module.weight, module.bias)
    return packed.product(x, module.bias)


def packed_gated_mlp(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """x: (..., hidden) -> (..., hidden): down(silu(gate(x)) * up(x)), gate and up in one packed
    product inside the engine's steps; elsewhere the module's own forward."""
    packed = module.kvviz_gate_up_packed
    if packed is None or not in_engine_step():
        return type(module).forward(module, x)
    gate_up = packed.product(x, None)  # (..., 2I)
    return module.down_proj(cpu_kernels.load().silu_and_mul(gate_up))  # (..., hidden)


def packed_attention(module: torch.nn.Module, hidden_states: torch.Tensor,
                     position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
                     attention_mask: torch.Tensor | None = None, **kwargs):
    """hidden_states: (B, T, hidden) -> ((B, T, hidden), attention weights or None): inside the engine's steps
    q, k and v come out of one packed product and the query and key heads are rotated in one compiled pass;
    elsewhere, or with a cache of transformers' own, the module's own forward."""
    packed = module.kvviz_qkv_packed
    if packed is None or not in_engine_step() or hidden_states.dtype != torch.float32 \
            or kwargs.get("cache") is not None or kwargs.get("past_key_values") is not None:
        return type(module).forward(module, hidden_states, position_embeddings=position_embeddings,
                                    attention_mask=attention_mask, **kwargs)
    kwargs.pop("cache", None)
    kwargs.pop("past_key_values", None)  # None: the engine keeps the cache
    return _attention_on_packed_qkv(module, packed, module.kvviz_qkv_bias, hidden_states, position_embeddings,
                                    attention_mask, **kwargs)


def _attention_on_packed_qkv(module, packed: Packed, bias: torch.Tensor | None, hidden_states, position_embeddings,
                             attention_mask, **kwargs):
    """What LlamaAttention.forward computes, with q, k, v from one product (bias: q's, k's and v's, or
    None) and the rotation compiled."""
    heads, kv_heads, head_dim = _attention_heads(module)
    *leading, hidden = hidden_states.shape  # (B, T)
    qkv = packed.product(hidden_states.reshape(-1, hidden), bias)  # (B*T, (H + 2 KVH) D)
    cos, sin = position_embeddings  # (B, T, D) each
    cpu_kernels.load().rotary_(qkv, heads + kv_heads, head_dim, cos, sin)  # the query and key heads, in place
    query, key, value = qkv.view(*leading, heads + 2 * kv_heads, head_dim).transpose(1, 2).split(
        [heads, kv_heads, kv_heads], dim=1)  # (B, H, T, D), (B, KVH, T, D), (B, KVH, T, D)
    interface = ALL_ATTENTION_FUNCTIONS.get_interface(module.config._attn_implementation, eager_attention_forward)
    out, weights = interface(module, query, key, value, attention_mask,
                             dropout=0.0 if not module.training else module.attention_dropout,
                             scaling=module.scaling, **kwargs)  # (B, T, H, D)
    return module.o_proj(out.reshape(*leading, -1).contiguous()), weights


def _attention_heads(module) -> tuple[int, int, int]:
    """(query heads, KV heads, head size) of an attention module with q_proj, k_proj and v_proj."""
    head_dim = module.head_dim
    return module.q_proj.out_features // head_dim, module.k_proj.out_features // head_dim, head_dim


def fused_rms_norm(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """x: (..., hidden) -> (..., hidden): the compiled RMSNorm inside the engine's float32 steps;
    elsewhere the module's own forward."""
    if not in_engine_step() or x.dtype != torch.float32 or module.weight.dtype != torch.float32:
        return type(module).forward(module, x)
    return cpu_kernels.load().rms_norm(x, module.weight, module.variance_epsilon)


def _is_rms_norm(module) -> bool:
    """A float32 `weight` (hidden,) and a `variance_epsilon`, computing weight * x / sqrt(mean(x^2) + eps):
    checked on a random input against the module's own forward; needs the compiled kernels."""
    weight, eps = getattr(module, "weight", None), getattr(module, "variance_epsilon", None)
    if not (isinstance(weight, torch.Tensor) and weight.dim() == 1 and weight.dtype == torch.float32
            and isinstance(eps, float)):
        return False
    if getattr(vars(module).get("forward"), "__func__", None) is fused_rms_norm:
        return True  # checked when it was switched
    kernels = cpu_kernels.load()
    return kernels is not None and _agrees_with_own_forward(
        module, weight.shape[0], lambda x: kernels.rms_norm(x, weight.detach(), eps), rtol=1e-5, atol=1e-6)


def _is_rotary_attention(module) -> bool:
    """q_proj, k_proj, v_proj and o_proj plain float32 linears (the first three all with a bias or all
    without), computing o_proj(attention(rotary(q), rotary(k), v)) as LlamaAttention does: checked on a
    random input, rotated by random angles, against the module's own forward, whose attention is then
    transformers' SDPA (outside the engine's steps kvviz's attention name runs SDPA). A model with a
    sliding window keeps its own (its forward may hand the window to attention from its config); so does
    one whose rotation covers part of a head, or one that normalises q and k. Needs the compiled kernels.
    A module that passes keeps the checked packed q/k/v (kvviz_qkv_packed, kvviz_qkv_bias) for install."""
    parts = [getattr(module, name, None) for name in ("q_proj", "k_proj", "v_proj", "o_proj")]
    config = getattr(module, "config", None)
    if not all(type(p) is torch.nn.Linear and p.weight.dtype == torch.float32 for p in parts) or config is None:
        return False
    if len({p.bias is None for p in parts[:3]}) != 1 or not isinstance(getattr(module, "head_dim", None), int) \
            or not isinstance(getattr(module, "scaling", None), float):
        return False
    if getattr(config, "sliding_window", None) is not None or getattr(module, "sliding_window", None) is not None:
        return False
    if getattr(vars(module).get("forward"), "__func__", None) is packed_attention:
        return True  # checked when it was switched, still float32
    kernels = cpu_kernels.load()
    heads, kv_heads, head_dim = _attention_heads(module)
    if kernels is None or head_dim % 2 or heads * head_dim != parts[0].out_features \
            or kv_heads * head_dim != parts[1].out_features or parts[1].out_features != parts[2].out_features:
        return False
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(1, CHECK_ROWS, parts[0].in_features, generator=generator)
    angles = torch.randn(1, CHECK_ROWS, head_dim // 2, generator=generator) * 3
    angles = torch.cat([angles, angles], dim=-1)
    rotation = (angles.cos(), angles.sin())
    bias = None if parts[0].bias is None else torch.cat([p.bias for p in parts[:3]])
    try:
        expected = type(module).forward(module, x, position_embeddings=rotation, attention_mask=None)[0]
        packed = Packed.of(torch.cat([p.weight for p in parts[:3]]))
        result = _attention_on_packed_qkv(module, packed, bias, x, rotation, None)[0]
    except Exception:  # not an attention module of this shape
        return False
    # the packed product sums in another order than three products: SmolLM2's outputs (up to 65) then differ
    # by up to 4e-4, a few millionths of their size; what computes something else misses by a good part of it
    agrees = (isinstance(expected, torch.Tensor) and expected.shape == result.shape
              and bool((result - expected).abs().max() <= 1e-4 * expected.abs().max()))
    if agrees:  # install switches it: the checked copy is the one it multiplies by, not packed a second time
        module.kvviz_qkv_packed, module.kvviz_qkv_bias = packed, bias
    return agrees


def _is_gated_silu_mlp(module) -> bool:
    """gate_proj, up_proj and down_proj plain float32 linears without bias, computing
    down(silu(gate(x)) * up(x)), checked on a random input; needs the compiled silu_and_mul."""
    parts = [getattr(module, name, None) for name in ("gate_proj", "up_proj", "down_proj")]
    if not all(type(p) is torch.nn.Linear and p.bias is None and p.weight.dtype == torch.float32 for p in parts):
        return False  # a copy cast to bfloat16 keeps its switched forward, which then runs its own
    if getattr(vars(module).get("forward"), "__func__", None) is packed_gated_mlp:
        return True  # checked when it was switched, still float32
    kernels = cpu_kernels.load()
    if kernels is None or parts[0].weight.shape != parts[1].weight.shape:
        return False
    gate_up_weight = torch.cat([parts[0].weight, parts[1].weight])  # (2I, hidden)
    return _agrees_with_own_forward(
        module, parts[0].in_features,
        lambda x: F.linear(kernels.silu_and_mul(F.linear(x, gate_up_weight)), parts[2].weight), rtol=1e-4, atol=1e-5)


def _agrees_with_own_forward(module, width: int, ours, rtol: float, atol: float) -> bool:
    """Whether ours(x) gives what the module's own forward gives on a random input x (CHECK_ROWS, width)."""
    x = torch.randn(CHECK_ROWS, width, generator=torch.Generator().manual_seed(0))
    try:
        expected = type(module).forward(module, x)
    except Exception:  # not a module that takes one tensor
        return False
    result = ours(x)
    return (isinstance(expected, torch.Tensor) and expected.shape == result.shape
            and torch.allclose(result, expected, rtol=rtol, atol=atol))
