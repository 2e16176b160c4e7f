"""kvviz's compiled CPU kernels: paged attention (paged_attention.c), a linear layer's product for
a few rows (small_products.c), and the gated activation of a packed MLP, RMSNorm, rotary embeddings
and the greedy pick (layer_ops.c). Built once with the system's C compiler, loaded with ctypes.

    kernels = load()                 # None where they cannot be built (why_not() says why)
    kernels(query, key_cache, value_cache, out, metadata, window, scaling, softcap)  # attention
    kernels(query, key_codes, value_codes, out, metadata, window, scaling, softcap,
            scales=(key_scales, value_scales))  # attention over an 8-bit cache (int8 or fp8 codes)
    kernels.silu_and_mul(gate_up)    # (..., 2I) -> (..., I)
    kernels.rms_norm(x, weight, eps) # (..., n) -> (..., n)
    kernels.rotary_(qkv, heads, head_dim, cos, sin)  # the first `heads` heads of each row, in place
    kernels.argmax(logits)           # (rows, n) -> (rows,)
    panels = kernels.pack_panels(weight)                # (out, in) -> the layout small_product reads
    kernels.small_product(x, panels, bias, out_features)  # (rows, in) -> (rows, out): x W^T + b

Why a kernel: read in place, a request's keys and values go from the cache's blocks straight
into the dot products. The PyTorch path must first gather every request's blocks into a padded
(B, Lk, KVH, D) copy, per layer per step, and then attend over the padding too. At batch 48 on
the bench's 2-core CPU that gather, the padding and the masks took about a third of a decode step.

The build needs only a C compiler (cc, gcc or clang) with OpenMP: no PyTorch headers, so it takes
about a second. The library is cached under ~/.cache/kvviz (or $KVVIZ_CACHE_DIR), named by a hash
of the source, the flags and the machine, and rebuilt when any of them change. Only a float32 model
on the CPU goes through it, its cache in float32 or in 8-bit codes with one scale per row (the
kernel decodes each row as it reads it); other dtypes and devices keep the PyTorch path.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

SOURCES = [Path(__file__).with_name(name) for name in ("paged_attention.c", "layer_ops.c", "small_products.c")]
HEADERS = [Path(__file__).with_name("exp_nonpositive.h")]  # included by the sources
FLAGS = ["-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-std=c11", "-fno-math-errno",
         "-fno-trapping-math"]  # no FP traps: lets the exp and clamp loops vectorise


@dataclass(slots=True)
class KernelMetadata:
    """What the kernel needs of a step besides the tensors, built once per step (int32, CPU)."""

    block_tables: torch.Tensor  # (num_seqs, max_blocks)
    token_seq: torch.Tensor  # (N,) row of block_tables per query token
    token_pos: torch.Tensor  # (N,) position of each query token in its request


PANEL = 32  # small_products.c's PANEL: output columns per panel

# the cache's storage dtype -> paged_attention.c's enum cache_kind
CACHE_KINDS = {torch.float32: 0, torch.int8: 1, torch.float8_e4m3fn: 2}


class CpuKernels:
    def __init__(self, library: ctypes.CDLL):
        c_int, c_long, c_ptr, c_float = ctypes.c_int, ctypes.c_long, ctypes.c_void_p, ctypes.c_float

        def bind(name, *argtypes):
            function = getattr(library, name)
            function.argtypes, function.restype = list(argtypes), None
            return function

        self.function = bind("kvviz_paged_attention", c_ptr, c_long, c_long, c_ptr, c_ptr, c_ptr, c_ptr, c_int,
                             c_ptr, c_ptr, c_int, c_ptr, c_ptr, c_int, c_int, c_int, c_int, c_int, c_int,
                             c_float, c_float, c_int)
        self.fp8_e4m3_values_function = bind("kvviz_fp8_e4m3_values", c_ptr)
        self.silu_and_mul_function = bind("kvviz_silu_and_mul", c_ptr, c_ptr, c_long, c_long, c_int)
        self.rms_norm_function = bind("kvviz_rms_norm", c_ptr, c_ptr, c_ptr, c_long, c_long, c_float, c_int)
        self.rotary_function = bind("kvviz_rotary", c_ptr, c_long, c_long, c_long, c_long, c_ptr, c_ptr, c_int)
        self.argmax_rows_function = bind("kvviz_argmax_rows", c_ptr, c_long, c_long, c_ptr, c_int)
        self.pack_panels_function = bind("kvviz_pack_panels", c_ptr, c_ptr, c_long, c_long)
        self.small_product_function = bind("kvviz_small_product", c_ptr, c_long, c_long, c_ptr, c_ptr, c_ptr,
                                           c_long, c_long, c_int)

    def pack_panels(self, weight: torch.Tensor) -> torch.Tensor:
        """weight (out, in) float32 -> its panels, (ceil(out / PANEL), in, PANEL): PANEL output columns side
        by side for each input, zeros past the last output (small_products.c)."""
        assert weight.dtype == torch.float32 and weight.dim() == 2
        weight = weight.detach().contiguous()
        out_features, in_features = weight.shape
        panels = weight.new_empty(-(-out_features // PANEL), in_features, PANEL)
        self.pack_panels_function(weight.data_ptr(), panels.data_ptr(), out_features, in_features)
        return panels

    def small_product(self, x: torch.Tensor, panels: torch.Tensor, bias: torch.Tensor | None,
                      out_features: int) -> torch.Tensor:
        """x (rows, in) float32, each row contiguous; panels from pack_panels; bias (out,) or None ->
        x W^T + b: (rows, out)."""
        assert x.dtype == torch.float32 and x.dim() == 2 and x.stride(1) == 1 and x.shape[1] == panels.shape[1]
        assert bias is None or (bias.dtype == torch.float32 and bias.is_contiguous() and bias.shape == (out_features,))
        out = x.new_empty(x.shape[0], out_features)
        self.small_product_function(x.data_ptr(), x.shape[0], x.stride(0), panels.data_ptr(),
                                    None if bias is None else bias.data_ptr(), out.data_ptr(), out_features,
                                    x.shape[1], torch.get_num_threads())
        return out

    def silu_and_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        """gate_up: (..., 2I), each row the gate then the up projection -> silu(gate) * up: (..., I)."""
        assert gate_up.dtype == torch.float32 and gate_up.is_contiguous() and gate_up.shape[-1] % 2 == 0
        inter = gate_up.shape[-1] // 2
        out = gate_up.new_empty(*gate_up.shape[:-1], inter)
        self.silu_and_mul_function(gate_up.data_ptr(), out.data_ptr(), gate_up.numel() // (2 * inter), inter,
                                   torch.get_num_threads())
        return out

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """x: (..., n) float32, weight: (n,) -> weight * x / sqrt(mean(x^2) + eps) per row: (..., n)."""
        assert x.dtype == weight.dtype == torch.float32 and weight.is_contiguous() and x.shape[-1:] == weight.shape
        x = x.contiguous()
        out = torch.empty_like(x)
        self.rms_norm_function(x.data_ptr(), weight.data_ptr(), out.data_ptr(), x.numel() // weight.numel(),
                               weight.numel(), eps, torch.get_num_threads())
        return out

    def rotary_(self, x: torch.Tensor, heads: int, head_dim: int, cos: torch.Tensor, sin: torch.Tensor) -> None:
        """Rotate in place the first `heads` heads of each row of x (rows, width) float32, heads of head_dim
        side by side, as transformers' apply_rotary_pos_emb does: x * cos + rotate_half(x) * sin, the same
        to the last bit. cos, sin: (rows, head_dim), one row per row of x."""
        assert x.dtype == cos.dtype == sin.dtype == torch.float32 and x.dim() == 2 and x.stride(1) == 1
        assert heads * head_dim <= x.shape[1] and head_dim % 2 == 0
        cos, sin = cos.reshape(x.shape[0], head_dim).contiguous(), sin.reshape(x.shape[0], head_dim).contiguous()
        self.rotary_function(x.data_ptr(), x.shape[0], x.stride(0), heads, head_dim, cos.data_ptr(), sin.data_ptr(),
                             torch.get_num_threads())

    def argmax(self, x: torch.Tensor) -> torch.Tensor:
        """x: (rows, n) float32 -> (rows,) int64: each row's first index of its largest value (of its first
        NaN, where it holds one), as x.argmax(-1) gives."""
        assert x.dtype == torch.float32 and x.dim() == 2
        x = x.contiguous()
        out = torch.empty(x.shape[0], dtype=torch.int64)
        self.argmax_rows_function(x.data_ptr(), x.shape[0], x.shape[1], out.data_ptr(), torch.get_num_threads())
        return out

    def fp8_e4m3_values(self) -> torch.Tensor:
        """(256,) float32: the value the kernel decodes each fp8 e4m3 code (0-255) to."""
        values = torch.empty(256)
        self.fp8_e4m3_values_function(values.data_ptr())
        return values

    def __call__(self, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                 out: torch.Tensor, metadata: KernelMetadata, window: int | None, scaling: float,
                 softcap: float | None, scales: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """query: (N, H, D) float32, D contiguous; key_cache, value_cache: (num_blocks, block_size, KVH, D)
        contiguous, float32, or int8 / fp8 e4m3 codes with `scales` = (key_scales, value_scales), each
        (num_blocks, block_size, KVH) float32 contiguous; out: (N, H, D) float32 contiguous, written and returned."""
        num_tokens, num_heads, head_dim = query.shape
        block_size, num_kv_heads = key_cache.shape[1], key_cache.shape[2]
        assert query.stride(2) == 1 and out.is_contiguous() and key_cache.is_contiguous()
        assert query.dtype == out.dtype == torch.float32 and key_cache.dtype == value_cache.dtype
        kind, key_scales_ptr, value_scales_ptr = 0, None, None  # float32: no scales
        if scales is not None:
            key_scales, value_scales = scales
            assert key_scales.dtype == value_scales.dtype == torch.float32
            assert key_scales.is_contiguous() and value_scales.is_contiguous()
            assert key_scales.shape == value_scales.shape == key_cache.shape[:3]
            kind = CACHE_KINDS[key_cache.dtype]
            key_scales_ptr, value_scales_ptr = key_scales.data_ptr(), value_scales.data_ptr()
        assert (kind == 0) == (key_cache.dtype == torch.float32), "an 8-bit cache, and only one, has scales"
        tables = metadata.block_tables
        self.function(query.data_ptr(), query.stride(0), query.stride(1), key_cache.data_ptr(),
                      value_cache.data_ptr(), key_scales_ptr, value_scales_ptr, kind, out.data_ptr(),
                      tables.data_ptr(), tables.shape[1],
                      metadata.token_seq.data_ptr(), metadata.token_pos.data_ptr(), num_tokens, num_heads,
                      num_kv_heads, head_dim, block_size, window or 0, scaling, softcap or 0.0,
                      torch.get_num_threads())
        return out


def load() -> CpuKernels | None:
    """The kernels, built on first use; None where they cannot be (why_not() says why)."""
    return _loaded()[0]


def why_not() -> str | None:
    """Why the kernels are unavailable, in one sentence; None when they load."""
    return _loaded()[1]


@functools.cache  # once per process: the library is built (or found built) and loaded once
def _loaded() -> tuple[CpuKernels | None, str | None]:
    return _build_and_load()


def _build_and_load() -> tuple[CpuKernels | None, str | None]:
    """The kernels and None, or None and why they are unavailable."""
    if os.environ.get("KVVIZ_CPU_KERNELS", "1") == "0":
        return None, "KVVIZ_CPU_KERNELS=0 turns the compiled kernels off."
    compiler = next((c for c in (os.environ.get("CC"), "cc", "gcc", "clang") if c and shutil.which(c)), None)
    if compiler is None:
        return None, "No C compiler (cc, gcc or clang) was found; install one (e.g. apt install gcc) for the kernels."
    source = b"".join(path.read_bytes() for path in SOURCES + HEADERS)
    key = hashlib.sha256(source + " ".join([compiler] + FLAGS).encode() + platform.machine().encode()
                         + _cpu_signature().encode()).hexdigest()[:16]
    folder = Path(os.environ.get("KVVIZ_CACHE_DIR") or Path.home() / ".cache" / "kvviz") / "kernels"
    library = folder / f"cpu_kernels-{key}.so"
    try:
        if not library.exists():
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=folder) as scratch:
                built = Path(scratch) / library.name
                result = subprocess.run([compiler, *FLAGS, *map(str, SOURCES), "-o", str(built), "-lm"],
                                        capture_output=True, text=True, timeout=120)
                if result.returncode != 0:
                    return None, f"The C compiler could not build the kernels: {result.stderr.strip()[:300]}"
                os.replace(built, library)  # atomic: another process may be building the same file
        return CpuKernels(ctypes.CDLL(str(library))), None
    except (OSError, subprocess.SubprocessError) as error:
        return None, f"The kernels could not be built or loaded ({error}); the engine uses PyTorch's operations."


def _cpu_signature() -> str:
    """-march=native builds for this CPU: a library built on another CPU must not be reused."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return platform.processor() + sys.platform
