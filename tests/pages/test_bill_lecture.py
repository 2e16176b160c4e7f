"""Memory bill: weights dtype apart from the cache's, tensor parallelism, MLA inputs, per token by layer type."""

import json

import pytest

from kvviz import memory_bill

from kvviz.shapes import FULL, PRESETS, SLIDING, ModelShape, format_bytes

from app_tests import open_lesson


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
    int4 = memory_bill.cache_format("int4")  # 4-bit codes + a bf16 scale and zero point per 64 values
    assert metric("KV cache") == format_bytes(memory_bill.kv_cache_bytes(PRESETS["llama-3.1-8b"], 8192, 1, **int4))
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
    shape = ModelShape(num_layers=61, num_kv_heads=128, head_dim=192, kv_lora_rank=256, qk_rope_head_dim=64)
    assert metric("KV cache") == format_bytes(memory_bill.kv_cache_bytes(shape, 8192, 1, **int4))
    # a hybrid: per-token cost per layer type, and the average at this length
    at.selectbox(key="bill_preset").set_value("gemma-3-27b").run()
    gemma = PRESETS["gemma-3-27b"]
    by_kind = memory_bill.bytes_per_token_by_kind(gemma, **int4)
    text = next(m.value for m in at.markdown if "by layer type" in m.value)
    assert f"52 sliding-window layers: **{format_bytes(by_kind[SLIDING])}**" in text
    assert f"10 full attention layers: **{format_bytes(by_kind[FULL])}**" in text
    assert metric("Per token, at this length") == format_bytes(
        memory_bill.kv_cache_bytes(gemma, 8192, 1, **int4) / 8192)


def _traces(at) -> list[dict]:
    """Every trace of every Plotly chart on the page."""
    return [trace for chart in at.get("plotly_chart") for trace in json.loads(chart.proto.spec).get("data", [])]


def _chart_trace_names(at) -> list[str]:
    """The legend entries of every Plotly chart on the page."""
    return [trace.get("name", "") for trace in _traces(at)]


def test_tensor_parallel_verdict_is_the_per_gpu_figure():
    # Llama-3.1-70B's bf16 weights (131 GiB) cannot fit one H100, but an eighth of them can
    at = open_lesson("lessons/memory_bill.py")
    metric = lambda label: next(m.value for m in at.metric if m.label == label)  # noqa: E731
    at.selectbox(key="bill_preset").set_value("llama-3.1-70b").run()
    at.selectbox(key="bill_device").set_value("H100 80GB").run()
    assert at.warning[0].value.startswith("Does not fit: the weights alone")  # one GPU
    at.select_slider(key="bill_gpus").set_value(8).run()
    seventy = PRESETS["llama-3.1-70b"]
    share = memory_bill.tensor_parallel_share(seventy, 8, 8192)
    verdict = at.success[0].value
    assert verdict.startswith("Fits on each of 8 GPUs")
    assert (f"weights {format_bytes(share.weights_bytes_per_gpu)} + "
            f"cache {format_bytes(share.cache_bytes_per_gpu)} per GPU") in verdict
    # the section below says the same per-GPU total, and the reverse questions count per GPU too
    per_gpu_total = format_bytes(share.weights_bytes_per_gpu + share.cache_bytes_per_gpu)
    assert any(f"= {per_gpu_total}, which fits" in c.value for c in at.caption)
    one_gpu = memory_bill.per_gpu_shape(seventy, 8)
    requests = memory_bill.max_requests(one_gpu, 8192, "H100 80GB", 2, 0.9, weights_dtype_bytes=2)
    assert metric("Requests that fit") == f"{requests:,}" and f"room for {requests:,} such requests" in verdict
    assert not any(w.value.startswith("Does not fit") for w in at.warning)


def test_kv_heads_that_do_not_divide_say_so_in_the_sliders_terms_and_the_preset_comes_back():
    at = open_lesson("lessons/memory_bill.py")
    at.selectbox(key="bill_preset").set_value("custom (sliders moved)").run()
    assert at.selectbox(key="bill_preset").value == "llama-3.1-8b"  # nothing moved: still the preset
    at.slider(key="bill_kv_heads").set_value(3).run()
    assert not at.exception and len(at.error) == 1
    message = at.error[0].value
    assert message == ("32 query heads cannot be shared evenly by 3 KV heads; pick a number of KV heads that "
                       "divides 32 (1, 2, 4, 8, 16 or 32).")
    assert at.selectbox(key="bill_preset").value == "custom (sliders moved)"
    # a shape that is no longer the preset is not named as the preset
    at.slider(key="bill_kv_heads").set_value(4).run()
    assert not at.error
    assert "yours: llama-3.1-8b (modified) · bf16" in _chart_trace_names(at)
    assert "yours: llama-3.1-8b · bf16" not in _chart_trace_names(at)
    # picking the preset again restores its numbers
    at.selectbox(key="bill_preset").set_value("llama-3.1-8b").run()
    assert at.slider(key="bill_kv_heads").value == 8
    assert next(m.value for m in at.metric if m.label == "KV cache") == "1.00 GiB"
    assert "yours: llama-3.1-8b · bf16" in _chart_trace_names(at)
    # moving a slider back to the preset's number makes it the preset again
    at.slider(key="bill_layers").set_value(31).run()
    assert at.selectbox(key="bill_preset").value == "custom (sliders moved)"
    at.slider(key="bill_layers").set_value(32).run()
    assert at.selectbox(key="bill_preset").value == "llama-3.1-8b"


def test_int4_is_billed_with_its_scales_and_the_mha_bar_says_which_baseline():
    at = open_lesson("lessons/memory_bill.py")
    at.select_slider(key="bill_dtype").set_value("int4").run()
    llama = PRESETS["llama-3.1-8b"]
    # 128 × 4 bits + 2 groups × (bf16 scale + zero) = 72 bytes a row, not the 64 of a bare 0.5 B a value
    assert memory_bill.kv_bytes_per_token(llama, **memory_bill.cache_format("int4")) == 36_864
    assert next(m.value for m in at.metric if m.label == "Per token") == format_bytes(36_864)
    at.selectbox(key="bill_preset").set_value("deepseek-v3").run()
    note = next(c.value for c in at.caption if c.value.startswith("All four"))
    assert "40,960 numbers per token and layer" in note and "32,768" in note and "57×" in note and "71×" in note
    at.selectbox(key="bill_preset").set_value("llama-3.1-8b").run()
    bars = [label for trace in _traces(at) if trace.get("type") == "bar" for label in trace.get("y", [])]
    assert "MLA (latent 512 + RoPE 64, hypothetical)" in bars
