"""The Memory bill and Model lab pages under Streamlit's AppTest, and kvviz.lessons.model_lab.logic without
Streamlit."""

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from kvviz.engine.cpu.threads import CpuShare
from kvviz.engine.kv_cache import CacheShape, PagedKVCache
from kvviz.lessons.model_lab import logic as lab
from kvviz.memory_bill import cache_format, kv_cache_bytes
from kvviz.models import CustomShape, ModelLoadError
from kvviz.shapes import PRESETS, ModelShape, format_bytes

from app_tests import metric_value

ROOT = Path(__file__).resolve().parents[2]


def open_page(path: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    at.switch_page(path).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


# ---- Memory bill ---------------------------------------------------------------------------

@pytest.fixture()
def bill():
    return open_page("lessons/memory_bill.py")


def test_bill_opens_on_llama_with_the_formula_filled_in(bill):
    llama = PRESETS["llama-3.1-8b"]
    assert metric_value(bill, "KV cache") == format_bytes(kv_cache_bytes(llama, 8192, 1, 2)) == "1.00 GiB"
    assert any("32 layers × 8 KV heads × 128 dims × 8,192 tokens" in code.value for code in bill.code)
    assert not bill.error


def test_bill_follows_the_preset_and_the_sliders(bill):
    bill.selectbox(key="bill_preset").set_value("gemma-2-9b").run()
    gemma = PRESETS["gemma-2-9b"]
    assert metric_value(bill, "KV cache") == format_bytes(kv_cache_bytes(gemma, 8192, 1, 2))
    assert bill.slider(key="bill_layers").value == gemma.num_layers  # the sliders took the preset's numbers
    assert len(bill.code) >= 2  # a hybrid: one formula line for full layers, one for sliding ones

    bill.slider(key="bill_kv_heads").set_value(4).run()
    bill.select_slider(key="bill_dtype").set_value("int4").run()
    bill.select_slider(key="bill_batch").set_value(16).run()
    bill.select_slider(key="bill_context").set_value(32768).run()
    expected = kv_cache_bytes(replace(gemma, num_kv_heads=4), 32768, 16, **cache_format("int4"))
    assert not bill.exception
    assert metric_value(bill, "KV cache") == format_bytes(expected)


def test_bill_fp8_row_shows_the_engines_measured_bytes_per_token(bill):
    assert not any("Measured in kvviz's engine" in c.value for c in bill.caption)  # bf16: no 8-bit row
    bill.select_slider(key="bill_dtype").set_value("fp8").run()
    note = next(c.value for c in bill.caption if "Measured in kvviz's engine" in c.value)
    for name in ("auto", "int8", "fp8"):  # each figure is the engine's cache, built in that dtype
        shape = CacheShape(num_layers=6, num_kv_heads=2, head_dim=32, dtype=torch.float32, kv_cache_dtype=name)
        cache = PagedKVCache(shape, num_blocks=1, block_size=16, device=torch.device("cpu"))
        assert f"**{cache.nbytes // 16:,} bytes**" in note
    assert "auto (fp32) **3,072 bytes**" in note and "fp8 **864 bytes** (formula 768 bytes)" in note


def test_bill_answers_the_reverse_questions(bill):
    from kvviz import memory_bill

    bill.selectbox(key="bill_device").set_value("A100 40GB").run()
    llama = PRESETS["llama-3.1-8b"]
    assert metric_value(bill, "Requests that fit") == f"{memory_bill.max_requests(llama, 8192, 'A100 40GB', 2, 0.9):,}"
    assert metric_value(bill, "Token slots") == f"{memory_bill.max_cached_tokens(llama, 'A100 40GB', 2, 0.9):,}"
    bill.selectbox(key="bill_device").set_value("custom size").run()
    bill.number_input(key="bill_custom_gib").set_value(24).run()
    assert metric_value(bill, "Requests that fit") == f"{memory_bill.max_requests(llama, 8192, 24 * 2**30, 2, 0.9):,}"
    bill.selectbox(key="bill_device").set_value("this machine").run()
    assert not bill.exception


@pytest.mark.parametrize("key, value, words", [
    ("bill_kv_heads", 3, "divides 32 (1, 2, 4, 8, 16 or 32)"),  # 32 query heads cannot share 3 KV heads
    ("bill_window", 200_000, "larger than the context"),
])
def test_bill_bad_settings_give_one_sentence_and_keep_the_page(bill, key, value, words):
    widget = bill.number_input(key=key) if key == "bill_window" else bill.slider(key=key)
    widget.set_value(value).run()
    assert not bill.exception
    assert len(bill.error) == 1 and words in bill.error[0].value
    assert metric_value(bill, "KV cache") == "1.00 GiB"  # the last settings that made sense are still shown


def test_bill_kv_heads_cannot_be_set_below_one(bill):
    assert bill.slider(key="bill_kv_heads").min == 1  # zero KV heads is not offered, so never billed


def test_bill_compares_dtypes_and_handles_mla(bill):
    bill.radio(key="bill_compare").set_value("dtypes").run()
    assert not bill.exception
    bill.selectbox(key="bill_preset").set_value("deepseek-v3").run()
    deepseek = PRESETS["deepseek-v3"]
    assert not bill.exception and not bill.error
    assert metric_value(bill, "KV cache") == format_bytes(kv_cache_bytes(deepseek, 8192, 1, 2))


# ---- Model lab -----------------------------------------------------------------------------

def press_measure(at: AppTest) -> None:
    next(b for b in at.button if b.label == "Measure").click().run()


def test_lab_measures_and_keeps_results_through_a_bad_setting():
    at = open_page("lessons/model_lab.py")
    assert "lab_result" not in at.session_state
    press_measure(at)
    assert not at.exception and not at.error
    result = at.session_state["lab_result"]
    assert [t.context for t in result.timings] == lab.lab_contexts(512)
    for timing in result.timings:
        assert timing.cache_bytes == timing.formula_bytes == timing.context * result.bytes_per_token
        assert timing.cached_s > 0 and timing.uncached_s > 0
    assert metric_value(at, "Parameters") == f"{result.num_params / 1e6:,.2f}M"

    at.slider(key="lab_heads").set_value(7).run()  # 256 does not divide into 7 heads
    press_measure(at)
    assert not at.exception
    assert len(at.error) == 1 and "7 heads" in at.error[0].value
    assert at.session_state["lab_result"] is result  # the earlier measurement stays
    assert metric_value(at, "Parameters") == f"{result.num_params / 1e6:,.2f}M"

    at.slider(key="lab_heads").set_value(8).run()
    at.slider(key="lab_layers").set_value(32).run()
    at.slider(key="lab_hidden").set_value(2048).run()  # far beyond what a CPU measures in seconds
    assert len(at.error) == 1 and "parameters" in at.error[0].value


# ---- kvviz.lessons.model_lab.logic without Streamlit ------------------------------------------------------

TINY = CustomShape(num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2, max_context=64)


@pytest.fixture(scope="module")
def tiny():
    return lab.build_lab_model(TINY, device="cpu")


def test_lab_contexts_double_up_to_the_longest_that_stays_cached():
    assert lab.lab_contexts(512) == [16, 32, 64, 128, 256, 510]
    assert lab.lab_contexts(64) == [16, 32, 62]
    assert lab.lab_contexts(16) == [14]


def test_estimate_matches_the_built_model(tiny):
    cost = lab.estimate(TINY, device="cpu")
    assert cost.num_params == sum(p.numel() for p in tiny.model.parameters())
    assert cost.weight_bytes == sum(p.nbytes for p in tiny.model.parameters())
    assert cost.bytes_per_token == kv_cache_bytes(ModelShape(num_layers=2, num_kv_heads=2, head_dim=16), 1, 1, 4)


@pytest.mark.parametrize("shape, words", [
    (replace(TINY, num_heads=5), "does not divide into 5 heads"),
    (replace(TINY, num_kv_heads=3), "cannot share 3 KV heads"),
    (CustomShape(num_layers=32, hidden_size=2048, num_heads=16, num_kv_heads=4), "parameters"),
])
def test_build_refuses_with_one_sentence(shape, words):
    with pytest.raises(ModelLoadError, match=words):
        lab.build_lab_model(shape, device="cpu")


def test_decode_times_and_cache_bytes(tiny):
    contexts = [4, 16, 62]
    timings = lab.measure_decode_times(tiny, contexts, repeats=2)
    shape = ModelShape(num_layers=2, num_kv_heads=2, head_dim=16)
    assert [t.context for t in timings] == contexts
    for timing in timings:
        assert timing.cache_bytes == timing.formula_bytes == kv_cache_bytes(shape, timing.context, 1, 4)
        assert timing.cached_s > 0 and timing.uncached_s > 0


@pytest.mark.parametrize("contexts", [[], [1], [63], [64]])
def test_decode_times_refuse_lengths_outside_the_context(tiny, contexts):
    with pytest.raises(ValueError):
        lab.measure_decode_times(tiny, contexts)


def test_measure_describes_the_model(tiny):
    result = lab.measure(tiny, [8, 32], repeats=1, sample_tokens=4)
    assert result.num_params == sum(p.numel() for p in tiny.model.parameters())
    assert result.weight_bytes == result.num_params * torch.empty((), dtype=tiny.dtype).element_size()
    assert result.bytes_per_token == 2 * 2 * 2 * 16 * 4
    assert "32 tokens" in result.formula and f"{32 * result.bytes_per_token:,} bytes" in result.formula
    assert isinstance(result.sample_text, str)
    rows = result.spread_rows()
    assert [r["context"] for r in rows] == ["8 tokens", "32 tokens"]
    assert rows[1]["engine"] == rows[1]["formula"] == f"{32 * result.bytes_per_token:,} bytes"
    assert result.to_dict()["timings"][0]["context"] == 8


def test_measure_reports_progress_for_every_round(tiny):
    calls = []
    lab.measure(tiny, [8, 16, 32], repeats=3, sample_tokens=0, progress=lambda *call: calls.append(call))
    assert [done for done, _, _ in calls] == [0, 0, 1, 2]  # the warm-up, then each round before it is timed
    assert all(total == 3 for _, total, _ in calls)
    assert "Warming up" in calls[0][2] and calls[-1][2].startswith("Round 3 of 3") and "8 to 32 tokens" in calls[-1][2]


def test_the_lab_page_measures_its_default_shape_with_a_progress_bar():
    at = open_page("lessons/model_lab.py")
    press_measure(at)
    assert not at.exception and not at.error
    result = at.session_state["lab_result"]
    assert [t.context for t in result.timings] == lab.lab_contexts(512)  # the default longest context
    assert result.load_before is None or result.load_before >= 0
    assert metric_value(at, "With the cache").endswith("ms")


def test_a_measurement_fills_its_result_in_place_round_by_round_and_a_stopped_one_says_so(tiny):
    result = lab.describe(tiny, [8, 16, 32], repeats=3)
    seen = []
    lab.measure(tiny, [8, 16, 32], repeats=3, sample_tokens=0, result=result,
                progress=lambda done, total, text: seen.append([t.repeats for t in result.timings]))
    # every length is timed once a round: before round 2 each holds one step each way, before round 3 two
    assert seen == [[], [], [1, 1, 1], [2, 2, 2]]
    assert [t.repeats for t in result.timings] == [3, 3, 3]
    assert not result.stopped and result.contexts_planned == 3 and result.rounds_timed == result.rounds_planned == 3
    partial = lab.describe(tiny, [8, 16, 32], repeats=3)
    partial.timings.extend(lab.measure_decode_times(tiny, [8, 16, 32], repeats=1))
    assert partial.stopped and partial.stopped_note().startswith("Stopped after 1 of 3 rounds: each length's times "
                                                                 "below are the median of 1 step each way, not 3.")


def test_the_lab_page_keeps_a_stopped_measurement_marked_as_stopped(tiny):
    """Stop interrupts the page's script run; the next run finds what was timed under lab_measuring."""
    partial = lab.describe(tiny, [8, 16, 32], repeats=2)
    partial.timings.extend(lab.measure_decode_times(tiny, [8, 16, 32], repeats=1))
    at = open_page("lessons/model_lab.py")
    at.session_state["lab_measuring"] = (TINY, partial)
    at.run()
    assert not at.exception and not at.error
    assert "lab_measuring" not in at.session_state
    assert at.session_state["lab_result"].timings == partial.timings
    assert any(w.value.startswith("Stopped after 1 of 2 rounds") for w in at.warning)
    assert metric_value(at, "Parameters") == f"{partial.num_params / 1e6:,.2f}M"

    at.session_state["lab_measuring"] = (TINY, None)  # stopped while the model was being built
    at.run()
    assert not at.exception and at.session_state["lab_result"].timings == partial.timings  # kept
    assert any(w.value.startswith("Stopped after 0 rounds") for w in at.warning)
    press_measure(at)  # Measure runs again, and clears the note
    assert not at.exception and not at.error and "lab_measuring" not in at.session_state
    assert not at.session_state["lab_result"].stopped
    assert not any("Stopped after" in w.value for w in at.warning)


def test_overlapping_measurements_give_back_the_threads_they_found():
    """Two sessions measuring at once, the first finishing while the second still measures: the
    second keeps its core free, and the server ends on the threads it had, not one fewer."""
    threads = torch.get_num_threads()
    share = CpuShare(fixed=2)
    try:
        first, second = share.capped(1), share.capped(1)
        first.__enter__()
        assert torch.get_num_threads() == 1
        second.__enter__()
        first.__exit__(None, None, None)
        assert torch.get_num_threads() == 1
        second.__exit__(None, None, None)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
