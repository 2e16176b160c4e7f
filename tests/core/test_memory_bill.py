"""The memory bill: hand-worked numbers for every kind of layer, config reading, and what fits."""
import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz import memory_bill
from kvviz.cli.bill import add_bill_arguments, run_bill
from kvviz.memory_bill import kv_cache_bytes
from kvviz.shapes import FULL, MLA, PRESETS, SLIDING, ModelShape, get_preset

ARTICLE = ModelShape(num_layers=32, num_kv_heads=8, head_dim=128)
GIB = 2**30


# --- The forward question, worked by hand ----------------------------------------------------

def test_article_example_is_exactly_one_gib():
    # 2 × 32 layers × 8 KV heads × 128 dims × 8,192 tokens × 2 bytes = 2^30
    assert kv_cache_bytes(ARTICLE, tokens=8192, batch=1, dtype_bytes=2) == 1_073_741_824


def test_four_requests_cost_four_times_one():
    assert kv_cache_bytes(ARTICLE, tokens=8192, batch=4, dtype_bytes=2) == 4 * 1_073_741_824


def test_mha_gpt2():
    # 2 × 12 layers × 12 heads × 64 dims = 18,432 values a token; × 2 bytes × 1,024 tokens
    assert kv_cache_bytes(PRESETS["gpt2"], 1024) == 18_432 * 2 * 1024 == 37_748_736


def test_gqa_llama_3_1_8b_full_context():
    # 2 × 32 × 8 × 128 × 2 bytes = 131,072 bytes a token; × 131,072 tokens = 16 GiB
    assert memory_bill.kv_bytes_per_token(PRESETS["llama-3.1-8b"]) == 131_072
    assert kv_cache_bytes(PRESETS["llama-3.1-8b"], 131_072) == 16 * GIB


def test_sliding_mistral_holds_only_its_window():
    # 8,192 tokens but a 4,096 window on all 32 layers: 2 × 32 × 8 × 128 × 4,096 × 2 = 512 MiB,
    # half of what the same dims take when every layer keeps all 8,192 tokens (the article's 1 GiB).
    mistral = PRESETS["mistral-7b-v0.1"]
    assert kv_cache_bytes(mistral, 8192) == 536_870_912 == kv_cache_bytes(ARTICLE, 8192) // 2
    assert kv_cache_bytes(mistral, 100_000) == kv_cache_bytes(mistral, 4096)  # stops growing
    assert kv_cache_bytes(mistral, 1000) == kv_cache_bytes(ARTICLE, 1000)  # inside the window: no saving


def test_hybrid_gemma_2_9b():
    # 21 global layers keep 8,192 tokens: 2 × 21 × 8 × 256 × 8,192 × 2 = 1,409,286,144
    # 21 sliding layers keep 4,096:       2 × 21 × 8 × 256 × 4,096 × 2 =   704,643,072
    gemma = PRESETS["gemma-2-9b"]
    assert gemma.layer_kinds.count(FULL) == 21 and gemma.layer_kinds[:2] == (SLIDING, FULL)
    assert kv_cache_bytes(gemma, 8192) == 1_409_286_144 + 704_643_072
    lines = memory_bill.bill_breakdown(gemma, 8192)
    assert [(line.kind, line.num_layers, line.tokens_held, line.num_bytes) for line in lines] == [
        (FULL, 21, 8192, 1_409_286_144), (SLIDING, 21, 4096, 704_643_072)]
    assert "4,096 tokens (window)" in lines[1].formula


def test_gemma_3_27b_five_local_to_one_global():
    kinds = PRESETS["gemma-3-27b"].layer_kinds
    assert kinds[:6] == (SLIDING,) * 5 + (FULL,) and kinds.count(FULL) == 10


def test_mla_deepseek_v3():
    # one latent of 512 + 64 RoPE values per token per layer, no factor 2, no heads
    assert kv_cache_bytes(PRESETS["deepseek-v3"], 4096) == 61 * 576 * 4096 * 2 == 287_834_112
    formula = memory_bill.bill_breakdown(PRESETS["deepseek-v3"], 4096)[0].formula
    assert formula.startswith("61 layers × (512 latent + 64 RoPE) dims × 4,096 tokens")


def test_quantized_int4_with_group_scales():
    # a 128-value row: 128 × 4 bits = 64 bytes, + 2 groups of 64 × (2-byte scale + 2-byte zero) = 8
    # bytes; 72 bytes × 16 rows (K and V × 8 heads) × 32 layers = 36,864 bytes a token
    llama = PRESETS["llama-3.1-8b"]
    assert kv_cache_bytes(llama, 1000, quant_bits=4, quant_group_size=64) == 36_864 * 1000
    # KIVI-style: the newest 128 tokens stay in bf16 (131,072 bytes each)
    assert kv_cache_bytes(llama, 1000, quant_bits=4, quant_residual_tokens=128) == 872 * 36_864 + 128 * 131_072
    # int4 as a plain dtype has no scales: a quarter of bf16
    assert kv_cache_bytes(llama, 1000, dtype_bytes=memory_bill.dtype_bytes("int4")) == 131_072 * 1000 // 4


def test_paged_rounding_to_whole_blocks():
    # 1,000 tokens in 16-token blocks occupy 63 blocks = 1,008 slots
    llama = PRESETS["llama-3.1-8b"]
    assert kv_cache_bytes(llama, 1000, batch=2, block_size=16) == 2 * 1008 * 131_072
    formula = memory_bill.bill_breakdown(llama, 1000, block_size=16)[0].formula
    assert "1,008 tokens (1,000 rounded up to 16-token blocks)" in formula
    assert kv_cache_bytes(PRESETS["mistral-7b-v0.1"], 5000, block_size=16) == 536_870_912  # window 4,096 = 256 blocks


def test_static_reservation_holds_capacity_not_length():
    llama, gemma = PRESETS["llama-3.1-8b"], PRESETS["gemma-2-9b"]
    assert kv_cache_bytes(llama, 100, batch=2, reserved_tokens=4096) == 2 * 4096 * 131_072
    # sliding layers of a static cache reserve only their window
    assert kv_cache_bytes(gemma, 10, reserved_tokens=8192) == kv_cache_bytes(gemma, 8192)


def test_per_layer_list_sums_to_total():
    gemma = PRESETS["gemma-2-9b"]
    per_layer = memory_bill.kv_cache_bytes_per_layer(gemma, 6000, batch=3)
    assert len(per_layer) == 42 and sum(per_layer) == kv_cache_bytes(gemma, 6000, batch=3)
    assert per_layer[0] < per_layer[1]  # sliding, then global


@settings(max_examples=40, deadline=None)
@given(tokens=st.integers(0, 50_000), batch=st.integers(1, 8), preset=st.sampled_from(sorted(PRESETS)))
def test_bill_is_linear_in_batch_and_monotone_in_tokens(tokens, batch, preset):
    shape = PRESETS[preset]
    one = kv_cache_bytes(shape, tokens)
    assert kv_cache_bytes(shape, tokens, batch=batch) == batch * one
    assert kv_cache_bytes(shape, tokens + 1) >= one


def test_formula_reads_like_the_article():
    (line,) = memory_bill.bill_breakdown(ARTICLE, 8192)
    assert line.formula == ("2 (K and V) × 32 layers × 8 KV heads × 128 dims × 8,192 tokens × 1 request × "
                            "2 bytes = 1,073,741,824 bytes (1.00 GiB)")


def test_weights_and_dtypes():
    assert memory_bill.weights_bytes(PRESETS["llama-3.1-8b"], 2) == 16_060_522_496
    assert memory_bill.weights_bytes(PRESETS["bundled"], memory_bill.dtype_bytes("fp32")) == 4 * 5_278_976
    assert [memory_bill.dtype_bytes(name)
            for name in ("fp32", "bfloat16", "FP16", "torch.bfloat16", "int8", "int4")] == [4, 2, 2, 2, 1, 0.5]


def test_attention_variants_for_one_model_size():
    compared = memory_bill.compare_attention_variants(PRESETS["llama-3.1-8b"])
    variants = {v.name.split()[0]: v.bytes_per_token for v in compared}
    # per token: 2 × 32 layers × heads × 128 dims × 2 bytes; MLA: 32 layers × (512 + 64) × 2 bytes
    assert variants == {"MHA": 524_288, "GQA": 131_072, "MQA": 16_384, "MLA": 36_864}
    assert [v.this_model for v in compared] == [False, True, False, False]  # Llama-3.1-8B is GQA
    mla = compared[3]  # Llama has no latent: the bar is a what-if and says so
    assert mla.hypothetical and "hypothetical" in mla.name


def test_deepseek_v3_against_mha_counts_keys_and_values_apart():
    # DeepSeek-V3 config: 128 heads, qk_nope 128 + qk_rope 64 = 192 per key, v_head_dim 128,
    # kv_lora_rank 512. Real MHA: 128 × (192 + 128) = 40,960 values per token and layer (71× the
    # 576-value latent); V counted as 192 wide would give 49,152 (85×).
    compared = memory_bill.compare_attention_variants(PRESETS["deepseek-v3"])
    mha, mla = compared[0], compared[3]
    assert mha.values_per_token_per_layer == 40_960 and "K 192 + V 128" in mha.name
    assert mla.values_per_token_per_layer == 576 and mla.this_model and not mla.hypothetical
    assert round(mha.values_per_token_per_layer / mla.values_per_token_per_layer) == 71
    assert mha.bytes_per_token == 61 * 40_960 * 2
    # the bill of such an MHA model counts K and V rows apart too
    as_mha = ModelShape(num_layers=61, num_kv_heads=128, head_dim=192, v_head_dim=128)
    assert kv_cache_bytes(as_mha, 1) == mha.bytes_per_token
    assert "(192 K + 128 V) dims" in memory_bill.bill_breakdown(as_mha, 1)[0].formula


# --- Presets and configs ----------------------------------------------------------------------

def test_preset_facts():
    expected = {  # layers, heads, KV heads, head_dim, hidden
        "gpt2": (12, 12, 12, 64, 768), "gpt2-xl": (48, 25, 25, 64, 1600),
        "llama-2-7b": (32, 32, 32, 128, 4096), "llama-3.1-70b": (80, 64, 8, 128, 8192),
        "llama-3.1-405b": (126, 128, 8, 128, 16384), "qwen2.5-0.5b": (24, 14, 2, 64, 896),
        "qwen2.5-7b": (28, 28, 4, 128, 3584), "gemma-2-27b": (46, 32, 16, 128, 4608),
        "gemma-3-27b": (62, 32, 16, 128, 5376), "phi-3-mini": (32, 32, 32, 96, 3072),
        "smollm2-135m": (30, 9, 3, 64, 576), "bundled": (6, 8, 2, 32, 256)}
    for name, numbers in expected.items():
        shape = PRESETS[name]
        assert (shape.num_layers, shape.num_heads, shape.num_kv_heads, shape.head_dim, shape.hidden_size) == numbers
    assert PRESETS["bundled"].num_params == 5_278_976 and PRESETS["bundled"].max_context == 512
    assert PRESETS["deepseek-v3"].layer_kinds == (MLA,) * 61


def test_from_hf_config_llama_gqa_and_gpt2_mha():
    import transformers
    llama = ModelShape.from_hf_config(transformers.LlamaConfig(
        num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=2, hidden_size=128,
        max_position_embeddings=256))
    assert (llama.num_layers, llama.num_kv_heads, llama.head_dim, llama.max_context) == (3, 2, 16, 256)
    assert llama.layer_kinds == (FULL,) * 3
    gpt2 = ModelShape.from_hf_config(transformers.GPT2Config(n_layer=2, n_head=4, n_embd=64, n_positions=128))
    assert (gpt2.num_layers, gpt2.num_heads, gpt2.num_kv_heads, gpt2.head_dim, gpt2.max_context) == (2, 4, 4, 16, 128)


def test_from_hf_config_sliding_and_hybrid():
    import transformers
    mistral = ModelShape.from_hf_config(transformers.MistralConfig(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=64,
        sliding_window=32, max_position_embeddings=256))
    assert mistral.sliding_window == 32 and mistral.layer_kinds == (SLIDING, SLIDING)
    gemma2 = ModelShape.from_hf_config(transformers.Gemma2Config(
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, hidden_size=64, head_dim=32,
        sliding_window=16, max_position_embeddings=256))
    assert gemma2.head_dim == 32 and gemma2.layer_kinds == (SLIDING, FULL, SLIDING, FULL)
    gemma3 = ModelShape.from_hf_config(transformers.Gemma3Config(text_config=dict(  # nested text_config
        num_hidden_layers=12, num_attention_heads=4, num_key_value_heads=1, hidden_size=64, head_dim=16,
        sliding_window=8, max_position_embeddings=256)))
    assert gemma3.num_layers == 12 and gemma3.layer_kinds[:6] == (SLIDING,) * 5 + (FULL,)
    qwen = ModelShape.from_hf_config(transformers.Qwen2Config(
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, hidden_size=64,
        use_sliding_window=True, sliding_window=16, max_window_layers=2))
    assert qwen.layer_kinds == (FULL, FULL, SLIDING, SLIDING)
    qwen_off = ModelShape.from_hf_config(transformers.Qwen2Config(num_hidden_layers=2, hidden_size=64,
                                                                  num_attention_heads=4, num_key_value_heads=2))
    assert qwen_off.sliding_window is None and qwen_off.layer_kinds == (FULL, FULL)
    # Phi-3-mini-128k lists a window longer than its context; it never binds
    phi = ModelShape.from_hf_config(transformers.Phi3Config(
        num_hidden_layers=2, sliding_window=262_144, max_position_embeddings=131_072))
    assert phi.sliding_window is None and phi.layer_kinds == (FULL, FULL)


def test_from_hf_config_deepseek_mla():
    import transformers
    config = transformers.DeepseekV3Config(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                           kv_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=16,
                                           v_head_dim=16, q_lora_rank=16, n_routed_experts=4)
    shape = ModelShape.from_hf_config(config)
    assert (shape.kv_lora_rank, shape.qk_rope_head_dim, shape.layer_kinds) == (32, 8, (MLA, MLA))
    assert kv_cache_bytes(shape, 10) == 2 * 40 * 10 * 2


def test_presets_agree_with_their_real_configs():
    import transformers
    from_config = ModelShape.from_hf_config(transformers.Gemma2Config(
        num_hidden_layers=42, num_attention_heads=16, num_key_value_heads=8, hidden_size=3584, head_dim=256,
        sliding_window=4096, max_position_embeddings=8192))
    assert from_config.layer_kinds == PRESETS["gemma-2-9b"].layer_kinds
    assert kv_cache_bytes(from_config, 8192) == kv_cache_bytes(PRESETS["gemma-2-9b"], 8192)
    gemma3 = ModelShape.from_hf_config(transformers.Gemma3TextConfig(
        num_hidden_layers=62, num_attention_heads=32, num_key_value_heads=16, hidden_size=5376, head_dim=128,
        sliding_window=1024, max_position_embeddings=131_072))
    assert gemma3.layer_kinds == PRESETS["gemma-3-27b"].layer_kinds


# --- The reverse questions --------------------------------------------------------------------

def test_llama_8b_on_an_h100_by_hand():
    # usable: 90% of 80 GiB = 77,309,411,328; weights 16,060,522,496; cache budget 61,248,888,832
    llama = PRESETS["llama-3.1-8b"]
    assert memory_bill.cache_budget_bytes(llama, "H100 80GB") == 61_248_888_832
    assert memory_bill.max_cached_tokens(llama, "H100 80GB") == 61_248_888_832 // 131_072 == 467_291
    assert memory_bill.max_requests(llama, 8192, "H100 80GB") == 57
    assert memory_bill.max_context(llama, 1, "H100 80GB") == 131_072  # the model's own limit binds first


@pytest.mark.parametrize("preset, context", [("llama-3.1-8b", 8192), ("gemma-2-9b", 8192),
                                             ("mistral-7b-v0.1", 30_000), ("qwen2.5-7b", 3000)])
def test_max_requests_fills_the_budget(preset, context):
    shape = PRESETS[preset]
    budget = memory_bill.cache_budget_bytes(shape, "A100 40GB")
    per_request = kv_cache_bytes(shape, context)
    requests = memory_bill.max_requests(shape, context, "A100 40GB")
    assert requests * per_request <= budget < (requests + 1) * per_request


@pytest.mark.parametrize("preset, batch", [("llama-3.1-8b", 64), ("gemma-2-27b", 8), ("smollm2-135m", 4096)])
def test_max_context_fills_the_budget(preset, batch):
    shape = PRESETS[preset]
    budget = memory_bill.cache_budget_bytes(shape, "H100 80GB")
    context = memory_bill.max_context(shape, batch, "H100 80GB")
    assert kv_cache_bytes(shape, context, batch) <= budget
    assert context == shape.max_context or kv_cache_bytes(shape, context + 1, batch) > budget


def test_max_context_counts_tokens_past_the_window_only_on_full_layers():
    # one full and one sliding layer, 4 bytes a token each; budget 1,000 bytes.
    # past the 100-token window: 4 T + 400 <= 1000, so T = 150 (all-full would give 125)
    shape = ModelShape(num_layers=2, num_kv_heads=1, head_dim=1, layer_types=(FULL, SLIDING),
                       sliding_window=100, num_params=1)
    assert memory_bill.max_context(shape, 1, 1002, utilization=1.0) == 150
    only_sliding = ModelShape(num_layers=1, num_kv_heads=1, head_dim=1, sliding_window=10, num_params=1)
    assert memory_bill.max_context(only_sliding, 1, 1002, utilization=1.0, context_limit=10**6) == 10**6
    with pytest.raises(ValueError, match="context_limit"):
        memory_bill.max_context(only_sliding, 1, 1002, utilization=1.0)


def test_nothing_fits_when_the_weights_alone_do_not():
    big = PRESETS["llama-3.1-70b"]  # 141 GB of bf16 weights
    assert memory_bill.cache_budget_bytes(big, "H100 80GB") == 0
    assert memory_bill.max_requests(big, 1024, "H100 80GB") == 0
    assert memory_bill.max_context(big, 1, "H100 80GB") == 0
    assert memory_bill.fit_summary(big, 1024, 1, "H100 80GB").startswith("Does not fit: the weights alone")
    assert memory_bill.max_requests(big, 1024, "H200 141GB", dtype_bytes=1) > 0  # fp8 weights fit on an H200


def test_fit_with_tensor_parallel_is_one_gpus_share():
    # docs/scale-out.md: Llama-3.1-70B over 8 H100s holds 16.43 GiB of weights a GPU, room for 177 requests
    seventy = PRESETS["llama-3.1-70b"]
    one = memory_bill.per_gpu_shape(seventy, 8)
    assert (one.num_heads, one.num_kv_heads, one.num_params) == (8, 1, 70_553_706_496 // 8)
    assert memory_bill.fit_summary(seventy, 8192, 1, "H100 80GB", gpus=8) == (
        "Fits on each of 8 GPUs: weights 16.43 GiB + cache 320.00 MiB per GPU of 72.00 GiB usable (90%); "
        "room for 177 such requests at once.")
    # the room of 8 GPUs in bytes of the unsplit bill: 8 × one GPU's, since each holds 1 of the 8 KV heads
    room = memory_bill.cache_budget_bytes(seventy, "H100 80GB", gpus=8)
    assert room == 8 * memory_bill.cache_budget_bytes(one, "H100 80GB")
    assert room // kv_cache_bytes(seventy, 8192) == 177
    assert memory_bill.fit_summary(PRESETS["llama-3.1-405b"], 8192, 1, "H100 80GB", gpus=8).startswith(
        "Does not fit: each GPU's share of the weights (94.50 GiB) exceeds")


def test_memory_sizes(monkeypatch):
    assert memory_bill.ACCELERATORS["H100 80GB"] == 80 * GIB
    assert {"H200 141GB", "A100 40GB", "A100 80GB", "L4 24GB", "RTX 4090 24GB", "T4 16GB"} <= set(
        memory_bill.ACCELERATORS)
    assert memory_bill.memory_bytes("h100 80gb") == 80 * GIB
    assert memory_bill.memory_bytes("48GiB") == 48 * GIB and memory_bill.memory_bytes("48 GB") == 48 * 10**9
    assert memory_bill.memory_bytes(12345) == 12345
    monkeypatch.setitem(sys.modules, "torch", None)  # no torch: the RAM is measured, quickly
    assert memory_bill.this_machine_bytes() > 0 and memory_bill.memory_bytes("this machine") > 0


# --- Bad input: one clear sentence --------------------------------------------------------------

@pytest.mark.parametrize("call, message", [
    (lambda: ModelShape(num_layers=0, num_kv_heads=8, head_dim=128), "num_layers must be a whole number above zero"),
    (lambda: ModelShape(num_layers=2, num_kv_heads=-1, head_dim=128), "num_kv_heads must be"),
    (lambda: ModelShape(num_layers=2, num_kv_heads=1, head_dim=8, sliding_window=4096, max_context=2048),
     "larger than the context"),
    (lambda: ModelShape(num_layers=2, num_kv_heads=1, head_dim=8, layer_types=(FULL,)), "one type per layer"),
    (lambda: ModelShape(num_layers=1, num_kv_heads=1, head_dim=8, layer_types=(SLIDING,)), "give the window"),
    (lambda: ModelShape(num_layers=1, num_kv_heads=1, head_dim=8, kv_lora_rank=4), "give both"),
    (lambda: kv_cache_bytes(ARTICLE, 8192, batch=0), "batch must be"),
    (lambda: kv_cache_bytes(ARTICLE, -1), "tokens must be"),
    (lambda: kv_cache_bytes(ARTICLE, 8192, dtype_bytes=0), "dtype_bytes must be"),
    (lambda: kv_cache_bytes(ARTICLE, 8192, block_size=0), "block_size must be"),
    (lambda: kv_cache_bytes(ARTICLE, 8192, reserved_tokens=100), "reserve at least"),
    (lambda: kv_cache_bytes(ARTICLE, 8192, quant_bits=0), "quant_bits must be"),
    (lambda: memory_bill.dtype_bytes("fp12"), "Unknown dtype 'fp12'; use one of fp32"),
    (lambda: get_preset("llama-9"), "Unknown preset 'llama-9'; try one of gpt2"),
    (lambda: memory_bill.memory_bytes("lots"), "Unknown memory size"),
    (lambda: memory_bill.cache_budget_bytes(PRESETS["gpt2"], "T4 16GB", utilization=1.5), "utilization must be"),
    (lambda: memory_bill.weights_bytes(ARTICLE), "no parameter count"),
    (lambda: memory_bill.compare_attention_variants(PRESETS["llama-3.1-8b"], gqa_kv_heads=5), "divides 32"),
    (lambda: ModelShape(num_layers=1, num_heads=32, num_kv_heads=3, head_dim=8),
     "32 query heads cannot be shared evenly by 3 KV heads; pick a number of KV heads that divides 32"),
])
def test_bad_input_says_what_is_wrong(call, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")) as error:
        call()
    text = str(error.value)
    assert text.endswith(".") and text.count(". ") == 0  # one sentence


# --- The CLI's text and the module's imports ----------------------------------------------------

def bill(*argv):
    parser = argparse.ArgumentParser()
    add_bill_arguments(parser)
    return run_bill(parser.parse_args(list(argv)))


def test_run_bill_shows_formula_total_weights_and_fit():
    text = bill("--preset", "llama-3.1-8b", "--tokens", "8192", "--batch", "1", "--dtype", "bf16")
    assert ("2 (K and V) × 32 layers × 8 KV heads × 128 dims × 8,192 tokens × 1 request × 2 bytes "
            "= 1,073,741,824 bytes (1.00 GiB)") in text
    assert "KV cache total: 1,073,741,824 bytes (1.00 GiB)" in text
    assert "16,060,522,496 bytes" in text and "On H100 80GB: Fits" in text and "57 such requests" in text


def test_run_bill_hybrid_and_options():
    text = bill("--preset", "gemma-2-9b", "--batch", "2", "--block-size", "16", "--quant-bits", "8")
    assert "full attention (21 layers)" in text and "sliding window (21 layers)" in text
    assert "8-bit cache" in text


def test_run_bill_from_a_local_folder(tmp_path, monkeypatch):
    import numpy as np
    import transformers
    from safetensors.numpy import save_file
    transformers.LlamaConfig(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                             hidden_size=64, max_position_embeddings=128).save_pretrained(tmp_path)
    save_file({"w": np.zeros((4, 8), dtype=np.float16), "b": np.zeros(8, dtype=np.float16)},
              str(tmp_path / "model.safetensors"))
    text = bill("--model", str(tmp_path), "--tokens", "100")
    assert "2 (K and V) × 2 layers × 2 KV heads × 16 dims × 100 tokens × 1 request × 2 bytes = 25,600 bytes" in text
    assert "40 parameters" in text
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="local Hugging Face cache"):
        bill("--model", "no-such-org/no-such-model-kvviz")
    with pytest.raises(ValueError, match="Unknown preset"):
        bill("--preset", "nope")


def test_memory_module_imports_without_torch_or_transformers():
    # Load kvviz.memory_bill and the bill command without running kvviz/__init__.py
    # (which may import the engine).
    root = Path(__file__).resolve().parents[2]
    code = ("import sys, types; package = types.ModuleType('kvviz'); package.__path__ = ['kvviz']; "
            "sys.modules['kvviz'] = package; import kvviz.memory_bill, kvviz.cli.bill; "
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], cwd=root, check=True, env={**os.environ, "PYTHONPATH": str(root)})


def test_per_token_cost_ignores_block_rounding():
    from kvviz.memory_bill import kv_bytes_per_token
    from kvviz.shapes import PRESETS

    shape = PRESETS["llama-3.1-70b"]
    plain = kv_bytes_per_token(shape, 2)
    assert plain == 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * 2
    assert kv_bytes_per_token(shape, 2, block_size=16) == plain
