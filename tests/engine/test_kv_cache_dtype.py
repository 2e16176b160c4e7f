"""The 8-bit paged cache (EngineConfig.kv_cache_dtype "int8" / "fp8"): its bytes, its capacity,
its cost in quality on the bundled model, and the engine features that move its blocks."""

import pytest
import torch

from kvviz import Engine, EngineError, SamplingParams
from kvviz.engine.cache_dtype import cache_dtype_quality, measured_bytes_per_token
from kvviz.engine.block_pool import BLOCK_BOOKKEEPING_BYTES
from kvviz.engine.device_memory import available_memory_bytes
from kvviz.engine.kv_cache import CacheShape, PagedKVCache
from kvviz.engine.swap import SwapSpace
from kvviz.shapes import PRESETS

from tiny_models import VOCAB, tiny_model

QUANTIZED = ["int8", "fp8"]
STORED_AS = {"int8": torch.int8, "fp8": torch.float8_e4m3fn}
SAMPLED = dict(temperature=1.0, top_k=40, ignore_eos=True)


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama")


@pytest.mark.parametrize("kv_cache_dtype", QUANTIZED)
def test_bytes_per_token_is_one_byte_per_value_plus_a_float32_scale_per_row(llama, kv_cache_dtype):
    engine = Engine(llama, block_size=4, num_blocks=10, kv_cache_dtype=kv_cache_dtype)
    layers, kv_heads, head_dim = 2, 2, 16  # tiny_models' llama
    per_token = 2 * layers * kv_heads * (head_dim * 1 + 4)  # K and V rows: codes + one float32 scale each
    assert engine.cache_shape.bytes_per_token == per_token == 160
    assert engine.cache.nbytes == 10 * 4 * per_token == sum(engine.cache.layer_nbytes())
    assert engine.cache.bytes_per_block == 4 * per_token
    assert engine.cache.storage.dtype == STORED_AS[kv_cache_dtype]
    assert engine.cache.scales.dtype == torch.float32 and engine.cache.scales.shape == (2, layers, 10, 4, kv_heads)
    assert engine.memory().bytes_per_token == per_token
    auto = Engine(llama, block_size=4, num_blocks=10)
    assert auto.cache_shape.bytes_per_token == 2 * layers * kv_heads * head_dim * 4 and auto.cache.scales is None


def test_the_bundled_model_measures_what_the_formula_says():
    shape = PRESETS["bundled"]  # 6 layers, 2 KV heads, head size 32
    assert measured_bytes_per_token(shape, "auto") == 2 * 6 * 2 * 32 * 4 == 3072
    for name in QUANTIZED:
        assert measured_bytes_per_token(shape, name) == 2 * 6 * 2 * (32 + 4) == 864


def test_a_pool_sized_from_memory_holds_about_4x_the_tokens(bundled):
    # a memory_fraction small enough that memory, not max_num_seqs' full contexts, sizes the pool
    fraction = min(1.0, 2 * 64 * 2**20 / available_memory_bytes(torch.device("cpu")))  # about 64 MiB of pool
    pools = {name: Engine(bundled, memory_fraction=fraction, max_num_seqs=1024, kv_cache_dtype=name).num_blocks
             for name in ("auto", "int8", "fp8")}
    block = {name: 16 * b + BLOCK_BOOKKEEPING_BYTES for name, b in (("auto", 3072), ("int8", 864), ("fp8", 864))}
    for name in QUANTIZED:
        ratio = pools[name] / pools["auto"]
        assert ratio == pytest.approx(block["auto"] / block[name], rel=0.05)  # free memory moves a little
        assert ratio > 3.3  # 4 x 32 / (32 + 4) = 3.56 for the values and scales; the bookkeeping is the rest


@pytest.mark.parametrize("kv_cache_dtype", QUANTIZED)
def test_written_rows_read_back_within_the_quantization_step(kv_cache_dtype):
    shape = CacheShape(num_layers=2, num_kv_heads=3, head_dim=16, dtype=torch.float32, kv_cache_dtype=kv_cache_dtype)
    cache = PagedKVCache(shape, num_blocks=6, block_size=4, device=torch.device("cpu"))
    generator = torch.Generator().manual_seed(0)
    keys = torch.randn(2, 10, 3, 16, generator=generator) * torch.rand(1, 10, 3, 1, generator=generator) * 5
    values = torch.randn(2, 10, 3, 16, generator=generator)
    keys[0, 3, 1] = 0.0  # an all-zero row reads back as zeros
    block_table = [5, 2, 0]
    slots = torch.tensor([block_table[t // 4] * 4 + t % 4 for t in range(10)])
    for layer in range(2):
        cache.write(layer, keys[layer], values[layer], slots)
    k, v = cache.read_request(block_table, 10)  # (layers, tokens, kvh, hd), dequantized
    assert k.dtype == torch.float32 and k.shape == (2, 10, 3, 16)
    absmax = keys.abs().amax(-1, keepdim=True)
    if kv_cache_dtype == "int8":  # every value within half a step, a step being absmax / 127
        assert ((k - keys).abs() <= absmax / 127 / 2 * 1.001).all()
    else:  # e4m3 keeps 3 mantissa bits: within 1/16 of the value, or of the smallest normal step
        assert ((k - keys).abs() <= (keys.abs() / 16 + absmax / 448 * 2**-9) * 1.001).all()
    assert (k != keys).any() and torch.equal(k[0, 3, 1], torch.zeros(16))
    assert (v - values).abs().max() < 0.1
    gathered_k, gathered_v = cache.gather_blocks(1, torch.tensor([block_table]))  # (1, 12, kvh, hd)
    assert torch.equal(gathered_k[0, :10], k[1]) and torch.equal(gathered_v[0, :10], v[1])


@pytest.mark.parametrize("kv_cache_dtype", QUANTIZED)
def test_swap_moves_the_codes_and_their_scales(kv_cache_dtype):
    shape = CacheShape(num_layers=2, num_kv_heads=2, head_dim=8, dtype=torch.float32, kv_cache_dtype=kv_cache_dtype)
    cache = PagedKVCache(shape, num_blocks=5, block_size=2, device=torch.device("cpu"))
    rows = torch.randn(2, 2, 4, 2, 8, generator=torch.Generator().manual_seed(1))  # (K/V, layers, tokens, kvh, hd)
    for layer in range(2):
        cache.write(layer, rows[0, layer], rows[1, layer], torch.tensor([2, 3, 8, 9]))  # blocks 1 and 4
    before = cache.read_request([1, 4], 4)
    swap = SwapSpace(shape, num_slots=3, block_size=2)
    slots = swap.swap_out(cache, [1, 4])
    cache.storage.zero_()
    cache.scales.fill_(7.0)
    swap.swap_in(cache, slots, [0, 3])
    after = cache.read_request([0, 3], 4)
    assert torch.equal(after[0], before[0]) and torch.equal(after[1], before[1])
    assert swap.bytes_per_block == 2 * shape.bytes_per_token


def test_a_quantized_cache_takes_the_compiled_kernel_where_float32_would(llama):
    from kvviz.engine.cpu import kernels as cpu_kernels

    has_kernel = cpu_kernels.load() is not None  # float32 on the CPU: the kernel decodes the codes in place
    for name in QUANTIZED:
        assert (Engine(llama, num_blocks=8, kv_cache_dtype=name).attention_kernel is not None) == has_kernel
        assert Engine(llama, num_blocks=8, kv_cache_dtype=name, attention="sdpa").attention_kernel is None
    half = tiny_model("llama").to(torch.bfloat16)  # a bfloat16 model gathers and dequantizes into bfloat16
    assert Engine(half, num_blocks=8, kv_cache_dtype="int8").attention_kernel is None


@pytest.mark.parametrize("kv_cache_dtype", QUANTIZED)
def test_prefix_caching_reuses_quantized_blocks_unchanged(llama, kv_cache_dtype):
    system = list(range(1, 21))
    prompts = [system + [30 + i, 40 + i] for i in range(4)]
    greedy = SamplingParams(max_tokens=10, ignore_eos=True)
    outputs = {}
    for caching in (True, False):
        engine = Engine(llama, block_size=4, enable_prefix_caching=caching, kv_cache_dtype=kv_cache_dtype)
        results = [engine.generate([p], greedy)[0] for p in prompts]  # one at a time: the later ones hit
        outputs[caching] = [r.token_ids for r in results]
        if caching:
            assert [r.num_cached_tokens for r in results] == [0, 20, 20, 20]
    assert outputs[True] == outputs[False]


@pytest.mark.parametrize("kv_cache_dtype", QUANTIZED)
def test_preemption_by_recompute_or_swap_keeps_quantized_outputs(llama, kv_cache_dtype):
    prompts = [[(7 * i + j) % (VOCAB - 2) + 1 for j in range(18 + 3 * i)] for i in range(6)]
    greedy = SamplingParams(max_tokens=24, ignore_eos=True)
    roomy = Engine(llama, block_size=4, kv_cache_dtype=kv_cache_dtype)
    expected = [o.token_ids for o in roomy.generate(prompts, greedy)]
    assert roomy.scheduler.num_preemptions == 0
    for mode in ("recompute", "swap"):
        tight = Engine(llama, block_size=4, num_blocks=24, preemption_mode=mode, kv_cache_dtype=kv_cache_dtype)
        assert [o.token_ids for o in tight.generate(prompts, greedy)] == expected
        assert tight.scheduler.num_preemptions > 0
        recomputed = sum(r.num_recomputed_tokens for r in tight.requests.values())
        assert (recomputed > 0) == (mode == "recompute")


@pytest.mark.parametrize("kv_cache_dtype", QUANTIZED)
def test_fork_and_copy_on_write_with_a_quantized_cache(llama, kv_cache_dtype):
    prompt, n = list(range(1, 11)), 3  # 10 tokens: the last block is shared half full, then copied
    fork = Engine(llama, block_size=4, kv_cache_dtype=kv_cache_dtype)
    rid = fork.add_request(prompt, SamplingParams(max_tokens=8, seed=4, n=n, **SAMPLED))
    copies = []
    while fork.has_unfinished():
        record = fork.step()
        for event in record.events:
            if event.kind == "copy":
                shared, own = event.block_ids
                assert torch.equal(fork.cache.scales[:, :, own, :2], fork.cache.scales[:, :, shared, :2])
                assert torch.equal(fork.cache.storage[:, :, own, :2].view(torch.uint8),
                                   fork.cache.storage[:, :, shared, :2].view(torch.uint8))
                copies.append(event)
    assert len(copies) == n - 1
    alone = Engine(llama, block_size=4, kv_cache_dtype=kv_cache_dtype).generate(
        [prompt] * n, [SamplingParams(max_tokens=8, seed=4 + i, **SAMPLED) for i in range(n)])
    assert fork.output(rid).samples == [o.token_ids for o in alone]


def test_a_bad_kv_cache_dtype_gets_one_sentence(llama):
    listed = "'auto', 'int8', 'fp8', 'fp8_per_tensor'"
    with pytest.raises(EngineError, match=rf"^kv_cache_dtype must be one of {listed} .*not 'fp4'\.$"):
        Engine(llama, kv_cache_dtype="fp4")
    with pytest.raises(EngineError, match="kv_cache_dtype must be one of"):
        Engine(llama, kv_cache_dtype=torch.int8)


PROMPTS = ["ROMEO:", "JULIET:\nO Romeo, Romeo", "First Citizen:\nBefore we proceed any further, hear me speak."]


def test_the_cost_in_quality_on_the_bundled_model_is_small_and_measured(bundled):
    quality = cache_dtype_quality(bundled, PROMPTS, QUANTIZED, max_tokens=12)
    for name, result in quality.items():
        print(f"{name}: mean KL {result.mean_kl:.2e} nats, max {result.max_kl:.2e}; "
              f"first differing greedy token per prompt: {result.first_difference}")
        assert all(len(p.step_kl) == 12 for p in result.prompts)
        assert 0 < result.mean_kl < 0.01 and result.max_kl < 0.1  # measured: int8 ~3e-5, fp8 ~6e-4 (mean)
        assert sum(d is None for d in result.first_difference) >= 2  # most prompts' 12 greedy tokens agree
    # e4m3's 3 mantissa bits lose more than int8's 255 steps over each row's range
    assert quality["int8"].mean_kl < quality["fp8"].mean_kl
