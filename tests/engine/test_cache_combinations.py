"""The three kinds of cache that issue 26 added, together: an 8-bit cache of MLA's latent rows,
and an 8-bit cache on a model whose sliding-window layers give blocks back.

Each kind has its own tests (test_mla.py, test_kv_cache_dtype.py, test_sliding_window.py); these
check that the bytes still add up and that nothing breaks where two of them meet.
"""

import pytest
import torch

from kvviz import Engine, SamplingParams

from tiny_models import VOCAB, tiny_model

SCALE_BYTES = 4  # one float32 scale per row


def prompts(seed=3):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB - 1, (n,), generator=generator).tolist() for n in (6, 21, 30)]


def token_ids(outputs):
    return [output.token_ids for output in outputs]


@pytest.mark.parametrize("kv_cache_dtype", ["int8", "fp8"])
def test_an_8_bit_mla_cache_holds_one_byte_a_latent_value_and_one_scale_a_row(kv_cache_dtype):
    model = tiny_model("deepseek_v3")
    full = Engine(model, block_size=4, num_blocks=40)
    small = Engine(model, block_size=4, num_blocks=40, kv_cache_dtype=kv_cache_dtype)
    row = full.cache_shape.head_dim  # latent + RoPE key: MLA's one row, no V
    layers = full.cache_shape.num_layers
    assert full.cache_shape.latent and small.cache_shape.latent
    assert full.cache_shape.bytes_per_token == layers * row * 4  # float32
    assert small.cache_shape.bytes_per_token == layers * (row + SCALE_BYTES)
    assert small.cache.nbytes == 40 * 4 * small.cache_shape.bytes_per_token  # measured on the tensors
    outputs = small.generate(prompts(), SamplingParams(max_tokens=8, ignore_eos=True))
    assert all(len(ids) == 8 for ids in token_ids(outputs))
    assert small.pool.num_free_blocks == 40  # every block back once the requests finish


def test_an_int8_cache_on_sliding_layers_gives_blocks_back_and_greedy_stays_close():
    model = tiny_model("gemma2")
    full = Engine(model, block_size=4, num_blocks=64)
    small = Engine(model, block_size=4, num_blocks=64, kv_cache_dtype="int8")
    assert len(small.layer_groups) == 2  # the full-attention group and the sliding one
    params = SamplingParams(max_tokens=16, ignore_eos=True)
    expected = token_ids(full.generate(prompts(), params))
    for prompt in prompts():
        small.add_request(prompt, params)
    events = []
    while small.has_unfinished():
        events += small.step().events
    got = [small.requests[rid].output_token_ids for rid in sorted(small.requests)]
    assert [len(ids) for ids in got] == [16, 16, 16]
    agree = sum(a == b for e, g in zip(expected, got) for a, b in zip(e, g)) / 48
    assert agree >= 0.75, f"int8 greedy agreed on only {agree:.0%} of tokens with the full-precision cache"
    assert any(event.kind == "slide" for event in events), "the sliding group gave no block back"
    assert all(group.pool.num_free_blocks == 64 for group in small.layer_groups)  # nothing leaked
