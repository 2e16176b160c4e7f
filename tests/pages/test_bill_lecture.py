"""Memory bill: weights dtype apart from the cache's, tensor parallelism, MLA inputs, per token by layer type."""

import pytest

from kvviz import memory_bill
from kvviz.memory_bill import PRESETS, format_bytes

from conftest import open_lesson


def test_tensor_parallel_share_splits_weights_and_kv_heads():
    llama = PRESETS["llama-3.1-8b"]  # 32 query heads, 8 KV heads
    single = memory_bill.kv_cache_bytes(llama, 8192, 1, 2)
    four = memory_bill.tensor_parallel_share(llama, 4, 8192)
    assert (four.kv_heads_per_gpu, four.copies_per_kv_head) == (2, 1)
    assert four.cache_bytes_per_gpu * 4 == single == four.cache_bytes_all_gpus
    assert four.weights_bytes_per_gpu == -(-memory_bill.weights_bytes(llama, 2) // 4)
    sixteen = memory_bill.tensor_parallel_share(llama, 16, 8192)  # fewer KV heads than GPUs: copies
    assert (sixteen.kv_heads_per_gpu, sixteen.copies_per_kv_head) == (1, 2)
    assert sixteen.cache_bytes_all_gpus == 2 * single
    with pytest.raises(ValueError, match="do not split evenly"):
        memory_bill.tensor_parallel_share(llama, 3, 8192)
    deepseek = memory_bill.tensor_parallel_share(PRESETS["deepseek-v3"], 8, 4096)  # MLA: latent on every GPU
    assert deepseek.cache_bytes_per_gpu == memory_bill.kv_cache_bytes(PRESETS["deepseek-v3"], 4096, 1, 2)


def test_weights_dtype_is_apart_from_the_cache_dtype():
    llama = PRESETS["llama-3.1-8b"]
    bf16_weights = memory_bill.cache_budget_bytes(llama, "H100 80GB", 0.5, weights_dtype_bytes=2)
    assert bf16_weights == int(80 * 2**30 * 0.9) - memory_bill.weights_bytes(llama, 2)
    assert "weights 14.96 GiB" in memory_bill.fit_summary(llama, 8192, 1, "H100 80GB", 0.5, weights_dtype_bytes=2)


def test_bill_page_weights_dtype_tensor_parallel_mla_and_sliding():
    at = open_lesson("lessons/memory_bill.py")
    metric = lambda label: next(m.value for m in at.metric if m.label.startswith(label))  # noqa: E731
    weights = metric("Weights")
    at.select_slider(key="bill_dtype").set_value("int4").run()
    assert metric("Weights") == weights  # an int4 cache leaves the weights as they were
    assert metric("KV cache") == format_bytes(memory_bill.kv_cache_bytes(PRESETS["llama-3.1-8b"], 8192, 1, 0.5))
    at.select_slider(key="bill_weights_dtype").set_value("fp8").run()
    assert metric("Weights") == format_bytes(memory_bill.weights_bytes(PRESETS["llama-3.1-8b"], 1))
    at.select_slider(key="bill_gpus").set_value(16).run()
    assert metric("KV heads per GPU") == "1"
    assert any("2 copies of each KV head" in c.value for c in at.caption)
    # MLA: only the latent and RoPE sizes, and no complaint about values the user never set
    at.selectbox(key="bill_preset").set_value("deepseek-v3").run()
    labels = [s.label for s in at.slider] + [n.label for n in at.number_input]
    assert not any(label.startswith(("KV heads", "Head size", "Sliding window")) for label in labels)
    assert any(label.startswith("MLA latent") for label in labels) and any("RoPE" in label for label in labels)
    at.slider(key="bill_heads").set_value(96).run()
    at.number_input(key="bill_latent").set_value(256).run()
    assert not at.exception and not at.error
    shape = memory_bill.ModelShape(num_layers=61, num_kv_heads=128, head_dim=192, kv_lora_rank=256, qk_rope_head_dim=64)
    assert metric("KV cache") == format_bytes(memory_bill.kv_cache_bytes(shape, 8192, 1, 0.5))
    # a hybrid: per-token cost per layer type, and the average at this length
    at.selectbox(key="bill_preset").set_value("gemma-3-27b").run()
    gemma = PRESETS["gemma-3-27b"]
    by_kind = memory_bill.bytes_per_token_by_kind(gemma, 0.5)
    text = next(m.value for m in at.markdown if "by layer type" in m.value)
    assert f"52 sliding-window layers: **{format_bytes(by_kind[memory_bill.SLIDING])}**" in text
    assert f"10 full attention layers: **{format_bytes(by_kind[memory_bill.FULL])}**" in text
    assert metric("Per token, at this length") == format_bytes(memory_bill.kv_cache_bytes(gemma, 8192, 1, 0.5) / 8192)
