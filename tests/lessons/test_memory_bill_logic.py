"""The Memory bill lesson's logic without Streamlit: the sliders' shape and the note under the variants chart."""

import pytest

from kvviz.lessons.memory_bill import logic
from kvviz.memory_bill import compare_attention_variants
from kvviz.shapes import PRESETS


def test_the_sliders_make_the_preset_until_one_moves():
    gemma = PRESETS["gemma-2-9b"]
    values = logic.slider_values(gemma)
    assert logic.is_preset(gemma, values) and logic.shape_from_sliders(gemma, values) == gemma
    fewer = logic.shape_from_sliders(gemma, {**values, "bill_layers": 10})
    assert fewer.name == "gemma-2-9b (modified)" and fewer.num_layers == 10
    assert fewer.layer_kinds == PRESETS["gemma-2-9b"].layer_kinds[:10]  # the hybrid keeps its pattern
    deepseek = PRESETS["deepseek-v3"]  # MLA: a KV heads number it does not show never makes it "modified"
    assert logic.is_preset(deepseek, {**logic.slider_values(deepseek), "bill_kv_heads": 3})


def test_kv_heads_that_do_not_divide_are_refused_in_one_sentence():
    llama = PRESETS["llama-3.1-8b"]
    with pytest.raises(ValueError) as error:
        logic.shape_from_sliders(llama, {**logic.slider_values(llama), "bill_kv_heads": 3})
    assert str(error.value) == ("32 query heads cannot be shared evenly by 3 KV heads; pick a number of KV heads "
                                "that divides 32 (1, 2, 4, 8, 16 or 32).")


def test_the_variants_note_names_its_baseline():
    deepseek = PRESETS["deepseek-v3"]
    note = logic.variants_note(deepseek, compare_attention_variants(deepseek), "bf16")
    assert "keys of 192 and values of 128 numbers" in note and "40,960 numbers per token and layer" in note
    assert "2 × 128 heads × 128 = 32,768 numbers" in note and "57× the 576-number latent" in note
    assert "the MHA bar is 71×" in note and "hypothetical" not in note
    llama = PRESETS["llama-3.1-8b"]
    assert "hatched MLA bar is hypothetical" in logic.variants_note(llama, compare_attention_variants(llama), "bf16")
