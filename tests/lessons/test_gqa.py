"""GQA/MQA by mean-pooling KV heads: fewer heads, a smaller cache, the same model otherwise."""

import math

import pytest
import torch

from kvviz import Engine, SamplingParams
from kvviz.lessons.cache_strategies.gqa import convert_kv_heads, gqa_report, measured_bytes_per_token

from tiny_models import VOCAB, hf_greedy


@pytest.fixture(scope="module")
def mha4():
    """A tiny Llama with 8 query heads and 4 KV heads of 8 dims, biases on its projections."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=128,
                         attention_bias=True, bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1, pad_token_id=0)
    config._attn_implementation = "sdpa"
    return LlamaForCausalLM(config).eval()


def test_halving_kv_heads_halves_projections_and_cache(mha4):
    gqa = convert_kv_heads(mha4, 2)
    old_attn, new_attn = mha4.model.layers[0].self_attn, gqa.model.layers[0].self_attn
    assert gqa.config.num_key_value_heads == 2 and mha4.config.num_key_value_heads == 4
    assert new_attn.k_proj.out_features == new_attn.v_proj.out_features == 16 == old_attn.k_proj.out_features // 2
    # new head 0 is the mean of old heads 0 and 1, the query heads 0-3 read it
    old_rows = old_attn.k_proj.weight.detach().unflatten(0, (4, 8))  # (heads, head_dim, hidden)
    torch.testing.assert_close(new_attn.k_proj.weight[:8], (old_rows[0] + old_rows[1]) / 2)
    torch.testing.assert_close(new_attn.v_proj.bias[8:], old_attn.v_proj.bias.view(4, 8)[2:].mean(0))
    torch.testing.assert_close(new_attn.q_proj.weight, old_attn.q_proj.weight)  # queries untouched
    assert measured_bytes_per_token(gqa) * 2 == measured_bytes_per_token(mha4)
    mqa = convert_kv_heads(mha4, 1)
    assert measured_bytes_per_token(mqa) * 4 == measured_bytes_per_token(mha4)


def test_same_head_count_is_the_identity(mha4):
    same = convert_kv_heads(mha4, 4)
    ids = torch.tensor([[5, 17, 3, 60, 2, 9]])
    with torch.no_grad():
        torch.testing.assert_close(same(ids).logits, mha4(ids).logits, rtol=0, atol=0)


def test_converted_model_runs_in_the_engine(mha4):
    gqa = convert_kv_heads(mha4, 2)
    prompts = [[5, 17, 3, 60, 2, 9], [1, 2, 3]]
    expected = [hf_greedy(gqa, p, 8) for p in prompts]
    outs = Engine(gqa, num_blocks=8, block_size=4).generate(prompts, SamplingParams(max_tokens=8, ignore_eos=True))
    assert [o.token_ids for o in outs] == expected


@pytest.mark.parametrize("heads, message", [(3, "divides 4"), (8, "divides 4"), (0, "above zero")])
def test_bad_head_counts(mha4, heads, message):
    with pytest.raises(ValueError, match=message):
        convert_kv_heads(mha4, heads)


def test_bundled_mqa_report(bundled):
    report = gqa_report(bundled, 1, window=64, num_windows=2)
    assert (report.kv_heads_before, report.kv_heads_after) == (2, 1)
    assert report.bytes_per_token_before == report.predicted_bytes_per_token_before == 3072
    assert report.bytes_per_token_after == report.predicted_bytes_per_token_after == 1536
    assert report.cache_saved_fraction == 0.5
    assert math.isfinite(report.loss_before) and math.isfinite(report.loss_after)
    assert report.loss_change == pytest.approx(report.loss_after - report.loss_before)
