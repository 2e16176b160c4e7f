"""Cache strategies: the exact ones agree token for token, the lossy ones lose what they should,
and every byte their tensors hold is either the formula or a named difference."""

import json

import numpy as np
import pytest
import torch

from kvviz.lessons.cache_strategies.logic import compare_strategies
from kvviz.memory_bill import kv_cache_bytes
from kvviz.strategies.bill import full_attention_shape
from kvviz.strategies.options import StrategySpec
from kvviz.strategies.quantized import dequantize, quantize
from kvviz.strategies.run import run_strategy

from tiny_models import VOCAB, hf_greedy, tiny_model

MAX_TOKENS = 12


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama")  # 2 layers, 4 query heads, 2 KV heads, head_dim 16, context 256


def prompt(length, seed=0):
    return torch.randint(0, VOCAB - 1, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


def test_exact_strategies_match_hf_generate(model):
    ids = prompt(10)
    expected = hf_greedy(model, ids, MAX_TOKENS)
    for spec in ("dynamic", ("static", {"capacity": 64}), ("paged", {"block_size": 4}), "no_cache",
                 ("sliding_window", {"window": 64}), ("quantized", {"bits": 4, "residual": 64})):
        run = run_strategy(model, ids, StrategySpec.of(spec), MAX_TOKENS)
        assert run.token_ids == expected, run.label
        assert [s.context_tokens for s in run.steps] == list(range(10, 10 + MAX_TOKENS))
        assert all(s.forward_s > 0 for s in run.steps)


def test_sliding_window_changes_logits_only_past_the_window(model):
    ids, window = prompt(6), 8
    full = run_strategy(model, ids, "dynamic", MAX_TOKENS)
    slid = run_strategy(model, ids, "sliding_window", MAX_TOKENS, window=window,
                        forced_tokens=full.token_ids, reference=full)
    for step, (f, s) in enumerate(zip(full.steps, slid.steps)):
        cached_before = len(ids) + step - 1  # tokens the cache held when this step began
        if step == 0 or cached_before <= window:  # every earlier token still visible
            np.testing.assert_allclose(s.logprobs, f.logprobs, atol=1e-5)
        else:
            assert np.abs(s.logprobs - f.logprobs).max() > 1e-4, f"step {step} should differ"
        assert s.cached_tokens == min(s.context_tokens, window)
        assert s.bill.measured_bytes == s.bill.predicted_bytes
    names = [d.name for d in slid.steps[-1].bill.differences]
    assert names and "older than the window" in names[0]
    # a prompt longer than the window: the prefill sees it whole, the first decode no longer does
    long_prompt = prompt(12, seed=1)
    full = run_strategy(model, long_prompt, "dynamic", 3)
    slid = run_strategy(model, long_prompt, "sliding_window", 3, window=4, forced_tokens=full.token_ids)
    np.testing.assert_allclose(slid.steps[0].logprobs, full.steps[0].logprobs, atol=1e-5)
    assert np.abs(slid.steps[1].logprobs - full.steps[1].logprobs).max() > 1e-4


@pytest.mark.parametrize("bits", [4, 8])
def test_quantize_error_is_at_most_half_a_step(bits):
    x = torch.randn(2, 3, 5, 16) * 3  # (batch, kv_heads, tokens, head_dim)
    codes, scale, zero = quantize(x, bits, group_size=8)
    assert codes.dtype == torch.uint8 and codes.shape[-1] == 16 * bits // 8  # int4: two codes a byte
    assert scale.shape == zero.shape == (2, 3, 5, 2)
    error = (dequantize(codes, scale, zero, bits) - x).abs().unflatten(-1, (2, 8))  # per group
    assert (error <= scale[..., None] / 2 * (1 + 1e-4) + 1e-6).all()


def test_quantized_int8_close_int4_further(model):
    ids = prompt(10, seed=2)
    full = run_strategy(model, ids, "dynamic", MAX_TOKENS)
    runs = {bits: run_strategy(model, ids, "quantized", MAX_TOKENS, bits=bits, forced_tokens=full.token_ids,
                               reference=full) for bits in (8, 4)}
    kl = {}
    for bits, run in runs.items():
        p = np.exp(np.stack([s.logprobs for s in full.steps]).astype(np.float64))
        q = np.stack([s.logprobs for s in run.steps]).astype(np.float64)
        kl[bits] = (p * (np.log(p) - q)).sum(-1)
    key_error = {bits: max(s.max_key_error for s in run.steps) for bits, run in runs.items()}
    assert kl[8][0] < 1e-9  # the prefill attends its own keys at full precision
    assert kl[8].max() < 1e-3 and 0 < key_error[8] < key_error[4]
    assert kl[8].sum() < kl[4].sum()
    # the bytes: codes, scales and zero points, as kvviz.memory_bill predicts
    for run in runs.values():
        bill = run.steps[-1].bill
        assert bill.measured_bytes == bill.predicted_bytes < bill.formula_bytes
        assert [d.name for d in bill.differences][1:] == ["quantization scales", "quantization zero points"]
    assert runs[4].steps[-1].bill.measured_bytes < runs[8].steps[-1].bill.measured_bytes


def test_measured_bytes_against_the_formula(model):
    ids = prompt(5, seed=3)
    shape = full_attention_shape(model)
    per_token = kv_cache_bytes(shape, 1, 1, 4)
    dynamic = run_strategy(model, ids, "dynamic", MAX_TOKENS)
    for step in dynamic.steps:
        assert step.bill.measured_bytes == step.bill.formula_bytes == step.context_tokens * per_token
        assert step.bill.differences == []
        assert step.bill.layer_bytes == [step.bill.measured_bytes // 2] * 2
    static = run_strategy(model, ids, "static", MAX_TOKENS, capacity=40)
    for step in static.steps:
        assert step.bill.measured_bytes == 40 * per_token  # all of it, from the first step
        (difference,) = step.bill.differences
        assert difference.name.startswith("reserved but empty")
        assert difference.num_bytes == (40 - step.context_tokens) * per_token
    paged = run_strategy(model, ids, "paged", MAX_TOKENS, block_size=4)
    num_blocks = paged.options["num_blocks"]
    for step in paged.steps:
        bill = step.bill
        # the allocated blocks: measured from the pool's tensors, equal to the formula for them
        assert bill.measured_bytes == bill.predicted_bytes == kv_cache_bytes(shape, num_blocks * 4, 1, 4)
        slack, free = bill.differences
        assert slack.name.startswith("last-block slack") and free.name.startswith("free blocks")
        assert slack.num_bytes == (-step.context_tokens % 4) * per_token
    none = run_strategy(model, ids, "no_cache", 3)
    assert [s.bill.measured_bytes for s in none.steps] == [0, 0, 0]
    assert [s.num_tokens_run for s in none.steps] == [5, 6, 7]  # recomputes the whole sequence
    json.dumps(paged.to_dict())


@pytest.mark.parametrize("name, options, message", [
    ("sliding_window", {"window": 0}, "window must be a whole number above zero"),
    ("sliding_window", {"window": 1000}, "larger than the model's context"),
    ("quantized", {"bits": 3}, "bits must be 4 or 8"),
    ("quantized", {"group_size": 6}, "group_size must be even and divide"),
    ("static", {"capacity": 4}, "static capacity must be between"),
    ("dynamic", {"window": 4}, "has no option 'window'"),
    ("lru", {}, "Unknown strategy 'lru'"),
])
def test_bad_options_raise_one_sentence(model, name, options, message):
    with pytest.raises(ValueError, match=message) as error:
        run_strategy(model, prompt(5), name, 4, **options)
    assert str(error.value).count(". ") == 0 and str(error.value).endswith(".")


def test_bundled_model_comparison(bundled):
    strategies = ["dynamic", "paged", ("sliding_window", {"window": 4}), ("quantized", {"bits": 8}),
                  ("quantized", {"bits": 4})]
    results = {r.label: r for r in compare_strategies(bundled, "ROMEO:", 8, strategies)}
    full = results["dynamic"].token_ids
    for label in ("dynamic", "paged"):
        assert results[label].token_ids == full and results[label].first_divergence is None
        assert max(results[label].kl) < 1e-6
    sliding = results["sliding window (W=4)"].kl  # 2 prompt tokens: step 4 is the first not to see token 0
    assert max(sliding[:4]) < 1e-6 and sliding[4] > 0
    assert np.mean(results["int8"].kl) < np.mean(results["int4"].kl)
    assert all(r.held_bytes == r.predicted_bytes for r in results.values())
    json.dumps([r.to_dict() for r in results.values()])
