"""The compiled paged-attention kernel (paged_attention.c, with transpose.c beside it): built
once with the system's C compiler, loaded with ctypes, called once per layer per step.

    kernel = load()                  # None where it cannot be built; the engine then uses SDPA
    kernel(query, key_cache, value_cache, out, metadata, window, scaling, softcap)
    kernel.transpose(matrix)         # (rows, cols) -> a new contiguous (cols, rows)

Why a kernel: read in place, a request's keys and values go from the cache's blocks straight
into the dot products. The PyTorch path must first gather every request's blocks into a padded
(B, Lk, KVH, D) copy, per layer per step, and then attend over the padding too. At batch 48 on
the bench's 2-core CPU that gather, the padding and the masks took about a third of a decode step.

The build needs only a C compiler (cc, gcc or clang) with OpenMP: no PyTorch headers, so it takes
about a second. The library is cached under ~/.cache/kvviz (or $KVVIZ_CACHE_DIR), named by a hash
of the source, the flags and the machine, and rebuilt when any of them change. Only float32 on
the CPU goes through it; other dtypes and devices keep the PyTorch path.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import torch

SOURCES = [Path(__file__).with_name("paged_attention.c"), Path(__file__).with_name("transpose.c")]
FLAGS = ["-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-std=c11", "-fno-math-errno"]
_lock = threading.Lock()
_loaded: dict[str, object] = {}  # "kernel" -> PagedAttentionKernel or None once tried
why_not: str | None = None  # the reason the kernel is unavailable, in one sentence


@dataclass(slots=True)
class KernelMetadata:
    """What the kernel needs of a step besides the tensors, built once per step (int32, CPU)."""

    block_tables: torch.Tensor  # (num_seqs, max_blocks)
    token_seq: torch.Tensor  # (N,) row of block_tables per query token
    token_pos: torch.Tensor  # (N,) position of each query token in its request


class PagedAttentionKernel:
    def __init__(self, library: ctypes.CDLL):
        self.function = library.kvviz_paged_attention
        c_int, c_long, c_ptr, c_float = ctypes.c_int, ctypes.c_long, ctypes.c_void_p, ctypes.c_float
        self.function.argtypes = [c_ptr, c_long, c_long, c_ptr, c_ptr, c_ptr, c_ptr, c_int, c_ptr, c_ptr,
                                  c_int, c_int, c_int, c_int, c_int, c_int, c_float, c_float, c_int]
        self.function.restype = None
        self.transpose_function = library.kvviz_transpose
        self.transpose_function.argtypes = [c_ptr, c_ptr, c_long, c_long, c_int]
        self.transpose_function.restype = None

    def transpose(self, matrix: torch.Tensor) -> torch.Tensor:
        """matrix: (rows, cols) float32, contiguous, on the CPU -> (cols, rows), contiguous."""
        assert matrix.dtype == torch.float32 and matrix.is_contiguous() and matrix.dim() == 2
        rows, cols = matrix.shape
        out = matrix.new_empty(cols, rows)
        self.transpose_function(matrix.data_ptr(), out.data_ptr(), rows, cols, torch.get_num_threads())
        return out

    def __call__(self, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                 out: torch.Tensor, metadata: KernelMetadata, window: int | None, scaling: float,
                 softcap: float | None) -> torch.Tensor:
        """query: (N, H, D), D contiguous; key_cache, value_cache: (num_blocks, block_size, KVH, D)
        contiguous; out: (N, H, D) contiguous, written and returned."""
        num_tokens, num_heads, head_dim = query.shape
        block_size, num_kv_heads = key_cache.shape[1], key_cache.shape[2]
        assert query.stride(2) == 1 and out.is_contiguous() and key_cache.is_contiguous()
        assert query.dtype == key_cache.dtype == out.dtype == torch.float32
        tables = metadata.block_tables
        self.function(query.data_ptr(), query.stride(0), query.stride(1), key_cache.data_ptr(),
                      value_cache.data_ptr(), out.data_ptr(), tables.data_ptr(), tables.shape[1],
                      metadata.token_seq.data_ptr(), metadata.token_pos.data_ptr(), num_tokens, num_heads,
                      num_kv_heads, head_dim, block_size, window or 0, scaling, softcap or 0.0,
                      torch.get_num_threads())
        return out


def load() -> PagedAttentionKernel | None:
    """The kernel, built on first use; None (and `why_not` says why) where it cannot be."""
    with _lock:
        if "kernel" not in _loaded:
            _loaded["kernel"] = _build_and_load()
        return _loaded["kernel"]


def _build_and_load() -> PagedAttentionKernel | None:
    global why_not
    if os.environ.get("KVVIZ_ATTENTION_KERNEL", "1") == "0":
        why_not = "KVVIZ_ATTENTION_KERNEL=0 turns the compiled kernel off."
        return None
    compiler = next((c for c in (os.environ.get("CC"), "cc", "gcc", "clang") if c and shutil.which(c)), None)
    if compiler is None:
        why_not = "No C compiler (cc, gcc or clang) was found; install one (e.g. apt install gcc) for the kernel."
        return None
    source = b"".join(path.read_bytes() for path in SOURCES)
    key = hashlib.sha256(source + " ".join([compiler] + FLAGS).encode() + platform.machine().encode()
                         + _cpu_signature().encode()).hexdigest()[:16]
    folder = Path(os.environ.get("KVVIZ_CACHE_DIR") or Path.home() / ".cache" / "kvviz") / "kernels"
    library = folder / f"paged_attention-{key}.so"
    try:
        if not library.exists():
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=folder) as scratch:
                built = Path(scratch) / library.name
                result = subprocess.run([compiler, *FLAGS, *map(str, SOURCES), "-o", str(built), "-lm"],
                                        capture_output=True, text=True, timeout=120)
                if result.returncode != 0:
                    why_not = f"The C compiler could not build the kernel: {result.stderr.strip()[:300]}"
                    return None
                os.replace(built, library)  # atomic: another process may be building the same file
        return PagedAttentionKernel(ctypes.CDLL(str(library)))
    except (OSError, subprocess.SubprocessError) as error:
        why_not = f"The kernel could not be built or loaded ({error}); the engine uses PyTorch's attention."
        return None


def _cpu_signature() -> str:
    """-march=native builds for this CPU: a library built on another CPU must not be reused."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return platform.processor() + sys.platform
