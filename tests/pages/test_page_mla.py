"""The tiny MLA model in the app (Streamlit's AppTest): picked in the sidebar, its cached latent rows
in the Prefill and decode lesson, and the engine's measured bytes in the Memory bill."""

from kvviz.memory_bill import kv_cache_bytes
from kvviz.shapes import PRESETS, format_bytes

from conftest import button, open_lesson


def test_the_prefill_lesson_shows_an_mla_models_latent_rows():
    at = open_lesson("lessons/prefill_decode.py")
    at.text_input(key="model_request").set_value("tiny-mla")
    button(at, "Load model").click().run()
    assert at.session_state["model_source"] == "tiny-mla" and not at.exception
    assert any("MLA latent 128 + RoPE key 16" in c.value for c in at.sidebar.caption)
    button(at, "Prefill").click().run()
    button(at, "Next token").click().run()
    lesson = at.session_state["lesson"]
    assert lesson.trace(1).latents.shape[2] == 128 + 16
    at.radio(key="lesson_view").set_value("Cache per layer").run()
    per_token = format_bytes(lesson.records[1].memory.bytes_per_token)  # 4 layers × 144 values × 4 bytes
    assert per_token == "2.25 KiB"
    assert any(f"costs **{per_token}**: 4 layers × (128 latent + 16 RoPE) values × 4 bytes" in m.value
               for m in at.markdown)
    at.radio(key="lesson_view").set_value("Keys and values").run()
    assert not at.exception
    assert any("multi-head latent attention (MLA)" in c.value for c in at.caption)
    at.radio(key="lesson_view").set_value("Attention").run()
    assert not at.exception
    assert any("rebuilt from the same cached latent row" in c.value for c in at.caption)
    assert not any("grouped-query attention" in c.value for c in at.caption)  # MLA is not GQA


def test_the_memory_bill_sets_the_engines_measured_latent_row_beside_the_formula():
    at = open_lesson("lessons/memory_bill.py")
    assert not any("Measured in kvviz's engine" in c.value for c in at.caption)  # Llama: no latent
    at.selectbox(key="bill_preset").set_value("deepseek-v3").run()
    assert not at.exception
    deepseek = PRESETS["deepseek-v3"]
    assert any(format_bytes(kv_cache_bytes(deepseek, 8192, 1, 2)) == m.value for m in at.metric)
    note = next(c.value for c in at.caption if "Measured in kvviz's engine" in c.value)
    assert "holds **576 bytes** per token and layer" in note and "= 576 bytes" in note
