"""Faster CPU float32 layers for the engine's steps: oneDNN's packed linears, and RMSNorm and
gated MLPs in one compiled pass each.

Linear layers: each weight is also kept reordered into oneDNN's blocked layout once, at install
(torch.ops.mkldnn, the layout vLLM's CPU backend multiplies with too). Inside the engine's
forward pass every linear multiplies with that copy: in an interleaved A/B over the bench's mixed
workload it took 0.83-0.89 of the time of MKL's plain product, with identical outputs. The copy
costs as much memory as the linear weights, so it is made only when that is under a quarter of
the memory available (PACK_MEMORY_FRACTION); otherwise the engine keeps the turned product.

A decode step pushes a few rows through every layer. transformers' RMSNorm is seven small
PyTorch ops (to, pow, mean, add, rsqrt, mul, mul) and a gated MLP is three linears, an
activation, a product and two transposes back from the turned layout (runner.py). At a few rows,
dispatching and allocating for each op costs more than its arithmetic; vLLM fuses the same
operations in C++ (rms_norm, silu_and_mul). Here layer_ops.c does:

    norm(x)   ->  kernels.rms_norm(x, weight, eps, offset)              one pass over x
    mlp(x)    ->  down_proj(kernels.silu_and_mul(x [W_gate; W_up]^T))      packed: one product
    mlp(x)    ->  down_proj(kernels.silu_and_mul_turned([W_gate x^T; W_up x^T]))   not packed

Which modules qualify is decided by what they compute, not by their class name: at install each
candidate runs once on a random input both ways, and only a module whose fused result matches
its own forward (to float32 rounding) is switched. Outside the engine's forward pass, on other
devices and dtypes, every module runs its own forward unchanged.
"""

from __future__ import annotations

import types

import torch

from kvviz.engine.cpu import kernels as cpu_kernels
from kvviz.engine.runner import _IN_ENGINE_FORWARD, _few_rows_on_cpu

CHECK_ROWS = 3  # rows of the random input each candidate is checked on
PACK_MEMORY_FRACTION = 0.25  # packed copies of the linear weights may take this much of free memory
why_not_packed: str | None = None  # why the last model's linears were not packed, in one sentence


def install(model: torch.nn.Module) -> list[str]:
    """Pack the model's linears, switch every qualifying RMSNorm and gated MLP; returns the
    switched modules' names."""
    kernels = cpu_kernels.load()
    if kernels is None or next(model.parameters()).device.type != "cpu":
        return []
    pack_linears(model)
    switched = []
    for name, module in model.named_modules():
        if "forward" in vars(module):  # already switched (or patched by someone else)
            continue
        if _is_rms_norm(kernels, module):
            module.forward = types.MethodType(rms_norm_for_steps, module)
            switched.append(name)
        elif _is_gated_silu_mlp(kernels, module):
            module.kvviz_gate_up_packed = None
            module.forward = types.MethodType(gated_mlp_for_steps, module)
            switched.append(name)
    for module in model.modules():  # gate and up in one packed product (again after a deepcopy)
        if getattr(module, "kvviz_gate_up_packed", False) is None and module.gate_proj.kvviz_packed is not None:
            module.kvviz_gate_up_packed = Packed.of(torch.cat([module.gate_proj.weight, module.up_proj.weight]))
    return switched


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


def pack_linears(model: torch.nn.Module) -> bool:
    """Give every plain float32 nn.Linear a oneDNN-packed copy of its weight (`kvviz_packed`,
    which runner.linear_for_steps multiplies with), if the copies fit; idempotent."""
    global why_not_packed
    from kvviz.models import available_memory_bytes

    linears = [m for m in model.modules() if type(m) is torch.nn.Linear and m.weight.dtype == torch.float32]
    if all(getattr(m, "kvviz_packed", None) is not None for m in linears):
        return True
    needed = sum(m.weight.nbytes for m in linears)
    if not torch.backends.mkldnn.is_available():
        why_not_packed = "This PyTorch has no oneDNN (mkldnn), so linear layers keep MKL's product."
        return False
    if needed > PACK_MEMORY_FRACTION * available_memory_bytes(torch.device("cpu")):
        why_not_packed = (f"Packed copies of the linear weights ({needed / 2**30:.1f} GiB) would take over a quarter "
                          "of the free memory, so linear layers keep MKL's product.")
        return False
    try:
        with torch.inference_mode():
            for module in linears:
                module.kvviz_packed = Packed.of(module.weight)
    except (RuntimeError, AttributeError) as error:  # an op this build lacks
        for module in linears:
            module.kvviz_packed = None
        why_not_packed = f"oneDNN could not pack the linear weights ({error}); linear layers keep MKL's product."
        return False
    return True


def rms_norm_for_steps(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """x: (..., dim) -> (..., dim): the compiled RMSNorm inside the engine's CPU float32 steps."""
    if x.dtype != torch.float32 or x.device.type != "cpu" or not x.is_contiguous() or not _IN_ENGINE_FORWARD.get():
        return type(module).forward(module, x)
    return cpu_kernels.load().rms_norm(x, module.weight, module.kvviz_rms_eps, module.kvviz_rms_offset)


def gated_mlp_for_steps(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """x: (..., hidden) -> (..., hidden): down(silu(gate(x)) * up(x)). Packed: gate and up in one
    product, any number of rows. Not packed: fused for a step's few rows (where the linears take
    the turned product, runner.linear_for_steps). Otherwise the module's own forward."""
    packed = module.kvviz_gate_up_packed
    if packed is not None and x.dtype == torch.float32 and x.device.type == "cpu" and _IN_ENGINE_FORWARD.get():
        gate_up = torch.ops.mkldnn._linear_pointwise(x, packed.weight, None, "none", [], "")  # (..., 2I)
        return module.down_proj(cpu_kernels.load().silu_and_mul(gate_up))
    rows = _few_rows_on_cpu(x)
    if rows is None or torch.get_num_threads() < 2 or x.dtype != torch.float32:
        return type(module).forward(module, x)
    return module.down_proj(_silu_and_mul(module, x, rows))


def _silu_and_mul(module, x: torch.Tensor, rows: int) -> torch.Tensor:
    """silu(x W_gate^T) * (x W_up^T): (..., hidden) -> (..., intermediate)."""
    columns = x.reshape(rows, x.shape[-1]).T  # (hidden, N)
    inter = module.gate_proj.out_features
    gate_up = x.new_empty(2 * inter, rows)  # (2I, N): the turned products, one above the other
    torch.mm(module.gate_proj.weight, columns, out=gate_up[:inter])
    torch.mm(module.up_proj.weight, columns, out=gate_up[inter:])
    return cpu_kernels.load().silu_and_mul_turned(gate_up).view(*x.shape[:-1], inter)


def _is_rms_norm(kernels, module) -> bool:
    """A leaf with a float32 weight of one dimension and an epsilon, computing RMSNorm with
    weight (offset 0) or 1 + weight (offset 1, as Gemma does)."""
    weight = getattr(module, "weight", None)
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
    if (next(module.children(), None) is not None or not isinstance(weight, torch.nn.Parameter)
            or weight.dim() != 1 or weight.dtype != torch.float32 or not isinstance(eps, float)
            or getattr(module, "bias", None) is not None):
        return False
    with torch.inference_mode():
        x = torch.randn(CHECK_ROWS, weight.shape[0], generator=torch.Generator().manual_seed(0)) * 3
        try:
            expected = type(module).forward(module, x)
        except Exception:  # not a module that takes one tensor
            return False
        for offset in (0.0, 1.0):
            if _matches(kernels.rms_norm(x, weight.detach().contiguous(), eps, offset), expected):
                module.kvviz_rms_eps, module.kvviz_rms_offset = eps, offset
                return True
    return False


def _is_gated_silu_mlp(kernels, module) -> bool:
    """gate_proj, up_proj and down_proj plain float32 linears without bias, computing
    down(silu(gate(x)) * up(x)) (Llama, Qwen, Mistral, OLMo)."""
    parts = [getattr(module, name, None) for name in ("gate_proj", "up_proj", "down_proj")]
    if not all(type(p) is torch.nn.Linear and p.bias is None and p.weight.dtype == torch.float32 for p in parts):
        return False
    if parts[0].weight.shape != parts[1].weight.shape or not parts[0].weight.is_contiguous():
        return False
    with torch.inference_mode():
        x = torch.randn(CHECK_ROWS, parts[0].in_features, generator=torch.Generator().manual_seed(0))
        try:
            expected = type(module).forward(module, x)
        except Exception:
            return False
        fused = torch.nn.functional.linear(_silu_and_mul(module, x, CHECK_ROWS), parts[2].weight)
        return _matches(fused, expected)


def _matches(ours, expected) -> bool:
    return (isinstance(expected, torch.Tensor) and expected.shape == ours.shape
            and torch.allclose(ours, expected, rtol=1e-4, atol=1e-5))
