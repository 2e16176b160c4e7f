"""Sliding-window layers keep their own block table and give back the blocks their window left
behind (engine/layer_groups.py), and greedy outputs stay identical to transformers' generate.

The tiny models (tests/support/tiny_models.py) have a window of 8 tokens; with blocks of 4 a
short prompt and generation already leave blocks behind.
"""

import json

import pytest
import torch

from kvviz import Engine, EngineError, SamplingParams, StepRecord
from kvviz.engine.block_pool import blocks_needed
from kvviz.engine.layer_groups import pool_sizes
from kvviz.lessons.files import typed

from tiny_models import VOCAB, hf_greedy, tiny_model

WINDOW, BLOCK, MAX_TOKENS = 8, 4, 24
SLIDING_ARCHS = ("gemma2", "gemma3", "mistral")  # 1:1, 5:1 and every layer sliding
SETTINGS = {
    "prefix caching": dict(),
    "chunked prefill": dict(max_num_batched_tokens=7),
    "sdpa": dict(attention="sdpa"),  # the gathered path reads block 0 for given-back entries
    "tight pool": dict(num_blocks=16),
    "speculative": dict(speculative_tokens=3),
    "no prefix caching": dict(enable_prefix_caching=False),
}


def prompts(seed=1):
    generator = torch.Generator().manual_seed(seed)
    own = [torch.randint(0, VOCAB - 1, (n,), generator=generator).tolist() for n in (5, 19, 33)]
    return own + [own[2] + [1, 2, 3]]  # the last shares 32 tokens (8 blocks) with the third


@pytest.fixture(scope="module", params=SLIDING_ARCHS)
def arch_case(request):
    model = tiny_model(request.param)
    cases = prompts()
    return request.param, model, cases, [hf_greedy(model, p, MAX_TOKENS) for p in cases]


def held(table):
    return [block for block in table if block is not None]


def check_pools(engine):
    """Every group's pool: counts add up, owners are exactly the tables that hold each block."""
    for g, group in enumerate(engine.layer_groups):
        owners = {}
        for request in engine.requests.values():
            if request.is_finished:
                continue
            for block in held(request.block_tables[g]):
                owners.setdefault(block, set()).add(request.request_id)
        group.pool.check_invariants(owners)


def test_groups_follow_the_layer_types():
    gemma3 = Engine(tiny_model("gemma3"), block_size=BLOCK)
    assert [(g.name, g.window, g.layers) for g in gemma3.layer_groups] == [
        ("full", None, [5]), ("sliding", WINDOW, [0, 1, 2, 3, 4])]
    assert gemma3.pool is gemma3.layer_groups[0].pool
    mistral = Engine(tiny_model("mistral"), block_size=BLOCK)
    assert [(g.name, g.window, g.layers) for g in mistral.layer_groups] == [("sliding", WINDOW, [0, 1])]
    plain = Engine(tiny_model("llama"), block_size=BLOCK)  # every layer full: one pool, no groups
    assert plain.layer_groups == [] and plain.kv.groups[0].pool is plain.pool
    plain.add_request([1, 2, 3], SamplingParams(max_tokens=2))
    record = plain.step()
    assert record.layer_groups == [] and record.requests[0].group_block_tables == []
    assert {e.group for e in record.events} == {0}


@pytest.mark.parametrize("setting", SETTINGS)
def test_greedy_identical_to_hf_generate(arch_case, setting):
    arch, model, cases, expected = arch_case
    engine = Engine(model, block_size=BLOCK, **SETTINGS[setting])
    outs = engine.generate(cases, SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True))
    assert [o.token_ids for o in outs] == expected, f"{arch} / {setting}"
    sliding = engine.layer_groups[-1]
    assert sliding.window == WINDOW
    peaks = engine.stats["peak_blocks_by_group"]
    if len(engine.layer_groups) == 2:  # the sliding group never needed as many blocks as the full one
        assert peaks[1] < peaks[0] or setting == "tight pool"
    if setting == "prefix caching":
        # the fourth prompt ran beside the third and reused its 8 full blocks, in both groups
        assert outs[3].num_cached_tokens == 32
        again = engine.generate([cases[2]], SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True))
        assert again[0].token_ids == expected[2] and again[0].num_cached_tokens == 32
    if setting == "tight pool" and arch != "mistral":  # mistral's sliding blocks leave room for all
        assert engine.scheduler.num_preemptions > 0
    check_pools(engine)
    for group in engine.layer_groups:
        assert group.pool.num_free_blocks == group.pool.num_blocks  # nothing leaked


@pytest.mark.parametrize("arch", SLIDING_ARCHS)
def test_forced_preemption_recomputes_identically(arch):
    """Preempt a request after its window has left blocks behind: it gives back the rest, runs
    again from a prefix hit (the full blocks are still cached) and ends as transformers does."""
    model = tiny_model(arch)
    cases = prompts()[1:3]
    expected = [hf_greedy(model, p, MAX_TOKENS) for p in cases]
    engine = Engine(model, block_size=BLOCK)
    ids = [engine.add_request(p, SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)) for p in cases]
    for _ in range(6):
        engine.step()
    victim = engine.requests[ids[1]]
    assert victim.block_tables[-1][0] is None  # its window has moved on
    engine.scheduler.running.remove(victim)
    engine.scheduler.preempt(victim)
    assert all(table == [] for table in victim.block_tables) and victim.num_computed_tokens == 0
    check_pools(engine)
    records = []
    while engine.has_unfinished():
        records.append(engine.step())
    assert [engine.output(i).token_ids for i in ids] == expected
    assert victim.num_preemptions == 1 and victim.num_hit_tokens > 0
    check_pools(engine)


def test_sliding_blocks_stay_flat_while_full_blocks_grow():
    engine = Engine(tiny_model("gemma3"), block_size=BLOCK, num_blocks=40)
    engine.add_request(prompts()[0], SamplingParams(max_tokens=60, ignore_eos=True))
    full_held, sliding_held = [], []
    while engine.has_unfinished():
        record = engine.step()
        (state,) = record.requests
        if state.status != "running":
            break
        full, sliding = state.group_block_tables
        assert full == state.block_table and len(full) == len(sliding)
        computed = state.num_computed_tokens
        full_held.append(len(held(full)))
        sliding_held.append(len(held(sliding)))
        # blocks before the window of the next query (at position `computed`) are given back, the first ones
        first_needed = max(0, (computed - 1 - WINDOW + 1) // BLOCK)  # as scheduled, before this step ran
        assert sliding[:first_needed] == [None] * first_needed and None not in sliding[first_needed:]
        full_group, sliding_group = record.layer_groups
        assert (full_group.name, sliding_group.name, sliding_group.window) == ("full", "sliding", WINDOW)
        assert full_group.num_free_blocks == 40 - len(full)  # one request: the pools show what it holds
        assert sliding_group.num_free_blocks == 40 - len(held(sliding))
        assert full_held[-1] == blocks_needed(computed, BLOCK)
        # the memory record: a sliding layer's bytes follow its group's blocks, not the context
        layer_block_bytes = engine.cache.bytes_per_block // 6  # one block of one layer
        assert record.memory.layer_used_bytes == [len(held(sliding)) * layer_block_bytes] * 5 + \
            [len(full) * layer_block_bytes]
        assert record.memory.token_bytes == computed * layer_block_bytes // BLOCK * 1 + \
            (computed - first_needed * BLOCK) * layer_block_bytes // BLOCK * 5
    # the full group grows with the context, one block per 4 tokens; past the window the sliding
    # group holds the window's 2 blocks, 3 while the window straddles a block boundary
    assert full_held[-1] == blocks_needed(5 + 59, BLOCK) == 16
    assert set(sliding_held[4:]) == {2, 3} and max(sliding_held) == blocks_needed(WINDOW, BLOCK) + 1


def test_given_back_blocks_show_as_slide_events_and_free_blocks():
    engine = Engine(tiny_model("gemma2"), block_size=BLOCK, num_blocks=30)
    engine.add_request(list(range(1, 10)), SamplingParams(max_tokens=30, ignore_eos=True))
    records = []
    while engine.has_unfinished():
        records.append(engine.step())
    events = [e for r in records for e in r.events]
    slid = [block for e in events if e.kind == "slide" for block in e.block_ids]
    assert slid and all(e.group == 1 for e in events if e.kind == "slide")
    # the last token run sits at position 9 + 29 - 1 = 37; it sees keys from 30 on, in block 7
    assert len(slid) == (37 - WINDOW + 1) // BLOCK == 7
    allocated = sorted(b for e in events if e.kind == "allocate" and e.group == 1 for b in e.block_ids)
    freed = sorted(b for e in events if e.kind == "free" and e.group == 1 for b in e.block_ids)
    assert allocated == freed and set(slid) <= set(freed)  # every block back, the left-behind ones early
    full_allocated = [b for e in events if e.kind == "allocate" and e.group == 0 for b in e.block_ids]
    assert len(full_allocated) == blocks_needed(37 + 1, BLOCK) and len(allocated) == len(full_allocated)


def test_records_with_group_tables_survive_json():
    engine = Engine(tiny_model("gemma2"), block_size=BLOCK)
    engine.add_request(prompts()[2], SamplingParams(max_tokens=4, ignore_eos=True))
    engine.step()
    record = engine.step()
    assert record.requests[0].group_block_tables[1][0] is None and record.layer_groups
    again = typed(json.loads(json.dumps(record.to_dict())), StepRecord, "step")
    assert again == record


def test_parallel_samples_copy_only_their_groups_layers():
    """n seeded samples share their parent's blocks in both groups and copy a shared block before
    writing: they equal n separate requests."""
    model = tiny_model("gemma3")
    prompt, n = list(range(1, 14)), 3
    sampled = dict(temperature=1.0, top_k=40, ignore_eos=True, max_tokens=16)
    fork = Engine(model, block_size=BLOCK)
    out = fork.generate([prompt], SamplingParams(seed=5, n=n, **sampled))[0]
    alone = Engine(model, block_size=BLOCK).generate(
        [prompt] * n, [SamplingParams(seed=5 + i, **sampled) for i in range(n)])
    assert out.samples == [o.token_ids for o in alone]
    assert len({tuple(s) for s in out.samples}) == n
    for group in fork.layer_groups:
        assert group.pool.num_free_blocks == group.pool.num_blocks


def test_swap_preemption_is_refused_in_one_sentence():
    with pytest.raises(EngineError, match="preemption_mode='recompute'"):
        Engine(tiny_model("mistral"), block_size=BLOCK, preemption_mode="swap")


def test_a_traced_request_shows_given_back_keys_as_zeros():
    model = tiny_model("gemma2")  # layer 0 sliding, layer 1 full
    engine = Engine(model, block_size=BLOCK)
    engine.add_request(prompts()[1], SamplingParams(max_tokens=6, ignore_eos=True), trace=True)  # 19 tokens
    engine.step()
    record = engine.step()  # the decode at position 19: keys from 12 on; blocks 0-2 were given back
    keys, attention = record.trace.keys, record.trace.attention  # (layers, tokens, ...), (layers, heads, tokens)
    assert keys.shape[1] == 20 and record.requests[0].group_block_tables[1][:3] == [None] * 3
    assert not keys[0, :12].any() and keys[0, 12:].all()  # the sliding layer: given back, shown as zeros
    assert keys[1].all()  # the full layer keeps every key
    assert not attention[0, :, :12].any() and attention[1, :, :12].all()


def run_at_budget(model, max_num_batched_tokens):
    """Four requests growing to 65 tokens (17 blocks each in a full layer) in the bytes of 40 blocks
    of every layer: (engine, outputs, the most requests running at once)."""
    engine = Engine(model, block_size=BLOCK, num_blocks=40, max_num_seqs=4,
                    max_num_batched_tokens=max_num_batched_tokens)
    for prompt in prompts(seed=3)[:4]:
        engine.add_request(prompt[:5], SamplingParams(max_tokens=60, ignore_eos=True))
    most_running = 0
    while engine.has_unfinished():
        record = engine.step()
        most_running = max(most_running, sum(state.status == "running" for state in record.requests))
    return engine, [engine.output(i).token_ids for i in range(4)], most_running


@pytest.mark.parametrize("arch", ["gemma2", "gemma3"])
def test_given_back_bytes_let_more_requests_run_in_the_same_memory(arch):
    """The sliding pool keeps what 4 requests' windows hold; its other bytes become full blocks.
    With max_num_batched_tokens 2048 a step's new tokens alone would need more than 40 sliding
    blocks, so every pool keeps 40: the layout before the pools shared their bytes (one tensor)."""
    model = tiny_model(arch)
    num_layers = model.config.num_hidden_layers
    shared, shared_out, shared_running = run_at_budget(model, max_num_batched_tokens=24)
    before, before_out, before_running = run_at_budget(model, max_num_batched_tokens=2048)
    bytes_of_40_blocks = 40 * shared.cache.bytes_per_block
    assert before.cache.storage is not None and before.cache.nbytes == bytes_of_40_blocks
    assert [g.pool.num_blocks for g in before.layer_groups] == [40, 40]
    # sliding: 4 requests x (8 / 4 + 2) blocks + 24 new tokens / 4 = 22; full: the rest of the bytes
    sliding_layers = num_layers - 1 if arch == "gemma3" else 1
    full_blocks = (40 * num_layers - 22 * sliding_layers) // (num_layers - sliding_layers)
    assert [g.pool.num_blocks for g in shared.layer_groups] == [full_blocks, 22] == \
        ([130, 22] if arch == "gemma3" else [58, 22])
    assert shared.cache.storage is None and shared.cache.nbytes == bytes_of_40_blocks  # the same memory
    assert shared_out == before_out  # greedy: the same tokens, whatever was preempted
    # before: at most 40 full blocks in use, so the 4 requests (68 blocks at the end) were preempted
    assert before.stats["peak_blocks_by_group"][0] <= 40 and before.scheduler.num_preemptions >= 3
    assert shared.stats["peak_blocks_by_group"][0] > 50  # more tokens held at once than 40 blocks hold
    assert shared.step_index < before.step_index  # and the work done in fewer steps (77 before)
    assert shared.scheduler.num_preemptions <= before.scheduler.num_preemptions
    if arch == "gemma3":  # 4 x 17 full blocks fit in 130: nothing waits
        assert shared.scheduler.num_preemptions == 0 and shared_running == before_running == 4
    check_pools(shared)


def test_pool_sizes_share_out_the_bytes_of_num_blocks():
    gemma3 = [8, 8, 8, 8, 8, None]
    assert pool_sizes(gemma3, 40, 4, max_num_seqs=4, max_num_batched_tokens=24, most_blocks=10**6) == [130, 22]
    # the full group never takes more than every request's whole context, unless num_blocks already is
    assert pool_sizes(gemma3, 40, 4, 4, 24, most_blocks=60) == [60, 22]
    assert pool_sizes(gemma3, 40, 4, 4, 24, most_blocks=30) == [40, 22]
    assert pool_sizes(gemma3, 40, 4, 64, 24, most_blocks=10**6) == [40, 40]  # the windows need every block
    assert pool_sizes([8, 8], 40, 4, 4, 24, 10**6) == [40]  # all sliding (Mistral): one pool, as before
