"""The built-in tiny MLA model in the lessons: the Prefill and decode lesson keeps its latent rows,
says what a token costs as the bill's MLA row, exports and replays; the memory bill's measured note."""

import numpy as np
import pytest

from kvviz.lessons.memory_bill.logic import measured_mla_note
from kvviz.lessons.prefill_decode.file import export_lesson, import_lesson
from kvviz.lessons.prefill_decode.logic import PrefillLesson, LessonSettings, lesson_sampling, per_token_formula
from kvviz.lessons.prefill_decode.stage import stage_data
from kvviz.models import TINY_MLA, allowed_source, load_model, summary_shape

LATENT_ROW = 128 + 16  # build_tiny_mla: kv_lora_rank + qk_rope_head_dim


@pytest.fixture(scope="module")
def tiny_mla():
    return load_model(TINY_MLA)


@pytest.fixture(scope="module")
def lesson(tiny_mla):
    run = PrefillLesson.start(tiny_mla,
                              LessonSettings(prompt="ROMEO:\nBut soft", sampling=lesson_sampling(max_tokens=4),
                                                block_size=4))
    while run.next_token() is not None:
        pass
    return run


def test_tiny_mla_is_built_in_and_allowed_where_bundled_is(tiny_mla):
    assert allowed_source(TINY_MLA, "bundled") == TINY_MLA
    info = tiny_mla.describe()
    assert (info["kv_lora_rank"], info["qk_rope_head_dim"], info["heads"]) == (128, 16, 8)
    assert summary_shape(info).kv_lora_rank == 128  # a replay's bill knows the latent too


def test_the_lesson_keeps_the_cached_latent_rows(lesson):
    prompt = len(lesson.prompt_token_ids)
    assert [t.new_latents.shape for t in lesson.traces] == [(4, prompt, LATENT_ROW)] + [(4, 1, LATENT_ROW)] * 3
    last = lesson.trace(3)  # prefill + 3 decode steps: the 4th token is sampled, not yet cached
    assert last.latents.shape == (4, prompt + 3, LATENT_ROW)
    assert last.keys.shape == (4, prompt + 3, 8, 48) and last.values.shape == (4, prompt + 3, 8, 32)  # rebuilt
    assert all(t.changed_rows == 0 for t in lesson.traces)  # a cached latent row never changes
    assert all(t.logit_difference < 1e-4 for t in lesson.traces)  # cached and recomputed runs agree


def test_a_token_costs_the_bills_mla_row(lesson):
    per_token = lesson.records[0].memory.bytes_per_token
    assert per_token == 4 * LATENT_ROW * 4  # 4 layers × 144 values × 4 bytes (float32)
    bill = lesson.bill(2, 4)
    assert bill["formula_bytes"] == bill["tokens"] * per_token
    assert "(128 latent + 16 RoPE)" in bill["formula"][0]
    assert per_token_formula(lesson.model_info) == "4 layers × (128 latent + 16 RoPE) values × 4 bytes"
    assert stage_data(lesson, 2)["per_token_formula"] == per_token_formula(lesson.model_info)


def test_an_mla_lesson_exports_and_replays_its_latent_rows(lesson):
    replay = import_lesson(export_lesson(lesson).encode())
    while replay.next_token() is not None:
        pass
    for step in range(len(lesson.records)):
        original, replayed = lesson.trace(step), replay.trace(step)
        for name in ("keys", "values", "attention", "latents"):
            assert np.array_equal(getattr(original, name), getattr(replayed, name))
        assert replay.bill(step, 4) == lesson.bill(step, 4)


def test_the_memory_bill_measures_the_engines_latent_row(tiny_mla):
    note = measured_mla_note(tiny_mla)
    assert "holds **576 bytes** per token and layer" in note  # (128 + 16) × 4 bytes, read from the tensor
    assert "= 576 bytes" in note and "2,560 bytes, 4.4× more" in note  # MHA: 8 heads × (48 + 32) × 4


def test_the_cache_strategies_refuse_an_mla_model_in_one_sentence(tiny_mla):
    from kvviz.strategies.run import run_strategy

    with pytest.raises(ValueError, match="this MLA model caches one latent row per token for all heads"):
        run_strategy(tiny_mla, "ROMEO:", "dynamic", max_tokens=2)
