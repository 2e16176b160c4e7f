"""Putting it together: every number of the closing page is kvviz.memory_bill's bill for the model."""

from dataclasses import replace

import pytest

from kvviz.lessons.putting_it_together import logic
from kvviz.memory_bill import kv_cache_bytes
from kvviz.shapes import PRESETS, ModelShape

LLAMA = PRESETS["llama-3.1-8b"]  # 32 layers, 32 query heads over 8 KV heads of 128, 131,072 tokens


def test_the_long_job_bills_the_articles_example_and_each_choice():
    rows = {row.key: row.num_bytes for row in logic.choices(LLAMA, 2, 8192, window=4096)}
    assert rows["full"] == 2**30  # the article's example: 8,192 tokens in bf16 is 1 GiB
    assert rows["mha"] == 4 * 2**30  # 32 KV heads instead of 8
    assert rows["mqa"] == 2**30 // 8
    assert rows["window"] == 2**29  # every layer keeps 4,096 of the 8,192 tokens
    assert rows["paged"] == 2**30  # 8,192 tokens fill whole blocks of 16
    # int8 at groups of 32: 128 codes of 8 bits + 4 groups × (scale + zero point) × 16 bits, per row
    assert rows["int8"] == 32 * 2 * 8 * 8192 * (128 * 8 + 4 * 2 * 16) // 8
    assert rows["int4"] == kv_cache_bytes(LLAMA, 8192, 1, 2, quant_bits=4, quant_group_size=32)
    assert rows["int4"] < rows["int8"] < rows["full"]


def test_choices_leave_out_what_does_not_apply():
    mqa = replace(LLAMA, num_kv_heads=1)
    assert {row.key for row in logic.choices(mqa, 2, 1024, 512)} == {"full", "mha", "int8", "int4", "window", "paged"}
    mha = PRESETS["llama-2-7b"]  # 32 KV heads for 32 query heads
    assert "mha" not in {row.key for row in logic.choices(mha, 2, 1024, 512)}
    mla = PRESETS["deepseek-v3"]  # caches a latent: no KV heads or windows to change
    assert {row.key for row in logic.choices(mla, 2, 1024, 512)} == {"full", "int8", "int4", "paged"}


def test_jobs_bill_a_script_a_server_and_the_whole_context():
    shape = PRESETS["qwen2.5-7b"]
    script, server, long_job = logic.jobs(shape, 2, tokens=1000, requests=16, window=4096)
    context = shape.max_context
    assert dict(script.bill) == {
        "dynamic": kv_cache_bytes(shape, 1000, 1, 2),
        f"static, reserved for the whole {context:,}-token context":
            kv_cache_bytes(shape, 1000, 1, 2, reserved_tokens=context)}
    bill = dict(server.bill)
    assert bill["paged"] == kv_cache_bytes(shape, 1000, 16, 2, block_size=logic.BLOCK_SIZE)
    assert bill["each request reserving the whole context"] == 16 * kv_cache_bytes(shape, context, 1, 2)
    # 1,000 tokens take 63 blocks of 16: 8 empty slots per request
    assert bill["of which empty slots in last blocks"] == 16 * 8 * kv_cache_bytes(shape, 1, 1, 2)
    assert dict(long_job.bill)["full cache"] == kv_cache_bytes(shape, context, 1, 2)
    assert dict(long_job.bill)["int8 cache"] == kv_cache_bytes(shape, context, 1, 2, quant_bits=8,
                                                               quant_group_size=logic.quant_group(shape))
    assert str(context) in long_job.workload.replace(",", "")


def test_a_request_longer_than_the_context_or_a_config_without_one_gets_a_sentence():
    with pytest.raises(ValueError, match="does not fit this model's 131,072-token context; pick 1 to"):
        logic.jobs(LLAMA, 2, tokens=200_000, requests=1, window=4096)
    with pytest.raises(ValueError, match="states no context length"):
        logic.whole_context(ModelShape(num_layers=2, num_kv_heads=1, head_dim=8))
