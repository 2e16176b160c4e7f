"""The compiled paged-attention kernel over an 8-bit cache (kv_cache_dtype "int8" / "fp8"): it decodes
each row of codes in place as it reads it, and gives what the gather + SDPA path gives from the
same cache, in the kernel's own tests and inside the engine."""

import pytest
import torch

from kvviz import Engine, SamplingParams
from kvviz.engine.cpu import kernels as cpu_kernels
from kvviz.engine.cpu.kernels import KernelMetadata
from kvviz.engine.kv_cache import CacheShape, PagedKVCache
from kvviz.engine.runner import attend

from tiny_models import VOCAB, tiny_model

kernel = cpu_kernels.load()
pytestmark = pytest.mark.skipif(kernel is None, reason=f"no compiled kernel here: {cpu_kernels.why_not()}")
QUANTIZED = ["int8", "fp8"]


def test_fp8_codes_decode_as_torch_decodes_them():
    codes = torch.arange(256, dtype=torch.uint8)
    expected = codes.view(torch.float8_e4m3fn).float()  # (256,): subnormals, +-448, -0 and two NaNs
    decoded = kernel.fp8_e4m3_values()
    assert torch.equal(decoded.isnan(), expected.isnan()) and int(decoded.isnan().sum()) == 2
    finite = ~expected.isnan()
    assert torch.equal(decoded[finite], expected[finite]) and decoded[finite].abs().max() == 448
    assert torch.equal(decoded[finite].signbit(), expected[finite].signbit())  # code 128 is -0.0


def written_cache(kv_cache_dtype, num_kv_heads, head_dim, lengths, block_size=16, seed=0):
    """A quantized cache holding requests of the given context lengths, written through `write` as the
    engine writes them (each row quantized with its own scale), on blocks scattered over the pool."""
    generator = torch.Generator().manual_seed(seed)
    max_blocks = max(-(-n // block_size) for n in lengths)
    num_blocks = len(lengths) * max_blocks + 3
    shape = CacheShape(num_layers=1, num_kv_heads=num_kv_heads, head_dim=head_dim, dtype=torch.float32,
                       kv_cache_dtype=kv_cache_dtype)
    cache = PagedKVCache(shape, num_blocks, block_size, torch.device("cpu"))
    tables = torch.randperm(num_blocks, generator=generator)[:len(lengths) * max_blocks]
    tables = tables.view(len(lengths), max_blocks).to(torch.int32)  # (num_seqs, max_blocks)
    for table, n in zip(tables.tolist(), lengths):
        slots = torch.tensor([table[pos // block_size] * block_size + pos % block_size for pos in range(n)])
        # rows of very different sizes, so that each row's own scale matters
        size = torch.rand(n, num_kv_heads, 1, generator=generator) * 4
        keys = torch.randn(n, num_kv_heads, head_dim, generator=generator) * size
        values = torch.randn(n, num_kv_heads, head_dim, generator=generator) * size
        cache.write(0, keys, values, slots)
    return cache, tables


def sdpa_path(query, cache, metadata, window, scale, softcap):
    """The engine's other path, one query token at a time: its request's blocks gathered and
    dequantized (gather_blocks), then the runner's attend() (SDPA) under a mask of its positions."""
    num_heads, num_kv_heads = query.shape[1], cache.shape.num_kv_heads
    out = torch.empty(query.shape)
    for n in range(query.shape[0]):
        keys, values = cache.gather_blocks(0, metadata.block_tables[metadata.token_seq[n]][None].long())
        key_pos, pos = torch.arange(keys.shape[1]), int(metadata.token_pos[n])  # (Lk,)
        allowed = key_pos <= pos
        if window:
            allowed &= key_pos > pos - window
        mask = allowed.expand(1, 1, num_heads // num_kv_heads, -1)  # (1, 1, G, Lk)
        out[n] = attend(query[n][None, None], keys, values, mask, scale, softcap)[0, 0]  # (H, D)
    return out


CASES = {  # every request runs its last `chunk` tokens: 1 is a decode, more a prefill chunk
    "GQA decodes of different lengths": dict(num_heads=8, num_kv_heads=2, head_dim=32, lengths=[1, 17, 200, 33],
                                             chunk=1),
    "GQA prefill chunks": dict(num_heads=6, num_kv_heads=2, head_dim=64, lengths=[40, 7, 70], chunk=24),
    "MHA, head size 40": dict(num_heads=4, num_kv_heads=4, head_dim=40, lengths=[150, 5], chunk=3),
    "more heads than one item holds": dict(num_heads=96, num_kv_heads=4, head_dim=16, lengths=[50, 9], chunk=2),
    "head size 128, past one span": dict(num_heads=4, num_kv_heads=1, head_dim=128, lengths=[300], chunk=4),
}


@pytest.mark.parametrize("kv_cache_dtype", QUANTIZED)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("window, softcap", [(None, None), (10, None), (None, 5.0)])
def test_kernel_over_codes_equals_the_sdpa_path_over_the_same_cache(kv_cache_dtype, case, window, softcap):
    setting = dict(CASES[case])
    num_heads, chunk = setting.pop("num_heads"), setting.pop("chunk")
    cache, tables = written_cache(kv_cache_dtype, **setting)
    token_seq, token_pos = [], []
    for s, n in enumerate(setting["lengths"]):
        for pos in range(max(0, n - chunk), n):
            token_seq.append(s)
            token_pos.append(pos)
    metadata = KernelMetadata(tables, torch.tensor(token_seq, dtype=torch.int32),
                              torch.tensor(token_pos, dtype=torch.int32))
    generator = torch.Generator().manual_seed(1)
    # laid out as the model hands queries over: (1, H, N, D) seen as (N, H, D), not contiguous
    query = torch.randn(1, num_heads, len(token_seq), setting["head_dim"], generator=generator)[0].transpose(0, 1)
    scale = setting["head_dim"] ** -0.5
    out = torch.full(query.shape, float("nan"))
    kernel(query, cache.key_cache[0], cache.value_cache[0], out, metadata, window, scale, softcap,
           cache.layer_scales[0])
    expected = sdpa_path(query, cache, metadata, window, scale, softcap)
    torch.testing.assert_close(out, expected, atol=2e-5, rtol=1e-4)


def test_the_kernel_refuses_codes_without_their_scales():
    cache, tables = written_cache("int8", num_kv_heads=1, head_dim=8, lengths=[4])
    metadata = KernelMetadata(tables, torch.tensor([0], dtype=torch.int32), torch.tensor([3], dtype=torch.int32))
    with pytest.raises(AssertionError, match="scales"):
        kernel(torch.randn(1, 1, 8), cache.key_cache[0], cache.value_cache[0], torch.empty(1, 1, 8), metadata,
               None, 1.0, None)


BUNDLED_PROMPTS = ["ROMEO:", "JULIET:\nO Romeo, Romeo, wherefore art thou",
                   "First Citizen:\nBefore we proceed any further, hear me speak.", "KING RICHARD III:\nNow is"]


@pytest.mark.parametrize("kv_cache_dtype", QUANTIZED)
def test_the_bundled_model_on_an_8bit_cache_runs_the_kernel_and_matches_sdpa(bundled, kv_cache_dtype):
    greedy = SamplingParams(max_tokens=24, ignore_eos=True)
    outputs = {}
    for attention in ("auto", "sdpa"):
        # a small step budget: prompts arrive in chunks, decodes of different lengths share steps
        engine = Engine(bundled, attention=attention, kv_cache_dtype=kv_cache_dtype, max_num_batched_tokens=16)
        outputs[attention] = [o.token_ids for o in engine.generate(BUNDLED_PROMPTS, greedy)]
        uses_kernel = attention == "auto"
        assert (engine.attention_kernel is not None) == uses_kernel
        assert engine.stats["kernel_steps"] == (engine.step_index if uses_kernel else 0) and engine.step_index > 24
    assert outputs["auto"] == outputs["sdpa"]


@pytest.mark.parametrize("kv_cache_dtype", QUANTIZED)
def test_sliding_window_and_softcap_layers_on_an_8bit_cache_match_sdpa(kv_cache_dtype):
    model = tiny_model("gemma2")  # GQA, a window of 8 on every other layer, soft-capped logits
    prompts = [[(5 * i + j) % (VOCAB - 2) + 1 for j in range(9 + 7 * i)] for i in range(4)]
    greedy = SamplingParams(max_tokens=20, ignore_eos=True)
    outputs = {}
    for attention in ("auto", "sdpa"):
        engine = Engine(model, attention=attention, kv_cache_dtype=kv_cache_dtype, block_size=4,
                        max_num_batched_tokens=12)
        outputs[attention] = [o.token_ids for o in engine.generate(prompts, greedy)]
        assert (engine.stats["kernel_steps"] > 0) == (attention == "auto")
    assert outputs["auto"] == outputs["sdpa"]


def test_a_per_tensor_fp8_cache_has_no_row_scales_for_the_kernel_and_gathers(bundled):
    """"fp8_per_tensor" (vLLM's scheme) stores codes with one scale of 1.0 for the whole cache: the
    kernel, which reads a scale per row, is not picked, and every step gathers the blocks instead."""
    engine = Engine(bundled, kv_cache_dtype="fp8_per_tensor")
    outputs = engine.generate(BUNDLED_PROMPTS, SamplingParams(max_tokens=8, ignore_eos=True))
    assert engine.cache.scales is None and engine.attention_kernel is None
    assert engine.stats["kernel_steps"] == 0 and all(len(o.token_ids) == 8 for o in outputs)
