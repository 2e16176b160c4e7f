"""A step's cost, the engine's settings, and what a failing step leaves behind."""

import sys

import pytest
import torch

from kvviz import Engine, EngineError, SamplingParams
from kvviz.engine import engine as engine_module
from kvviz.engine.config import EngineConfig
from kvviz.engine.cpu.threads import CpuShare
from kvviz.engine.records import pool_blocks

from tiny_models import tiny_model

GREEDY = SamplingParams(max_tokens=6, ignore_eos=True)


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama")


def prompts(count=6, seed=3):
    generator = torch.Generator().manual_seed(seed)
    shared = torch.randint(1, 90, (20,), generator=generator).tolist()
    return [shared + torch.randint(1, 90, (3 + 5 * i,), generator=generator).tolist() for i in range(count)]


def calls_in_one_decode_step(model, num_blocks: int, **settings) -> int:
    """Python and C function calls made by one decode step of a batch of requests (a count, not a time).
    The thread policy is fixed for the count: the measured one reads /proc/stat when a quarter second has passed,
    which adds calls to whichever step that falls in."""
    engine = Engine(model, num_blocks=num_blocks, block_size=4, **settings)
    for prompt in prompts():
        engine.add_request(prompt, GREEDY)
    engine.step()  # the prefills
    engine.step()  # a decode step, to warm up anything done once
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        calls += event in ("call", "c_call")

    sys.setprofile(count)
    try:
        record = engine.step()
    finally:
        sys.setprofile(None)
    assert [c.kind for c in record.chunks] == ["decode"] * len(prompts())
    return calls


def test_a_steps_work_does_not_grow_with_the_pool(llama, monkeypatch):
    monkeypatch.setattr(engine_module, "cpu_share", CpuShare(fixed=torch.get_num_threads()))
    small, large = (calls_in_one_decode_step(llama, n) for n in (64, 4096))
    assert small == large  # the same requests and events: the same work, whatever the pool's size
    # listing every block in every record is what grew with the pool; it is now opt-in
    listed = calls_in_one_decode_step(llama, 4096, record_blocks=True)
    assert listed > large + 4096


def test_the_pool_rebuilt_from_events_is_the_pool(llama):
    # a tight pool with shared prefixes: prefix hits, caching, eviction, preemption all happen
    engine = Engine(llama, num_blocks=16, block_size=4, record_blocks=True)
    for prompt in prompts(5):
        engine.add_request(prompt, SamplingParams(max_tokens=12, ignore_eos=True))
    records = []
    while engine.has_unfinished():
        records.append(engine.step())
    kinds = {e.kind for r in records for e in r.events}
    assert {"prefix_hit", "cache", "evict", "preempt", "finish"} <= kinds
    for step, record in enumerate(records):
        assert pool_blocks(records[:step + 1], engine.num_blocks) == record.blocks, step


def test_engine_config_holds_the_settings_and_keywords_override_them(llama):
    engine = Engine(llama)
    assert engine.config == EngineConfig()  # the defaults; the pool was sized from memory
    assert engine.num_blocks > 0 and not engine.config.record_blocks
    custom = Engine(llama, EngineConfig(block_size=8), num_blocks=20, max_num_seqs=2)
    assert (custom.config.block_size, custom.num_blocks, custom.config.max_num_seqs) == (8, 20, 2)
    assert custom.cache.key_cache[0].shape[:2] == (20, 8)
    with pytest.raises(EngineError, match="no setting 'blocks'"):
        Engine(llama, blocks=4)
    with pytest.raises(EngineError, match="by name"):
        Engine(llama, 16)
    with pytest.raises(EngineError, match="max_num_batched_tokens must be a whole number from 1 to 2,097,152"):
        Engine(llama, max_num_batched_tokens=0)


def test_a_prompt_longer_than_the_step_without_chunking_is_refused(llama):
    engine = Engine(llama, max_num_batched_tokens=4, enable_chunked_prefill=False)
    with pytest.raises(EngineError, match="chunked prefill is off"):
        engine.add_request(list(range(1, 9)), GREEDY)
    assert not engine.has_unfinished()
    assert len(engine.generate([[1, 2, 3]], GREEDY)[0].token_ids) == 6


def test_a_long_recompute_after_preemption_still_finishes_without_chunking(llama):
    # 4-token prompts fit the 6-token step, but after preemption a request must recompute
    # its prompt and outputs (up to 13 tokens): that runs in chunks rather than waiting forever
    expected = Engine(llama).generate([[1, 2, 3, 4], [5, 6, 7, 8]], SamplingParams(max_tokens=10, ignore_eos=True))
    engine = Engine(llama, num_blocks=5, block_size=4, max_num_batched_tokens=6, enable_chunked_prefill=False)
    outs = engine.generate([[1, 2, 3, 4], [5, 6, 7, 8]], SamplingParams(max_tokens=10, ignore_eos=True))
    assert engine.scheduler.num_preemptions > 0
    assert [o.token_ids for o in outs] == [o.token_ids for o in expected]


POISON = 93  # a token id that makes the model below fail


class FailsOnPoison(torch.nn.Module):
    """Wraps an embedding: a real module whose forward raises when a poison token comes in."""

    def __init__(self, embedding):
        super().__init__()
        self.embedding = embedding
        self.weight = embedding.weight

    def forward(self, input_ids):
        if (input_ids == POISON).any():
            raise RuntimeError("the poison token reached the model")
        return self.embedding(input_ids)


def test_a_failing_step_finishes_its_requests_and_the_engine_goes_on():
    model = tiny_model("llama")
    prompts = [[1, 2, 3], list(range(10, 30)), list(range(40, 45))]
    expected = [o.token_ids for o in Engine(model).generate(prompts, GREEDY)]
    model.model.embed_tokens = FailsOnPoison(model.model.embed_tokens)
    engine = Engine(model, block_size=4)
    good = engine.add_request(prompts[1], GREEDY)
    engine.step()  # the good request has its prompt cached and blocks held
    bad = engine.add_request([1, POISON, 2], GREEDY)
    other = engine.add_request(prompts[2], GREEDY)  # its first block is cached as it is scheduled
    with pytest.raises(EngineError, match="finish_reason 'error'"):
        engine.step()  # all three share the failing forward pass
    assert {engine.output(i).finish_reason for i in (good, bad, other)} == {"error"}
    assert not engine.has_unfinished()
    engine.pool.check_invariants()
    assert engine.pool.num_free_blocks == engine.num_blocks  # nothing leaked
    # the engine goes on, and the prefix cache kept nothing the failed pass should have written
    outs = engine.generate(prompts, GREEDY)
    assert [o.token_ids for o in outs] == expected
    assert outs[1].num_cached_tokens == 16 and outs[2].num_cached_tokens == 0
    with pytest.raises(EngineError, match="failed"):
        engine.generate([[4, 5], [POISON]], GREEDY)  # generate gives back what it queued
    assert not engine.has_unfinished() and engine.pool.num_free_blocks == engine.num_blocks
