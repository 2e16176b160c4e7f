"""Sampling, records, tracing, memory accounting and refusals of the engine."""

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from kvviz import Engine, EngineError, SamplingParams, StepRecord
from kvviz.lessons.files import typed

from tiny_models import VOCAB, tiny_model


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama")


def test_seeded_sampling_is_reproducible_and_seeds_differ(llama):
    params = dict(max_tokens=12, temperature=1.0, top_k=50, top_p=0.9, ignore_eos=True)
    prompt = [1, 2, 3]
    first = Engine(llama).generate([prompt, [7, 8]], SamplingParams(seed=7, **params))[0].token_ids
    again = Engine(llama).generate([prompt], SamplingParams(seed=7, **params))[0].token_ids
    other = Engine(llama).generate([prompt], SamplingParams(seed=8, **params))[0].token_ids
    assert first == again  # the batch around it does not matter
    assert first != other


def test_per_prompt_params_and_stop_tokens(llama):
    engine = Engine(llama)
    greedy = engine.generate([[5, 6, 7]], SamplingParams(max_tokens=8, ignore_eos=True))[0].token_ids
    stop_at = greedy[3]
    outs = engine.generate([[5, 6, 7], [5, 6, 7]], [
        SamplingParams(max_tokens=8, ignore_eos=True, stop_token_ids=[stop_at]),
        SamplingParams(max_tokens=2, ignore_eos=True)])
    assert outs[0].token_ids == greedy[:greedy.index(stop_at) + 1] and outs[0].finish_reason == "stop"
    assert outs[1].token_ids == greedy[:2] and outs[1].finish_reason == "length"


def test_records_blocks_memory_and_trace(llama):
    engine = Engine(llama, block_size=4)
    prompt = list(range(1, 11))  # 10 tokens -> 3 blocks of 4
    rid = engine.add_request(prompt, SamplingParams(max_tokens=5, ignore_eos=True), trace=True)
    records = []
    while engine.has_unfinished():
        records.append(engine.step())
    first = records[0]
    assert first.chunks[0].kind == "prefill" and first.chunks[0].num_tokens == 10
    assert [c.kind for r in records[1:] for c in r.chunks] == ["decode"] * 4
    for step, record in enumerate(records[:-1]):
        state = record.request(rid)
        assert state.num_computed_tokens == 10 + step
        assert len(state.block_table) == math.ceil(state.num_computed_tokens / 4)
        memory = record.memory
        assert memory.used_block_bytes == len(state.block_table) * 4 * memory.bytes_per_token
        assert memory.token_bytes == state.num_computed_tokens * memory.bytes_per_token
        assert memory.slack_bytes + memory.token_bytes == memory.used_block_bytes
        assert memory.allocated_bytes == engine.cache.nbytes
        # the trace reads the whole context back through the block table
        trace = record.trace
        layers, heads = llama.config.num_hidden_layers, llama.config.num_attention_heads
        assert trace.keys.shape == (layers, state.num_computed_tokens, 2, 16)
        assert trace.attention.shape == (layers, heads, state.num_computed_tokens)
        assert np.allclose(trace.attention.sum(-1), 1.0, atol=1e-5)
        if step:  # earlier keys never change once cached
            previous = records[step - 1].trace.keys
            assert np.array_equal(trace.keys[:, :previous.shape[1]], previous)
        assert int(np.argmax(trace.logits)) == record.sampled[0][1]
    assert records[-1].request(rid).status == "finished"
    assert records[-1].num_free_blocks == engine.num_blocks
    kinds = {e.kind for r in records for e in r.events}
    assert {"allocate", "cache", "finish", "free"} <= kinds
    # records survive a JSON round trip, read back as a lesson file reads them (traces aside)
    for record in records:
        data = json.loads(json.dumps(record.to_dict()))
        assert data.pop("trace")["keys"] == record.trace.keys.tolist()
        again = typed(data, StepRecord, "step")
        assert again == replace(record, trace=None)


def test_no_cache_mode_recomputes_everything_and_holds_nothing(llama):
    cached, uncached = Engine(llama), Engine(llama, use_cache=False)
    for engine in (cached, uncached):
        engine.add_request([4, 5, 6, 7], SamplingParams(max_tokens=4, ignore_eos=True), trace=True)
    runs = {"cached": [], "uncached": []}
    while cached.has_unfinished():
        runs["cached"].append(cached.step())
        runs["uncached"].append(uncached.step())
    assert [r.num_tokens_run for r in runs["cached"]] == [4, 1, 1, 1]
    assert [r.num_tokens_run for r in runs["uncached"]] == [4, 5, 6, 7]
    assert all(r.memory.allocated_bytes == 0 for r in runs["uncached"])
    for a, b in zip(runs["cached"], runs["uncached"]):
        assert a.sampled == b.sampled
        assert np.abs(a.trace.logits - b.trace.logits).max() < 1e-4


@pytest.mark.parametrize("prompt, params, message", [
    ("", SamplingParams(), "empty"),
    ([], SamplingParams(), "empty"),
    ([1] * 300, SamplingParams(), "context"),
    ([1, 2], SamplingParams(max_tokens=0), "max_tokens"),
    ([1, VOCAB + 5], SamplingParams(), "outside the vocabulary"),
    ([1, -1], SamplingParams(), "outside the vocabulary"),
    ([1, 2], SamplingParams(temperature=-1), "temperature"),
    ([1, 2], SamplingParams(temperature=float("nan")), "temperature"),
    ([1, 2], SamplingParams(temperature=1e-40), "temperature"),
    ([1, 2], SamplingParams(temperature=float("inf")), "temperature"),
    ("text", SamplingParams(), "no tokenizer"),
])
def test_bad_requests_are_refused_and_the_engine_keeps_working(llama, prompt, params, message):
    engine = Engine(llama)
    with pytest.raises(EngineError, match=message):
        engine.add_request(prompt, params)
    assert not engine.has_unfinished()
    assert engine.generate([[1, 2]], SamplingParams(max_tokens=2))[0].token_ids


def test_a_pool_too_small_for_one_request_is_refused_up_front(llama):
    engine = Engine(llama, num_blocks=2, block_size=4)
    with pytest.raises(EngineError, match="pool has only 2"):
        engine.generate([[1, 2, 3], list(range(20))], SamplingParams(max_tokens=4))
    assert not engine.has_unfinished()  # nothing was queued
    assert len(engine.generate([[1, 2, 3]], SamplingParams(max_tokens=4))[0].token_ids) == 4
