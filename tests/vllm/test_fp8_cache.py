"""kvviz's fp8 caches beside vLLM's CPU fp8 cache on the bundled model (scripts/bench_kv_dtype.py).

vLLM's CPU build stores fp8 e4m3 with one scale for each layer's K and one for its V, 1.0 for a
checkpoint that holds none (the bundled model), and its kernel rounds each value toward zero.
kvviz's "fp8" keeps a scale per token and KV head instead; its "fp8_per_tensor" is vLLM's scheme,
so its greedy outputs must be vLLM's token for token. One vLLM worker runs "auto" and "fp8".
"""
from __future__ import annotations

import pytest
import torch

from kvviz import Engine, SamplingParams, load_model
from kvviz.engine.cache_dtype import measured_bytes_per_token
from kvviz.engine.kv_cache import CacheShape, truncate_to_e4m3
from kvviz.shapes import ModelShape
from kvviz.vllm import backend as vllm_backend

VLLM_MISSING = vllm_backend.missing_message()


def cpu_flags() -> set[str]:
    """The instruction sets /proc/cpuinfo lists for the first core (empty where there is no such file)."""
    try:
        with open("/proc/cpuinfo") as info:
            return set(next((line for line in info if line.startswith("flags")), ":").split(":", 1)[1].split())
    except OSError:
        return set()


# vLLM's CPU build keeps an fp8 cache only on x86 with AVX-512 or AMX (its own refusal says so); CI machines
# differ, and on one without them there is no vLLM fp8 to compare with
NO_VLLM_FP8 = (None if torch.cuda.is_available() or not cpu_flags() or cpu_flags() & {"avx512f", "amx_tile"}
               else "vLLM's fp8 KV cache on the CPU needs AVX-512 or AMX, which this CPU lacks")
needs_vllm = pytest.mark.skipif(VLLM_MISSING is not None, reason=f"vLLM tests skipped: {VLLM_MISSING}")
KV_BYTES = 8 * 2**20
MAX_TOKENS = 48
PROMPTS = ["ROMEO:", "JULIET:\nO Romeo, Romeo, wherefore art thou", "First Citizen:\nBefore we proceed any further",
           "KING RICHARD III:\nNow is the winter of our discontent", "MENENIUS:\nI tell you, friends,",
           "LADY CAPULET:", "GLOUCESTER:\nWhat, will the aspiring blood of Lancaster", "Nurse:\nFaith, I can tell"]


@pytest.fixture(scope="module")
def bundled():
    return load_model("bundled")


@pytest.fixture(scope="module")
def prompt_ids(bundled):
    return [bundled.tokenizer(prompt)["input_ids"] for prompt in PROMPTS]


@pytest.fixture(scope="module")
def vllm_runs(prompt_ids):
    if VLLM_MISSING:
        pytest.skip(f"vLLM tests skipped: {VLLM_MISSING}")
    if NO_VLLM_FP8:
        pytest.skip(NO_VLLM_FP8)
    return vllm_backend.greedy_by_cache_dtype(vllm_backend.model_folder("bundled"), prompt_ids, MAX_TOKENS,
                                              kv_bytes=KV_BYTES)


def kvviz_greedy(lm, prompt_ids, kv_cache_dtype: str) -> list[list[int]]:
    engine = Engine(lm, kv_cache_dtype=kv_cache_dtype)
    return [o.token_ids for o in engine.generate(prompt_ids, SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True))]


@needs_vllm
def test_fp8_per_tensor_is_vllm_fp8_token_for_token(vllm_runs, bundled, prompt_ids):
    theirs = vllm_runs["fp8"]["outputs"]
    assert kvviz_greedy(bundled, prompt_ids, "fp8_per_tensor") == theirs
    assert theirs != vllm_runs["auto"]["outputs"]  # vLLM's fp8 changes some outputs: the match is not just "auto"'s
    assert kvviz_greedy(bundled, prompt_ids, "auto") == vllm_runs["auto"]["outputs"]
    assert kvviz_greedy(bundled, prompt_ids, "fp8") != theirs  # per-token scales are another scheme


@needs_vllm
def test_vllm_capacity_is_kvviz_bytes_per_token(vllm_runs, bundled):
    for name, ours in (("auto", "auto"), ("fp8", "fp8_per_tensor")):
        per_token = CacheShape.from_model(bundled.model, ours).bytes_per_token
        block_size = vllm_runs[name]["block_size"]
        assert vllm_runs[name]["kv_cache_tokens"] == KV_BYTES // (per_token * block_size) * block_size
    shape = ModelShape.of_model(bundled.model)
    assert CacheShape.from_model(bundled.model, "fp8_per_tensor").bytes_per_token == 2 * 6 * 2 * 32  # no scales
    assert measured_bytes_per_token(shape, "fp8_per_tensor") == 768
    assert measured_bytes_per_token(shape, "fp8") == 768 + 2 * 6 * 2 * 4  # a float32 scale per K and V row


def test_truncate_to_e4m3_rounds_toward_zero():
    values = torch.tensor([0.540757, -1.454091, 0.202144, 1000.0, -1000.0, 0.0, 0.5, 3.0e-3])
    codes = truncate_to_e4m3(values)
    assert codes.dtype == torch.float8_e4m3fn
    assert codes.float().tolist() == [0.5, -1.375, 0.1875, 448.0, -448.0, 0.0, 0.5, 0.001953125]
    assert values[:3].to(torch.float8_e4m3fn).float().tolist() == [0.5625, -1.5, 0.203125]  # torch rounds to nearest


def test_fp8_per_tensor_cache_stores_codes_and_reads_them_back():
    from kvviz.engine.kv_cache import PagedKVCache

    shape = CacheShape(num_layers=2, num_kv_heads=2, head_dim=32, dtype=torch.float32, kv_cache_dtype="fp8_per_tensor")
    cache = PagedKVCache(shape, num_blocks=3, block_size=4, device=torch.device("cpu"))
    assert cache.scales is None and cache.nbytes == 3 * 4 * 2 * 2 * 2 * 32  # one byte a value, nothing else
    key, value = torch.randn(5, 2, 32) * 3, torch.randn(5, 2, 32)
    slots = torch.tensor([4, 5, 6, 7, 8])  # blocks 1 and 2
    for layer in range(2):
        cache.write(layer, key * (layer + 1), value, slots)
    k, v = cache.read_request([1, 2], num_tokens=5)  # (layers, tokens, kv_heads, head_dim)
    assert k.dtype == torch.float32 and torch.equal(k[1], truncate_to_e4m3(key * 2).float())
    assert torch.equal(v[0], truncate_to_e4m3(value).float())
    gathered_k, gathered_v = cache.gather_blocks(1, torch.tensor([[1, 2]]))  # (1, 8, kv_heads, head_dim)
    assert torch.equal(gathered_k[0, :5], k[1]) and torch.equal(gathered_v[0, :5], v[1])
