"""The closing page under AppTest: its numbers are the bundled model's bill, computed from its config."""

import pytest

from kvviz import load_model
from kvviz.lessons.putting_it_together.logic import BLOCK_SIZE, quant_group
from kvviz.memory_bill import kv_bytes_per_token, kv_cache_bytes
from kvviz.shapes import format_bytes

from app_tests import open_lesson


@pytest.fixture(scope="module")
def shape():
    return load_model("bundled").shape  # 6 layers, 2 KV heads of 32, float32, 512 tokens


def shown(at) -> str:
    return "\n".join(m.value for m in at.markdown)


def test_the_page_bills_the_loaded_model_and_follows_its_sliders(shape):
    at = open_lesson("lessons/putting_it_together.py")
    context, size = shape.max_context, shape.dtype_bytes
    assert next(m.value for m in at.metric if m.label == "Cache per token") == format_bytes(
        kv_bytes_per_token(shape, size)) == "3.00 KiB"
    text = shown(at)
    tokens = at.select_slider(key="together_tokens").value  # 100 on a 512-token model
    assert f"- dynamic: **{format_bytes(kv_cache_bytes(shape, tokens, 1, size))}**" in text
    assert (f"- static, reserved for the whole {context:,}-token context: "
            f"**{format_bytes(kv_cache_bytes(shape, tokens, 1, size, reserved_tokens=context))}**") in text
    full, *others = at.table[0].value.to_dict("records")
    assert full["cache"] == "full cache (this model as it is)"
    assert full["bytes"] == format_bytes(kv_cache_bytes(shape, context, 1, size))
    int8 = kv_cache_bytes(shape, context, 1, size, quant_bits=8, quant_group_size=quant_group(shape))
    assert format_bytes(int8) in [row["bytes"] for row in others]
    assert any("Computed, not measured" in c.value for c in at.caption)

    # 200 tokens a request, 4 requests: the server's paged bill changes with them, slack and all
    at.select_slider(key="together_tokens").set_value(200).run()
    at.select_slider(key="together_requests").set_value(4).run()
    assert not at.exception
    text = shown(at)
    assert f"- paged: **{format_bytes(kv_cache_bytes(shape, 200, 4, size, block_size=BLOCK_SIZE))}**" in text
    assert "4 requests of about 200 tokens" in text
    # 200 tokens take 13 blocks of 16, 8 slots empty in each request's last block: 4 × 8 × 3 KiB
    assert "- of which empty slots in last blocks: **96.00 KiB**" in text
    at.select_slider(key="together_window").set_value(64).run()
    window_row = next(row for row in at.table[0].value.to_dict("records") if row["cache"].startswith("sliding"))
    assert window_row["cache"] == "sliding window of 64 tokens in every layer"
    assert window_row["bytes"] == format_bytes(kv_cache_bytes(shape, context, 1, size) // 8)  # 64 of 512 tokens
