"""The engine's one seam between PyTorch's own ops and its compiled CPU fast path (engine/cpu/).

    kernel = fast_path.attention_kernel(config, shape, cache, device)   # the compiled kernels, or None: SDPA
    tokens = fast_path.argmax(logits)                                     # a float32 CPU argmax, or torch's
    fast_path.prepare(model)                                              # packed linears on the CPU

In the spirit of vLLM's CustomOp: each op below has a native form (PyTorch, any device) and a CPU form
(kernels compiled at first use, engine/cpu/kernels.py; packed weights, engine/cpu/packed_layers.py),
and the choice is made here, from the device, the dtype and the cache, once per engine or per call.
The modules a learner reads (runner.py, batch.py, sampling.py, cache_setup.py) call these and never
import engine/cpu/ themselves.
"""

from __future__ import annotations

import torch

from kvviz.engine.cpu import kernels as cpu_kernels
from kvviz.engine.cpu import packed_layers
from kvviz.engine.cpu.kernels import KernelMetadata

__all__ = ["KernelMetadata", "argmax", "attention_kernel", "prepare"]


def attention_kernel(config, shape, cache, device: torch.device):
    """The compiled paged-attention kernel where it applies: a KV cache of a float32 model on the CPU,
    stored in float32, int8 or fp8 (the kernel decodes 8-bit rows as it reads them, with their per-row
    scales: not "fp8_per_tensor"), head size a multiple of 8, K and V per head (not MLA's latent rows,
    engine/mla.py). Elsewhere, None: gather + SDPA."""
    if (config.attention != "auto" or cache is None or device.type != "cpu"
            or shape.dtype != torch.float32 or shape.storage_dtype not in cpu_kernels.CACHE_KINDS
            or (shape.quantized and not shape.row_scales) or shape.head_dim % 8 or shape.latent):
        return None
    return cpu_kernels.load()


def argmax(logits: torch.Tensor) -> torch.Tensor:
    """Each row's largest entry (R,): compiled on the CPU in float32 (PyTorch's takes about ten times its
    max there), torch's own elsewhere."""
    kernels = cpu_kernels.load() if logits.device.type == "cpu" and logits.dtype == torch.float32 else None
    return kernels.argmax(logits) if kernels is not None else logits.argmax(dim=-1)


def prepare(model: torch.nn.Module) -> list[str]:
    """Give the model's linear layers their packed CPU forms where they apply (only instances change, and
    only their own forward); what was not packed, and why."""
    return packed_layers.install(model)
