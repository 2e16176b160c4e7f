"""The tiny MLA model in the app (Streamlit's AppTest): picked in the sidebar, its cached latent rows
in the Prefill and decode lesson, and the engine's measured bytes in the Memory bill."""

from kvviz.memory_bill import kv_cache_bytes
from kvviz.shapes import PRESETS, format_bytes

from app_tests import button, open_lesson


def test_the_prefill_lesson_shows_an_mla_models_latent_rows():
    at = open_lesson("lessons/prefill_decode.py")
    at.text_input(key="model_request").set_value("tiny-mla")
    button(at, "Load model").click().run()
    assert at.session_state["model_source"] == "tiny-mla" and not at.exception
    assert any("MLA latent 128 + RoPE key 16" in c.value for c in at.sidebar.caption)
    button(at, "Prefill").click().run()
    button(at, "Next token").click().run()
    lesson = at.session_state["lesson_run"]
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


def test_every_view_of_an_mla_lesson_counts_the_same_latent_rows():
    """Issue 33 item 6: after Prefill and 5 Next token the roofline said 252.00 KiB and "8 KV heads"
    where the stage and the Memory bill said 47.25 KiB; the bill's note spoke of K and V per KV head;
    Inside attention called a live lesson a replay."""
    at = open_lesson("lessons/prefill_decode.py")
    at.text_input(key="model_request").set_value("tiny-mla")
    button(at, "Load model").click().run()
    button(at, "Prefill").click().run()
    for _ in range(5):
        button(at, "Next token").click().run()
    lesson, step = at.session_state["lesson_run"], at.session_state["lesson_view_step"]
    bill = lesson.bill(step, 4)
    whole = format_bytes(bill["token_bytes"])
    assert bill["formula_bytes"] == bill["token_bytes"] == lesson.num_tokens_at(step) * 4 * 144 * 4
    at.radio(key="lesson_view").set_value("Memory bill").run()
    assert [m.value for m in at.metric][:2] == [whole, whole]
    note = next(c.value for c in at.caption if c.value.startswith("The engine's whole pool"))
    assert "one latent row (latent + RoPE key) for each layer" in note and "KV head" not in note
    at.radio(key="lesson_view").set_value("Why decode is memory-bound").run()
    assert not at.exception
    row = at.table[0].value.iloc[0]
    assert row["cache"] == "this model (MLA latent 128 + RoPE 16)" and row["cache bytes"] == whole
    assert any(f"the whole cache (**{whole}**" in m.value for m in at.markdown)
    at.radio(key="lesson_view").set_value("Inside attention").run()
    assert not at.exception
    said = " ".join(i.value for i in at.info)
    assert "multi-head latent attention (MLA)" in said and "replayed" not in said
