"""MLA (DeepSeek-V3) in the engine: the cache holds one latent row per token and layer, and the
greedy outputs still equal transformers' own generate."""

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from kvviz import Engine, EngineError, SamplingParams
from kvviz.memory_bill import compare_attention_variants, kv_bytes_per_token
from kvviz.shapes import ModelShape

from tiny_models import (ENGINE_SETTINGS as HF_SETTINGS, MAX_TOKENS, VOCAB, hf_greedy, mixed_prompts, tiny_config,
                         tiny_model)

# the settings every architecture is checked under, and swap preemption, whose blocks hold latent rows
ENGINE_SETTINGS = {**HF_SETTINGS, "tight pool, swap": dict(num_blocks=12, block_size=4, preemption_mode="swap")}
LATENT, ROPE = 32, 8  # tiny_config("deepseek_v3"): kv_lora_rank, qk_rope_head_dim


def plain_variant(seed=0):
    """DeepSeek-V3 without the query latent and with RoPE in halves, not interleaved pairs."""
    torch.manual_seed(seed)
    config = tiny_config("deepseek_v3")
    config.q_lora_rank, config.rope_interleave = None, False
    config._attn_implementation = "sdpa"
    return AutoModelForCausalLM.from_config(config).eval()


MODELS = {"deepseek-v3": lambda: tiny_model("deepseek_v3"), "no q latent, rope halves": plain_variant}


@pytest.fixture(scope="module", params=MODELS)
def mla_case(request):
    model = MODELS[request.param]()
    prompts = mixed_prompts()
    return request.param, model, prompts, [hf_greedy(model, p, MAX_TOKENS) for p in prompts]


@pytest.mark.parametrize("setting", ENGINE_SETTINGS)
def test_greedy_identical_to_hf_generate(mla_case, setting):
    name, model, prompts, expected = mla_case
    engine = Engine(model, **ENGINE_SETTINGS[setting])
    records = []
    outs = engine.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True),
                           progress=lambda done, total, record: records.append(record))
    assert [o.token_ids for o in outs] == expected, f"{name} / {setting}"
    assert engine.cache_shape.latent
    if setting.startswith("tight pool"):
        assert engine.scheduler.num_preemptions > 0
    if setting == "chunked prefill":  # the 33-token prompt runs over several steps of at most 7 tokens
        chunks = [c for r in records for c in r.chunks if c.request_id == 2 and c.kind == "prefill"]
        assert len(chunks) >= 5 and max(r.num_tokens_run for r in records) <= 7
    if setting == "prefix caching":
        assert engine.stats["cached_tokens"] == 16  # prompts 4 and 5 share one full block
        again = engine.generate([prompts[4]], SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True))
        assert again[0].token_ids == expected[4] and again[0].num_cached_tokens == 16
    if engine.pool is not None:
        engine.pool.check_invariants()
        assert engine.pool.num_free_blocks == engine.num_blocks
    # outside the engine's steps the attention modules run their own forward, unchanged
    assert hf_greedy(model, prompts[1], MAX_TOKENS) == expected[1]


def test_sampled_forks_and_drafts_match_greedy(mla_case):
    """Parallel samples (copy-on-write of shared latent blocks) and speculative drafts (rolled
    back slots) on the latent cache give the same greedy tokens."""
    name, model, prompts, expected = mla_case
    engine = Engine(model, speculative_tokens=3)
    outs = engine.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True))
    assert [o.token_ids for o in outs] == expected
    two_samples = SamplingParams(max_tokens=MAX_TOKENS, n=2, ignore_eos=True)
    forked = Engine(model, block_size=4).generate([prompts[2]], two_samples)
    assert forked[0].samples == [expected[2], expected[2]]


def test_blocks_hold_the_latent_and_rotary_key():
    """What a block holds per token and layer is exactly transformers' own MLA cache: the latent
    after kv_a_layernorm (32 values) and the shared key after rotary (8 values), nothing per head."""
    model = tiny_model("deepseek_v3")
    prompt = mixed_prompts()[2]  # 33 tokens: 9 blocks of 4
    with torch.no_grad():
        reference = model(torch.tensor([prompt]), use_cache=True).past_key_values  # latent, rope per layer
    engine = Engine(model, block_size=4)
    request_id = engine.add_request(prompt, SamplingParams(max_tokens=2))
    engine.step()  # the whole prompt: every token's row is in the cache
    keys, values = engine.cache.read_request(engine.requests[request_id].block_table, len(prompt))
    assert values is None and keys.shape == (2, len(prompt), 1, LATENT + ROPE)
    assert engine.cache.storage.shape == (1, 2, engine.num_blocks, 4, 1, LATENT + ROPE)
    for layer, cached in enumerate(reference.layers):
        expected = torch.cat([cached.keys[0, 0], cached.values[0, 0]], -1)  # (tokens, 32 + 8)
        torch.testing.assert_close(keys[layer, :, 0], expected, rtol=1e-5, atol=1e-5)


def test_bytes_per_token_equal_the_bill_mla_row():
    model = tiny_model("deepseek_v3")
    engine = Engine(model, num_blocks=20, block_size=4)
    shape = ModelShape.of_model(model)
    layers = shape.num_layers
    per_layer = engine.cache_shape.bytes_per_token // layers
    assert per_layer == (LATENT + ROPE) * 4 == 160  # float32
    assert engine.cache_shape.bytes_per_token == kv_bytes_per_token(shape, dtype_bytes=4)
    variants = {v.name.split()[0]: v for v in compare_attention_variants(shape, dtype_bytes=4)}
    assert variants["MLA"].this_model and variants["MLA"].bytes_per_token == engine.cache_shape.bytes_per_token
    # the same heads caching K and V: 4 heads × (24-value key + 16-value value) × 4 bytes
    assert variants["MHA"].bytes_per_token // layers == 4 * (24 + 16) * 4 == 640 == 4 * per_layer
    assert engine.cache.nbytes == engine.num_blocks * 4 * engine.cache_shape.bytes_per_token
    assert engine.cache.layer_nbytes() == [engine.num_blocks * 4 * per_layer] * layers
    engine.add_request(list(range(1, 11)), SamplingParams(max_tokens=2))
    record = engine.step()  # 10 tokens in 3 blocks of 4
    assert record.memory.token_bytes == 10 * engine.cache_shape.bytes_per_token
    assert record.memory.slack_bytes == 2 * engine.cache_shape.bytes_per_token


def test_trace_keeps_latent_rows_and_attention():
    model = tiny_model("deepseek_v3")
    engine = Engine(model, block_size=4)
    prompt = mixed_prompts()[1]  # 19 tokens
    request_id = engine.add_request(prompt, SamplingParams(max_tokens=3), trace=True)
    prefill = engine.step().trace
    decode = engine.step().trace
    assert prefill.latents.shape == (2, 19, LATENT + ROPE) and decode.latents.shape == (2, 20, LATENT + ROPE)
    assert prefill.keys.shape == (2, 19, 4, 24) and prefill.values.shape == (2, 19, 4, 16)  # rebuilt per head
    assert prefill.prompt_attention.shape == (2, 4, 19, 19)
    torch.testing.assert_close(torch.from_numpy(decode.attention).sum(-1), torch.ones(2, 4))
    cached, _ = engine.cache.read_request(engine.requests[request_id].block_table, 20)
    assert torch.equal(torch.from_numpy(decode.latents), cached[:, :, 0])
    exported = engine.step().to_dict()["trace"]  # the record's JSON keeps the cached rows
    assert np.asarray(exported["latents"]).shape == (2, 21, LATENT + ROPE)


def test_mla_model_without_deepseek_v3_attention_is_refused():
    import transformers as tf

    config = tf.DeepseekV2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=1,
                                 num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=32, q_lora_rank=None,
                                 qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, first_k_dense_replace=1)
    model = AutoModelForCausalLM.from_config(config).eval()
    with pytest.raises(EngineError, match="DeepSeek-V3's attention layers"):
        Engine(model)
