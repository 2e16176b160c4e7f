"""The eviction lab: sinks + window and heavy hitters (H2O) beside the sliding window, on real models.

A budget that covers the whole sequence must give the full cache's logits exactly; a smaller one
must never be exceeded, in any layer or KV head, and must keep what the policy promises.
"""

import numpy as np
import pytest
import torch

from kvviz.strategies.eviction import (
    POLICIES,
    EvictionLab,
    eviction_lab,
    eviction_table,
    kept_positions,
    policy_layer,
    run_policy,
)
from kvviz.strategies.heavy_hitters import HeavyHitterKV

from tiny_models import VOCAB, tiny_model

MAX_TOKENS = 10
EVICTING = POLICIES[1:]


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def model(request):
    return tiny_model(request.param)  # 2 layers, 4 query heads, 2 KV heads


def prompt(length, seed=0):
    return torch.randint(0, VOCAB - 1, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.parametrize("policy", EVICTING)
def test_budget_covering_the_sequence_is_the_full_cache(model, policy):
    ids = prompt(9)
    budget = len(ids) + MAX_TOKENS  # every token fits
    full = run_policy(model, ids, "full", MAX_TOKENS, budget)
    run = run_policy(model, ids, policy, MAX_TOKENS, budget, sinks=3, recent=4)
    assert run.token_ids == full.token_ids
    for got, want in zip(run.logprobs, full.logprobs):
        assert np.array_equal(got, want)  # bit for bit: the same keys reach the same attention code
    assert run.held_tokens == full.held_tokens == [[len(ids) + s] * 2 for s in range(MAX_TOKENS)]
    assert np.all(run.retention[~np.isnan(run.retention)] == 1)


@pytest.mark.parametrize("policy", EVICTING)
def test_small_budget_is_never_exceeded(model, policy):
    ids, budget = prompt(12, seed=1), 6
    run = run_policy(model, ids, policy, MAX_TOKENS, budget, sinks=2, recent=3)
    full = run_policy(model, ids, "full", MAX_TOKENS, budget)
    per_token_bytes = full.held_bytes[0] // len(ids)
    for step, held in enumerate(run.held_tokens):  # the prompt alone is already over the budget
        assert held == [budget, budget], f"step {step}"
        kept = run.retention[step, :len(ids) + step]
        assert kept.sum() == pytest.approx(budget)  # budget positions per (layer, KV head)
        assert np.isnan(run.retention[step, len(ids) + step:]).all()
        if policy != "heavy_hitters":  # H2O also keeps its attention scores
            assert run.held_bytes[step] == budget * per_token_bytes
    assert run.logprobs[0].tolist() == full.logprobs[0].tolist()  # the prefill attends to the whole prompt
    assert any(not np.array_equal(a, b) for a, b in zip(run.logprobs[1:], full.logprobs[1:]))


def test_sinks_keep_the_first_tokens_and_a_recent_window(model):
    ids, budget, sinks = prompt(8, seed=2), 6, 2
    run = run_policy(model, ids, "sinks", MAX_TOKENS, budget, sinks=sinks)
    for step, row in enumerate(run.retention):
        seen = len(ids) + step
        expected = np.zeros(seen)
        expected[:sinks] = expected[seen - (budget - sinks):] = 1
        assert row[:seen].tolist() == expected.tolist(), f"step {step}"


def test_heavy_hitters_keep_the_budget_and_the_recent_window(model):
    ids, budget, recent = prompt(10, seed=3), 7, 3
    run = run_policy(model, ids, "heavy_hitters", MAX_TOKENS, budget, recent=recent)
    for step, row in enumerate(run.retention):
        seen = len(ids) + step
        assert row[seen - recent:seen].tolist() == [1.0] * recent  # every layer and head keeps the newest
        assert row[:seen].sum() == pytest.approx(budget)


def test_heavy_hitters_evict_the_least_attended_keys():
    layer = HeavyHitterKV(budget=4, recent=2)
    keys = torch.randn(1, 2, 8, 4)  # (B, KVH, T, D)
    returned, _ = layer.update(keys, keys.clone(), 0)
    assert returned.shape[-2] == 8 and layer.num_held_tokens() == 8  # nothing leaves before the scores come
    # attention received by each key, per query head (4 heads share 2 KV heads); one query
    received = torch.tensor([[5, 1, 0, 4, 2, 3, 9, 9], [5, 1, 0, 4, 2, 3, 9, 9],
                             [0, 6, 7, 1, 1, 1, 9, 9], [0, 6, 7, 1, 1, 1, 9, 9]], dtype=torch.float32)
    layer.observe(received[None, :, None, :] / received.sum(-1, keepdim=True)[None, :, None, :])
    # KV head 0: largest among positions 0..5 are 0 and 3; KV head 1: 1 and 2; both keep 6 and 7
    assert kept_positions(layer).tolist() == [[0, 3, 6, 7], [1, 2, 6, 7]]
    assert torch.equal(layer.keys[0, 0], keys[0, 0, [0, 3, 6, 7]])
    assert torch.equal(layer.keys[0, 1], keys[0, 1, [1, 2, 6, 7]])
    with pytest.raises(ValueError, match="different tokens"):
        layer.read()


def test_the_lab_on_the_bundled_model(bundled):
    lab = eviction_lab(bundled, "ROMEO:\nBut soft, what light", max_tokens=12, budget=8, sinks=2)
    assert isinstance(lab, EvictionLab) and [r.policy for r in lab.runs] == list(POLICIES)
    full = lab.runs[0]
    assert full.kl == [0.0] * 12 and full.first_difference is None
    first = lab.first_evicted_step
    assert first == max(0, 8 - len(lab.prompt_token_ids) + 1) + 1
    for run in lab.runs[1:]:
        assert run.text == bundled.tokenizer.decode(run.token_ids)
        assert all(k == 0.0 for k in run.kl[:first]) and max(run.kl) > 0  # the same until the first drop
        assert max(max(h) for h in run.held_tokens) <= 8
        assert run.first_difference is None or run.first_difference >= first
    table = eviction_table(lab, lambda t: bundled.tokenizer.decode([t]))
    assert [row["max KL (nats)"] for row in table] == [max(r.kl) for r in lab.runs]
    assert table[0]["first different token"] == "never"


def test_a_budget_that_holds_every_token_evicts_nothing(model):
    ids = prompt(6, seed=4)
    # step s reads the prompt and s - 1 more tokens from the cache; the last pick is never run
    lab = eviction_lab(model, ids, max_tokens=5, budget=len(ids) + 3)
    assert lab.first_evicted_step is None
    assert all(run.kl == [0.0] * 5 and run.first_difference is None for run in lab.runs)
    lab = eviction_lab(model, ids, max_tokens=5, budget=len(ids) + 2)
    assert lab.first_evicted_step == 4
    assert all(run.kl[:4] == [0.0] * 4 and run.kl[4] > 0 for run in lab.runs[1:])


@pytest.mark.parametrize("settings, message", [
    (dict(budget=4, sinks=4), "fewer sinks than the budget"),
    (dict(budget=1), "budget must be a whole number of at least 2"),
    (dict(max_tokens=2000), "shorten the prompt"),
    (dict(recent=9, budget=8), "recent window must be 0 to 7"),
])
def test_bad_settings_give_one_sentence(bundled, settings, message):
    with pytest.raises(ValueError, match=message):
        eviction_lab(bundled, "Hello", **{"max_tokens": 4, **settings})


def test_unknown_policy():
    with pytest.raises(ValueError, match="Unknown eviction policy"):
        policy_layer("lru", 4, 0, 0)
