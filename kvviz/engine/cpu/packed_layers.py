"""Faster linear layers for the engine's CPU float32 steps: weights packed for oneDNN.

Each float32 nn.Linear keeps a second copy of its weight, reordered once into oneDNN's blocked
layout (torch.ops.mkldnn, the layout vLLM's CPU backend multiplies with too). Inside the engine's
forward pass the layer multiplies with that copy; in an interleaved A/B over the bench's mixed
workload that took 0.80-0.83 of the time of MKL's plain product, with identical outputs. A gated
MLP (Llama, Qwen, Mistral, OLMo) packs its gate and up projections as one weight, so both come out
of one product, and applies silu(gate) * up in one compiled pass (layer_ops.c):

    linear(x)  ->  x @ W^T + b                                       on the packed W
    mlp(x)     ->  down_proj(silu_and_mul(x @ [W_gate; W_up]^T))     on the packed [W_gate; W_up]

Everything is decided once, when an engine installs into the model: which modules qualify (by
what they compute, checked on a random input, not by their class name), and whether the copies fit
(they cost as much memory as the linear weights, so they are made only when that is under a
quarter of the free memory). The verdict is kept on the model (`kvviz_why_not_packed`). At each
call a switched module asks one question, kvviz.engine.step_context.in_engine_step(): outside the
engine's steps (model.generate in another session, a lesson's no-cache twin) it runs exactly its
own forward.
"""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F

from kvviz.engine.cache_setup import available_memory_bytes
from kvviz.engine.cpu import kernels as cpu_kernels
from kvviz.engine.step_context import in_engine_step

CHECK_ROWS = 3  # rows of the random input each gated MLP is checked on
PACK_MEMORY_FRACTION = 0.25  # packed copies of the linear weights may take this much of free memory


class Packed:
    """A oneDNN-packed weight, kept beside a module. oneDNN's tensors cannot be deep-copied, so a
    copied model gets None here and packs again when an engine installs into it."""

    __slots__ = ("weight",)

    def __init__(self, weight: torch.Tensor):
        self.weight = weight  # opaque mkldnn tensor

    def __deepcopy__(self, memo):
        return None

    @classmethod
    def of(cls, weight: torch.Tensor) -> "Packed":
        """weight: (out, in) float32 -> its packed copy."""
        return cls(torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None))


def install(model: torch.nn.Module) -> list[str]:
    """Pack the model's float32 linears and gated MLPs where the copies fit, and switch them;
    returns the switched modules' names (none when the model is not on the CPU, or when
    model.kvviz_why_not_packed says why). Idempotent, and packs again after a deepcopy."""
    if next(model.parameters()).device.type != "cpu":
        return []
    linears = {name: m for name, m in model.named_modules()
               if type(m) is torch.nn.Linear and m.weight.dtype == torch.float32}
    model.kvviz_why_not_packed = why_not_packed(linears.values())
    if model.kvviz_why_not_packed is not None:
        return []
    try:
        with torch.inference_mode():
            for module in linears.values():
                if getattr(module, "kvviz_packed", None) is None:
                    module.kvviz_packed = Packed.of(module.weight)
                if "forward" not in vars(module):
                    module.forward = types.MethodType(packed_linear, module)
            mlps = {name: m for name, m in model.named_modules() if _is_gated_silu_mlp(m)}
            for module in mlps.values():
                if getattr(module, "kvviz_gate_up_packed", None) is None:
                    module.kvviz_gate_up_packed = Packed.of(torch.cat([module.gate_proj.weight,
                                                                       module.up_proj.weight]))
                if "forward" not in vars(module):
                    module.forward = types.MethodType(packed_gated_mlp, module)
    except (RuntimeError, AttributeError) as error:  # an op this build lacks
        for module in model.modules():
            for name in ("kvviz_packed", "kvviz_gate_up_packed"):
                if hasattr(module, name):
                    setattr(module, name, None)  # the switched forwards then run the plain product
        model.kvviz_why_not_packed = f"oneDNN could not pack the linear weights ({error}); linear layers keep MKL's product."
        return []
    return sorted(linears) + sorted(mlps)


def why_not_packed(linears) -> str | None:
    """Why these linears cannot be packed, in one sentence; None when they can."""
    if not torch.backends.mkldnn.is_available():
        return "This PyTorch has no oneDNN (mkldnn), so linear layers keep MKL's product."
    needed = sum(m.weight.nbytes for m in linears if getattr(m, "kvviz_packed", None) is None)
    if needed > PACK_MEMORY_FRACTION * available_memory_bytes(torch.device("cpu")):
        return (f"Packed copies of the linear weights ({needed / 2**30:.1f} GiB) would take over a quarter "
                "of the free memory, so linear layers keep MKL's product.")
    return None


def packed_linear(module: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """x: (..., in) -> (..., out): x @ W^T + b, on the packed weight inside the engine's steps."""
    packed = module.kvviz_packed
    if packed is None or not in_engine_step():
        return F.linear(x, module.weight, module.bias)
    return torch.ops.mkldnn._linear_pointwise(x, packed.weight, module.bias, "none", [], "")


def packed_gated_mlp(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """x: (..., hidden) -> (..., hidden): down(silu(gate(x)) * up(x)), gate and up in one packed
    product inside the engine's steps; elsewhere the module's own forward."""
    packed = module.kvviz_gate_up_packed
    if packed is None or not in_engine_step():
        return type(module).forward(module, x)
    gate_up = torch.ops.mkldnn._linear_pointwise(x, packed.weight, None, "none", [], "")  # (..., 2I)
    return module.down_proj(cpu_kernels.load().silu_and_mul(gate_up))  # (..., hidden)


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
    x = torch.randn(CHECK_ROWS, parts[0].in_features, generator=torch.Generator().manual_seed(0))
    try:
        expected = type(module).forward(module, x)
    except Exception:  # not a module that takes one tensor
        return False
    gate_up = F.linear(x, torch.cat([parts[0].weight, parts[1].weight]))  # (rows, 2I)
    ours = F.linear(kernels.silu_and_mul(gate_up), parts[2].weight)
    return (isinstance(expected, torch.Tensor) and expected.shape == ours.shape
            and torch.allclose(ours, expected, rtol=1e-4, atol=1e-5))
