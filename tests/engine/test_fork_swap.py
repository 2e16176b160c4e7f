"""Parallel sampling with copy-on-write, and swap-or-recompute preemption, on the real engine."""

import json
import random

import pytest
import torch

from kvviz import Engine, EngineError, SamplingParams, StepRecord
from kvviz.engine.records import pool_blocks
from kvviz.lessons.files import typed

from tiny_models import VOCAB, tiny_model

SAMPLED = dict(temperature=1.0, top_k=40, ignore_eos=True)


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama")


def run(engine, prompts, params):
    """Step an engine to the end; returns its records and each prompt's request id."""
    ids = [engine.add_request(p, sp) for p, sp in zip(prompts, params)]
    records = []
    while engine.has_unfinished():
        records.append(engine.step())
    return ids, records


def check_blocks(engine):
    """Ref counts equal the number of block tables holding each block; swapped requests hold
    no blocks and exactly their swap slots are taken."""
    owners: dict[int, set[int]] = {}
    for request in engine.requests.values():
        for block_id in request.block_table:
            owners.setdefault(block_id, set()).add(request.request_id)
        assert not (request.block_table and engine.kv.is_swapped(request))
    engine.pool.check_invariants(owners)
    for block_id, holders in owners.items():
        assert engine.pool.blocks[block_id].ref_cnt == len(holders)
    swap = engine.kv.swap
    if swap is not None:
        taken = [slot for slots in engine.kv.swapped.values() for slot in slots]
        assert len(taken) == len(set(taken)) == swap.num_slots - swap.num_free_slots
        assert not set(taken) & set(swap.free_slots)


@pytest.mark.parametrize("prefix_caching", [True, False])
def test_n_seeded_samples_equal_n_separate_requests(llama, prefix_caching):
    prompt, n = list(range(1, 12)), 4
    fork = Engine(llama, block_size=4, enable_prefix_caching=prefix_caching)
    out = fork.generate([prompt, [7, 8, 9]], SamplingParams(max_tokens=12, seed=5, n=n, **SAMPLED))[0]
    alone = Engine(llama, block_size=4, enable_prefix_caching=prefix_caching).generate(
        [prompt] * n, [SamplingParams(max_tokens=12, seed=5 + i, **SAMPLED) for i in range(n)])
    assert out.samples == [o.token_ids for o in alone]
    assert out.token_ids == out.samples[0] and out.texts is None  # a bare model has no tokenizer
    assert len({tuple(s) for s in out.samples}) == n  # the seeds differ, so the samples do


def test_the_prompt_is_prefilled_once_and_n_1_is_the_old_api(llama):
    engine = Engine(llama, block_size=4)
    _, records = run(engine, [list(range(1, 12))], [SamplingParams(max_tokens=6, seed=1, n=3, **SAMPLED)])
    assert [c.num_tokens for c in records[0].chunks] == [11]
    assert sum(c.kind == "prefill" for r in records for c in r.chunks) == 1
    assert [len(r.chunks) for r in records[1:]] == [3] * 5  # three samples decode side by side
    plain = engine.generate([[1, 2, 3]], SamplingParams(max_tokens=4, ignore_eos=True))[0]
    assert plain.samples == [plain.token_ids] and len(plain.token_ids) == 4


@pytest.mark.parametrize("prompt_len", [11, 12])
def test_the_fork_saves_exactly_the_shared_full_prompt_blocks(llama, prompt_len):
    block_size, n, max_tokens = 4, 8, 9
    prompt = list(range(1, prompt_len + 1))
    fork = Engine(llama, block_size=block_size, enable_prefix_caching=False)
    fork.generate([prompt], SamplingParams(max_tokens=max_tokens, seed=3, n=n, **SAMPLED))
    apart = Engine(llama, block_size=block_size, enable_prefix_caching=False)
    apart.generate([prompt] * n, [SamplingParams(max_tokens=max_tokens, seed=3 + i, **SAMPLED) for i in range(n)])
    per_sequence = -(-(prompt_len + max_tokens - 1) // block_size)  # the last token is never computed
    assert apart.stats["peak_blocks"] == n * per_sequence
    full_prompt_blocks = prompt_len // block_size  # a partial last block is copied by all but one
    assert fork.stats["peak_blocks"] == n * per_sequence - (n - 1) * full_prompt_blocks


def test_copy_on_write_copies_the_shared_partial_block_once_per_writer(llama):
    engine = Engine(llama, block_size=4)
    _, records = run(engine, [list(range(1, 11))], [SamplingParams(max_tokens=5, seed=2, n=3, **SAMPLED)])
    forks = [e for r in records for e in r.events if e.kind == "fork"]
    assert len(forks) == 2 and all(e.block_ids == records[0].request(0).block_table for e in forks)
    copies = [e for r in records for e in r.events if e.kind == "copy"]
    shared_tail = records[0].request(0).block_table[-1]  # tokens 8, 9 of the prompt; 2 of 4 slots
    assert len(copies) == 2 and all(e.block_ids[0] == shared_tail for e in copies)  # n - 1 writers copy
    assert all(e.num_bytes == engine.cache.bytes_per_block for e in copies)
    # each copy holds the prompt's keys and values; after the first decode every sample writes its own block
    storage = engine.cache.storage  # (2, layers, blocks, block_size, kvh, hd)
    for event in copies:
        shared, own = event.block_ids
        assert torch.equal(storage[:, :, own, :2], storage[:, :, shared, :2])
    tails = [r.block_table[2] for r in records[1].requests]
    assert len(tails) == 3 and len(set(tails)) == 3 and shared_tail in tails
    assert all(r.block_table[:2] == records[0].request(0).block_table[:2] for r in records[1].requests)
    assert records[-1].num_free_blocks == engine.num_blocks


def test_copy_blocks_moves_every_layer_in_one_call(llama):
    engine = Engine(llama, block_size=4, num_blocks=6)
    engine.cache.storage.normal_()
    before = engine.cache.storage.clone()
    moved = engine.cache.copy_blocks([1, 4], [3, 0])
    assert moved == 2 * engine.cache.bytes_per_block
    assert torch.equal(engine.cache.storage[:, :, [3, 0]], before[:, :, [1, 4]])
    assert torch.equal(engine.cache.storage[:, :, [1, 2, 4, 5]], before[:, :, [1, 2, 4, 5]])


def tight_workload():
    prompts = [[(7 * i + j) % (VOCAB - 2) + 1 for j in range(18 + 3 * i)] for i in range(6)]
    return prompts, SamplingParams(max_tokens=24, ignore_eos=True)


def test_swap_and_recompute_give_identical_outputs_under_preemption(llama):
    prompts, greedy = tight_workload()
    engines, records, outputs = {}, {}, {}
    for mode in ("recompute", "swap"):
        engines[mode] = engine = Engine(llama, block_size=4, num_blocks=24, preemption_mode=mode)
        ids, records[mode] = run(engine, prompts, [greedy] * len(prompts))
        outputs[mode] = [engine.output(i).token_ids for i in ids]
        assert engine.scheduler.num_preemptions > 0
    assert outputs["swap"] == outputs["recompute"]
    recomputed = {mode: sum(r.num_recomputed_tokens for r in engines[mode].requests.values()) for mode in engines}
    assert recomputed["recompute"] > 0 and recomputed["swap"] == 0  # swapped blocks come back, nothing reruns
    swap_records = records["swap"]
    swap_outs, swap_ins = ([e for r in swap_records for e in r.events if e.kind == kind]
                           for kind in ("swap_out", "swap_in"))
    assert swap_outs and len(swap_outs) == len(swap_ins)
    bytes_per_block = engines["swap"].cache.bytes_per_block
    for event in swap_outs + swap_ins:
        assert event.num_bytes == len(event.block_ids) * bytes_per_block == len(event.cpu_slots) * bytes_per_block
    assert swap_records[-1].num_free_swap_slots == engines["swap"].kv.swap.num_slots
    assert all(b.free for b in pool_blocks(swap_records, engines["swap"].num_blocks))
    for record in swap_records:  # new events and fields survive JSON
        text = json.dumps(record.to_dict())
        assert json.dumps(typed(json.loads(text), StepRecord, "step").to_dict()) == text


def test_a_full_swap_space_falls_back_to_recompute_and_says_so(llama):
    prompts, greedy = tight_workload()
    expected = [o.token_ids for o in Engine(llama, block_size=4, num_blocks=24).generate(prompts, greedy)]
    engine = Engine(llama, block_size=4, num_blocks=24, preemption_mode="swap", swap_space_blocks=2)
    ids, records = run(engine, prompts, [greedy] * len(prompts))
    assert [engine.output(i).token_ids for i in ids] == expected
    assert any(e.kind == "swap_full" for r in records for e in r.events)
    assert sum(r.num_recomputed_tokens for r in engine.requests.values()) > 0
    assert engine.kv.swap.num_free_slots == 2


def test_bad_settings_are_refused_in_one_sentence(llama):
    with pytest.raises(EngineError, match="n \\(samples per prompt\\) must be"):
        Engine(llama).generate([[1, 2]], SamplingParams(n=0))
    with pytest.raises(EngineError, match="preemption_mode must be"):
        Engine(llama, preemption_mode="discard")
    with pytest.raises(EngineError, match="swap_space_blocks must be None .as many as the pool. or a whole number"):
        Engine(llama, preemption_mode="swap", swap_space_blocks=0)


def test_aborting_a_forked_request_frees_every_sample(llama):
    engine = Engine(llama, block_size=4)
    rid = engine.add_request(list(range(1, 10)), SamplingParams(max_tokens=20, seed=0, n=4, **SAMPLED))
    for _ in range(3):
        engine.step()
    engine.abort(rid)
    assert not engine.has_unfinished() and engine.pool.num_free_blocks == engine.num_blocks
    assert len(engine.output(rid).samples) == 4


def test_no_block_or_swap_slot_leaks_over_random_workloads(llama):
    rng = random.Random(1234)
    for _ in range(8):
        mode = rng.choice(["recompute", "swap"])
        block_size = rng.choice([2, 4, 8])
        num_requests = rng.randint(1, 6)
        prompts = [[rng.randrange(1, VOCAB - 1) for _ in range(rng.randint(1, 20))] for _ in range(num_requests)]
        params = [SamplingParams(max_tokens=rng.randint(1, 16), n=rng.choice([1, 1, 2, 3]), seed=rng.randrange(99),
                                 temperature=rng.choice([0.0, 1.0]), ignore_eos=True) for _ in prompts]
        most = max(-(-(len(p) + sp.max_tokens) // block_size) for p, sp in zip(prompts, params))
        engine = Engine(llama, block_size=block_size, num_blocks=rng.randint(most, 3 * most),
                        enable_prefix_caching=rng.random() < 0.5, max_num_batched_tokens=rng.choice([8, 32, 256]),
                        preemption_mode=mode, swap_space_blocks=rng.randint(1, 2 * most))
        for prompt, sp in zip(prompts, params):
            engine.add_request(prompt, sp)
        steps = 0
        while engine.has_unfinished():
            engine.step()
            check_blocks(engine)
            steps += 1
            assert steps < 2000, "the workload must finish"
        assert engine.pool.num_free_blocks == engine.num_blocks
        assert not engine.kv.swapped
        if engine.kv.swap is not None:
            assert engine.kv.swap.num_free_slots == engine.kv.swap.num_slots
        for request in engine.requests.values():
            assert len(request.output_token_ids) == request.params.max_tokens


def test_memory_counts_a_shared_partial_block_once(llama):
    engine = Engine(llama, block_size=4)
    engine.add_request(list(range(1, 11)), SamplingParams(max_tokens=4, seed=0, n=3, **SAMPLED))
    memory = engine.step().memory  # after the fork: 3 blocks shared by 3 samples, 10 tokens
    assert memory.used_block_bytes == 3 * engine.cache.bytes_per_block
    assert memory.token_bytes == 10 * memory.bytes_per_token and memory.slack_bytes == 2 * memory.bytes_per_token


def test_the_lesson_comparison_times_only_warm_runs(llama):
    from kvviz.lessons.paged_batching import swap as swap_lesson

    prompts, _ = tight_workload()
    timed = swap_lesson.run_mode(llama, prompts, "swap", block_size=4, num_blocks=24, max_tokens=24, runs=2)
    untimed = swap_lesson.run_mode(llama, [[1, 2, 3]], "swap", block_size=4, num_blocks=24, max_tokens=2, runs=1)
    assert timed.timed and len(timed.seconds) == 1 and not untimed.timed
    assert timed.bytes_out == timed.bytes_in > 0 and untimed.bytes_out == 0
    events = swap_lesson.swap_events(timed)
    assert {e["event"] for e in events} == {"swap_out", "swap_in"}
    assert sum(e["bytes"] for e in events if e["event"] == "swap_out") == timed.bytes_out


def test_the_lesson_comparison_refuses_an_empty_table(llama):
    from kvviz.lessons.paged_batching import swap as swap_lesson

    with pytest.raises(EngineError, match="no requests to compare"):
        swap_lesson.compare(llama, [])
