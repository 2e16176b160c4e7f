"""Issue 25: what an engine setting, a sampling setting or an API call can do; one sentence each,
refused before the work (and before any big allocation), with nothing left queued."""

import time
import tracemalloc

import pytest
import torch

from kvviz import Engine, EngineError, SamplingParams
from kvviz.engine.config import MAX_NUM_BLOCKS
from kvviz.engine.sampling import non_finite_rows

from app_tests import one_sentence
from tiny_models import tiny_model


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama")


def sentence(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert one_sentence(message) and "\n" not in message, message
    return message


def refused_quickly(make, words: str, seconds: float = 2.0, peak_mib: float = 32) -> str:
    """`make()` raises EngineError mentioning `words`, within `seconds` and `peak_mib` of new Python memory."""
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(EngineError) as error:
            make()
        elapsed = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    message = sentence(error)
    assert words in message, message
    assert elapsed < seconds, f"refused after {elapsed:.1f} s"
    assert peak < peak_mib * 2**20, f"peak {peak / 2**20:.0f} MiB before the refusal"
    return message


# ---- EngineConfig: types and ranges --------------------------------------------------------
@pytest.mark.parametrize("setting, words", [
    (dict(num_blocks=2.5), "num_blocks must be None (size the pool from free memory) or a whole number"),
    (dict(num_blocks=10**8), "from 1 to 1,048,576"),
    (dict(block_size=2.0), "block_size must be a whole number from 1 up"),
    (dict(block_size="16"), "not '16'"),
    (dict(max_num_seqs=10**6), "max_num_seqs must be a whole number from 1 to 1,024"),
    (dict(max_num_batched_tokens=1.5), "max_num_batched_tokens must be a whole number"),
    (dict(max_num_batched_tokens=10**7), "from 1 to 2,097,152"),
    (dict(swap_space_blocks=10**9, preemption_mode="swap"), "swap_space_blocks must be None"),
    (dict(speculative_tokens=1000), "speculative_tokens must be a whole number from 0 to 16"),
    (dict(speculative_tokens=3, prompt_lookup_max=10**6), "prompt_lookup_max must be a whole number"),
    (dict(memory_fraction=float("nan")), "memory_fraction"),
    (dict(memory_fraction="0.5"), "memory_fraction"),
    (dict(use_cache=1), "use_cache must be True or False"),
    (dict(enable_prefix_caching="no"), "enable_prefix_caching must be True or False"),
])
def test_engine_settings_of_the_wrong_type_or_size_are_refused_before_building(llama, setting, words):
    refused_quickly(lambda: Engine(llama, **setting), words)


def test_a_pool_bigger_than_memory_is_refused_before_allocating(bundled):
    # 2**20 blocks of the whole context: 1.5 TiB for the bundled model, more than any machine here has free
    message = refused_quickly(lambda: Engine(bundled, num_blocks=MAX_NUM_BLOCKS, block_size=bundled.max_context),
                              "would take 1.50 TiB")
    assert message.startswith(f"A pool of 1,048,576 blocks of {bundled.max_context} tokens")
    assert message.endswith("lower num_blocks or block_size.")
    # the budget is memory_fraction of what is free: a tiny fraction refuses even a small pool
    refused_quickly(lambda: Engine(bundled, num_blocks=64, memory_fraction=1e-9), "memory_fraction 1e-09 of the")


def test_a_swap_space_bigger_than_memory_is_refused_before_allocating(bundled):
    message = refused_quickly(lambda: Engine(bundled, num_blocks=8, block_size=bundled.max_context,
                                             preemption_mode="swap", swap_space_blocks=MAX_NUM_BLOCKS),
                              "and 1,048,576 swap slots would take")
    assert message.endswith("lower num_blocks, block_size or swap_space_blocks.")


def test_a_huge_block_is_refused_before_allocating(bundled):
    refused_quickly(lambda: Engine(bundled, block_size=10**9),
                    "A pool of 1 block of 1,000,000,000 tokens would take 2.79 TiB")


def test_a_pool_sized_from_memory_stays_within_the_block_limit(bundled):
    engine = Engine(bundled, max_num_seqs=1024)  # 1024 full contexts, capped by free memory and the limit
    assert 0 < engine.num_blocks <= MAX_NUM_BLOCKS


# ---- SamplingParams and the request ------------------------------------------------------------
@pytest.mark.parametrize("params, words", [
    (SamplingParams(seed=2**64), "seed must be None (random) or a whole number from 0 to 2**63 - 1"),
    (SamplingParams(seed=-1), "not -1"),
    (SamplingParams(seed=1.5), "not 1.5"),
    (SamplingParams(seed="7"), "not '7'"),
    (SamplingParams(seed=2**63 - 1, n=2), "2**63 - 2 (sample i draws with seed + i)"),
    (SamplingParams(top_k=1.5, temperature=1.0), "top_k must be 0 (off) or a whole number"),
    (SamplingParams(top_p="0.9", temperature=1.0), "top_p must be a number in (0, 1]"),
    (SamplingParams(temperature="1"), "temperature must be 0 (greedy) or a number"),
    (SamplingParams(stop_token_ids="13"), "stop_token_ids must be a list of whole-number token ids"),
    (SamplingParams(ignore_eos="yes"), "ignore_eos must be True or False"),
    (SamplingParams(max_tokens=None), "max_tokens must be a whole number of tokens"),
])
def test_bad_sampling_settings_are_refused_and_nothing_stays_queued(llama, params, words):
    engine = Engine(llama, num_blocks=16, block_size=4)
    with pytest.raises(EngineError) as error:
        engine.generate([[1, 2, 3], [4, 5, 6]], [SamplingParams(max_tokens=2), params])
    assert words in sentence(error)
    assert not engine.has_unfinished() and not engine.requests
    outputs = engine.generate([[7, 8]], SamplingParams(max_tokens=2))  # the next call runs its own prompt only
    assert len(outputs) == 1 and len(engine.requests) == 1


def test_more_samples_than_max_num_seqs_are_refused_before_any_step(llama):
    engine = Engine(llama, num_blocks=64, block_size=4, max_num_seqs=8)
    message = refused_quickly(lambda: engine.generate([[1, 2, 3]], SamplingParams(n=1000, max_tokens=4)),
                              "n=1000 samples would run as 1000 sequences at once")
    assert "max_num_seqs=8" in message
    assert engine.step_index == 0 and not engine.has_unfinished()
    refused_quickly(lambda: engine.generate([[1, 2, 3]], SamplingParams(n=10**6)), "max_num_seqs=8")
    assert len(engine.generate([[1, 2, 3]], SamplingParams(n=8, max_tokens=2))[0].samples) == 8  # the limit runs


@pytest.mark.parametrize("prompts, words", [
    ("ROMEO", "not one string (it would be read as one prompt per character); pass ['ROMEO'] for one prompt"),
    (None, "generate takes a list of prompts, not None; pass a list such as"),
    ({"prompt": "ROMEO"}, "not {'prompt': 'ROMEO'}"),
    ([1, 2, 3], "a list of token ids goes inside the list of prompts, as in generate([[1, 2, 3]])"),
])
def test_generate_refuses_what_is_not_a_list_of_prompts(llama, prompts, words):
    engine = Engine(llama, num_blocks=16, block_size=4)
    with pytest.raises(EngineError) as error:
        engine.generate(prompts, SamplingParams(max_tokens=2))
    assert words in sentence(error)
    assert not engine.has_unfinished() and engine.step_index == 0


# ---- logits no token can come from -------------------------------------------------------------
def test_rows_with_nan_or_inf_are_found():
    logits = torch.randn(5, 12)
    logits[1, 3] = float("nan")
    logits[2, 4] = float("inf")
    logits[3] = float("-inf")
    logits[4, :6] = float("-inf")  # a mask over some tokens is fine
    assert non_finite_rows(logits) == [1, 2, 3]
    assert non_finite_rows(logits.bfloat16()) == [1, 2, 3]


@pytest.mark.parametrize("params", [SamplingParams(max_tokens=8),
                                    SamplingParams(max_tokens=8, temperature=1.0, seed=0)], ids=["greedy", "sampled"])
def test_nan_logits_stop_the_request_with_reason_error_and_a_sentence(params):
    model = tiny_model("llama")
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight[0, 0] = float("nan")
    engine = Engine(model, num_blocks=16, block_size=4)
    request_id = engine.add_request([1, 2, 3], params)
    with pytest.raises(EngineError) as error:
        engine.step()
    assert "The model's logits in step 0 are NaN, so no token can be chosen" in sentence(error)
    request = engine.requests[request_id]
    assert request.finish_reason == "error" and request.output_token_ids == []  # no token made up from NaN
    assert not engine.has_unfinished() and engine.pool.num_free_blocks == 16
    with pytest.raises(EngineError, match="are NaN"):  # generate: the same sentence, nothing left queued
        engine.generate([[1, 2, 3], [4, 5]], params)
    assert not engine.has_unfinished()
