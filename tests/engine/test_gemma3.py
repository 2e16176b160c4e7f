"""Gemma 3 270M (18 layers, 4 query heads over one KV head, 15 of them sliding over 512 positions), fetched by
`kvviz fetch gemma3`: the engine's greedy tokens equal transformers' generate, on short prompts and on one
longer than the window, and its sliding layers give back the blocks the window leaves while the full layers
keep every one. Skipped where it was not fetched (scripts/test.sh fetches it once)."""

import math

import pytest

from kvviz import Engine, SamplingParams, load_model
from kvviz.hub.fetch import TERMS_FILE, fetch_command, fetched_folder
from kvviz.memory_bill import bill_breakdown
from kvviz.models import default_heldout_text
from kvviz.shapes import FULL, SLIDING, ModelShape

from tiny_models import hf_greedy

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(fetched_folder("gemma3") is None,
                                 reason=f"Gemma 3 is not fetched here; run `{fetch_command('gemma3')}` once")]

MAX_TOKENS = 10
BLOCK = 16


@pytest.fixture(scope="module")
def gemma3():
    return load_model("gemma3")


def test_the_shape_a_lecture_shows_and_its_terms(gemma3):
    info = gemma3.describe()
    assert (info["layers"], info["heads"], info["kv_heads"], info["head_dim"]) == (18, 4, 1, 256)
    config = gemma3.model.config
    assert config.layer_types.count("sliding_attention") == 15 and config.sliding_window == 512
    assert (fetched_folder("gemma3") / TERMS_FILE).stat().st_size > 10_000


@pytest.mark.parametrize("prompt", ["The three primary colors are", "def fibonacci(n):"])
def test_greedy_identical_to_hf_generate_and_real_english(gemma3, prompt):
    ids = gemma3.tokenizer(prompt)["input_ids"]
    expected = hf_greedy(gemma3.model, ids, MAX_TOKENS)
    engine = Engine(gemma3, num_blocks=64)
    got = engine.generate([ids], SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True))[0]
    assert got.token_ids == expected
    if "colors" in prompt:
        assert "red" in gemma3.tokenizer.decode(got.token_ids)


def test_a_prompt_past_the_window_matches_and_the_sliding_layers_give_blocks_back(gemma3):
    ids = gemma3.tokenizer(default_heldout_text())["input_ids"][:1500]
    expected = hf_greedy(gemma3.model, ids, MAX_TOKENS)
    engine = Engine(gemma3, block_size=BLOCK, num_blocks=256)
    engine.add_request(ids, SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True))
    records = []
    while engine.has_unfinished():
        records.append(engine.step())
    tokens = [token for record in records for _, token in record.sampled]
    assert tokens == expected
    names = [group.name for group in records[0].layer_groups]
    assert names == ["full", "sliding"]
    full, sliding = records[-2].requests[0].group_block_tables  # before it finished and gave everything back
    held = 1500 + MAX_TOKENS - 2
    assert len(full) == math.ceil(held / BLOCK) and None not in full  # every block of every position
    kept = [block for block in sliding if block is not None]
    assert len(kept) <= 512 // BLOCK + 2 and sliding.count(None) >= len(full) - (512 // BLOCK + 2)
    # the bill splits the two kinds of layer, and a token costs the full layers' bytes alone past the window
    lines = {line.kind: line for line in bill_breakdown(ModelShape.of_model(gemma3.model), 2000, dtype_bytes=4)}
    assert lines[FULL].num_layers == 3 and lines[SLIDING].num_layers == 15
    assert lines[SLIDING].tokens_held == 512 and lines[FULL].tokens_held == 2000
    assert lines[FULL].num_bytes == 2 * 3 * 1 * 256 * 4 * 2000
