"""RMSNorm and gated MLPs in one compiled pass each, for the engine's CPU float32 steps.

A decode step pushes a few rows through every layer. transformers' RMSNorm is seven small
PyTorch ops (to, pow, mean, add, rsqrt, mul, mul) and a gated MLP is three linears, an
activation, a product and two transposes back from the turned layout (runner.py). At a few rows,
dispatching and allocating for each op costs more than its arithmetic; vLLM fuses the same
operations in C++ (rms_norm, silu_and_mul). Here layer_ops.c does:

    norm(x)   ->  kernels.rms_norm(x, weight, eps, offset)              one pass over x
    mlp(x)    ->  down_proj(kernels.silu_and_mul_turned([W_gate x^T; W_up x^T]))

Which modules qualify is decided by what they compute, not by their class name: at install each
candidate runs once on a random input both ways, and only a module whose fused result matches
its own forward (to float32 rounding) is switched. Outside the engine's forward pass, on other
devices and dtypes, every module runs its own forward unchanged.
"""

from __future__ import annotations

import types

import torch

from kvviz.engine import cpu_kernels
from kvviz.engine.runner import _IN_ENGINE_FORWARD, _few_rows_on_cpu

CHECK_ROWS = 3  # rows of the random input each candidate is checked on


def install(model: torch.nn.Module) -> list[str]:
    """Switch every qualifying RMSNorm and gated MLP of the model; returns their names."""
    kernels = cpu_kernels.load()
    if kernels is None or next(model.parameters()).device.type != "cpu":
        return []
    switched = []
    for name, module in model.named_modules():
        if "forward" in vars(module):  # already switched (or patched by someone else)
            continue
        if _is_rms_norm(kernels, module):
            module.forward = types.MethodType(rms_norm_for_steps, module)
            switched.append(name)
        elif _is_gated_silu_mlp(kernels, module):
            module.forward = types.MethodType(gated_mlp_for_steps, module)
            switched.append(name)
    return switched


def rms_norm_for_steps(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """x: (..., dim) -> (..., dim): the compiled RMSNorm inside the engine's CPU float32 steps."""
    if x.dtype != torch.float32 or x.device.type != "cpu" or not x.is_contiguous() or not _IN_ENGINE_FORWARD.get():
        return type(module).forward(module, x)
    return cpu_kernels.load().rms_norm(x, module.weight, module.kvviz_rms_eps, module.kvviz_rms_offset)


def gated_mlp_for_steps(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """x: (..., hidden) -> (..., hidden): down(silu(gate(x)) * up(x)), fused for a step's few
    rows (where the linears take the turned product, runner.linear_for_steps); otherwise the
    module's own forward."""
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
