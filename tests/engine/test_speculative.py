"""Speculative decoding by prompt lookup: the same tokens as plain greedy decoding, fewer forward
passes, and a pool left exactly as it should be after every rollback."""

import json

import pytest
import torch

from kvviz import Engine, EngineError, SamplingParams
from kvviz.engine.block_pool import blocks_needed
from kvviz.engine.records import StepRecord
from kvviz.engine.speculative import accept, propose_drafts
from kvviz.lessons.files import typed

from tiny_models import VOCAB, tiny_model

ARCHS = ("llama", "qwen3", "gemma2")
SETTINGS = {
    "blocks of 4, prefix caching": dict(block_size=4),
    "token budget 7": dict(block_size=4, max_num_batched_tokens=7),  # drafts cut to fit, prompts chunked
    "tight pool": dict(block_size=4, num_blocks=20),  # drafts dropped when blocks run short; preemption
}


def random_tokens(count, generator):
    return torch.randint(0, VOCAB - 1, (count,), generator=generator).tolist()


def workload(seed=1):
    """Prompts that repeat themselves (so drafts are found) beside ones that do not."""
    generator = torch.Generator().manual_seed(seed)
    verse, refrain = random_tokens(9, generator), random_tokens(5, generator)
    return [verse + refrain + verse[:4] + refrain, refrain * 4, random_tokens(7, generator),
            verse + refrain + verse + [3, 4], random_tokens(30, generator)]


@pytest.fixture(scope="module", params=ARCHS)
def arch_case(request):
    model = tiny_model(request.param)
    prompts = workload()
    params = SamplingParams(max_tokens=20, ignore_eos=True)
    engine = Engine(model, block_size=4)
    plain, records = run_checked(engine, prompts, params)
    return request.param, model, prompts, params, plain, len(records)


def check_pool(engine):
    """Reference counts match the running block tables, no block lies past a request's computed
    tokens, and every cached block holds only verified tokens (never a draft)."""
    size = engine.block_size
    owners = {}
    for request in engine.scheduler.running:
        for block_id in request.block_table:
            owners.setdefault(block_id, set()).add(request.request_id)
    engine.pool.check_invariants(owners)
    for request in engine.scheduler.running:
        assert len(request.block_table) == blocks_needed(request.num_computed_tokens, size)
        for index, block_id in enumerate(request.block_table):
            block = engine.pool.blocks[block_id]
            if block.block_hash is not None:
                assert block.token_ids == tuple(request.token_slice(index * size, (index + 1) * size))


def run_checked(engine, prompts, params):
    ids = [engine.add_request(p, params) for p in prompts]
    records = []
    while engine.has_unfinished():
        records.append(engine.step())
        check_pool(engine)
    return [engine.output(i).token_ids for i in ids], records


@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("setting", SETTINGS)
def test_speculative_greedy_equals_plain_greedy(arch_case, setting, k):
    arch, model, prompts, params, plain, plain_steps = arch_case
    engine = Engine(model, speculative_tokens=k, **SETTINGS[setting])
    outputs, records = run_checked(engine, prompts, params)
    assert outputs == plain, f"{arch} / {setting} / k={k}"
    drafts = [d for r in records for d in r.drafts]
    assert drafts and all(len(d.draft_token_ids) <= k for d in drafts)
    assert sum(d.num_accepted for d in drafts) == engine.stats["accepted_tokens"] > 0
    assert any(d.rolled_back_slots for d in drafts)  # some drafts were rejected and rolled back
    assert all(len(d.rolled_back_slots) == len(d.draft_token_ids) - d.num_accepted for d in drafts)
    if setting == "blocks of 4, prefix caching":  # with a small budget, drafts can delay a prefill
        assert len(records) < plain_steps
    if setting == "tight pool":
        assert engine.scheduler.num_preemptions > 0
    assert engine.pool.num_free_blocks == engine.num_blocks  # nothing leaked


def test_rollbacks_free_blocks_across_block_boundaries():
    model = tiny_model("llama")
    engine = Engine(model, block_size=2, speculative_tokens=5)
    _, records = run_checked(engine, workload(), SamplingParams(max_tokens=24, ignore_eos=True))
    freed = [(r, d) for r in records for d in r.drafts if d.freed_block_ids]
    assert freed
    for record, draft in freed:  # each freed block is noted as a rollback, then freed
        kinds = {e.kind for e in record.events if e.request_id == draft.request_id
                 and set(draft.freed_block_ids) <= set(e.block_ids)}
        assert {"rollback", "free"} <= kinds
        state = record.request(draft.request_id)
        if state.status == "running":
            assert not set(draft.freed_block_ids) & set(state.block_table)


def expected_acceptance(prompt, output, k):
    """Drafts accepted and forward passes, replayed from a known greedy output: a draft is accepted
    exactly when it equals the token plain greedy decoding produced at its place."""
    accepted, forwards, produced = 0, 1, 1  # the prefill pass gives the first token
    while produced < len(output):
        drafts = propose_drafts(prompt + output[:produced], min(k, len(output) - produced - 1))
        run = 0
        while run < len(drafts) and drafts[run] == output[produced + run]:
            run += 1
        accepted, forwards, produced = accepted + run, forwards + 1, produced + run + 1
    return accepted, forwards


@pytest.mark.parametrize("arch", ARCHS)
def test_acceptance_on_a_prompt_built_to_repeat(arch):
    model = tiny_model(arch)
    params = SamplingParams(max_tokens=24, ignore_eos=True)
    start = random_tokens(10, torch.Generator().manual_seed(2))
    first = Engine(model).generate([start], params)[0].token_ids
    prompt = start + first + start + first[:6]  # the model's own words, twice: lookup finds them
    plain = Engine(model).generate([prompt], params)[0].token_ids
    for k in (1, 3, 5):
        engine = Engine(model, block_size=4, speculative_tokens=k)
        outputs, records = run_checked(engine, [prompt], params)
        accepted, forwards = expected_acceptance(prompt, plain, k)
        assert outputs == [plain]
        assert accepted > 0
        assert sum(d.num_accepted for r in records for d in r.drafts) == accepted
        assert len(records) == forwards < len(plain)


def test_max_tokens_and_stop_tokens_inside_an_accepted_run():
    model = tiny_model("llama")
    start = random_tokens(10, torch.Generator().manual_seed(2))
    first = Engine(model).generate([start], SamplingParams(max_tokens=24, ignore_eos=True))[0].token_ids
    prompt = start + first + start
    plain = Engine(model).generate([prompt], SamplingParams(max_tokens=24, ignore_eos=True))[0].token_ids
    for max_tokens in range(1, 12):
        engine = Engine(model, block_size=4, speculative_tokens=5)
        out = engine.generate([prompt], SamplingParams(max_tokens=max_tokens, ignore_eos=True))[0]
        assert out.token_ids == plain[:max_tokens] and out.finish_reason == "length"
    stops_inside_a_run = 0
    for stop in dict.fromkeys(plain):
        engine = Engine(model, block_size=4, speculative_tokens=5)
        engine.add_request(prompt, SamplingParams(max_tokens=24, ignore_eos=True, stop_token_ids=[stop]))
        records = [engine.step() for _ in iter(engine.has_unfinished, False)]
        out = engine.output(0)
        assert out.token_ids == plain[:plain.index(stop) + 1] and out.finish_reason == "stop"
        last = records[-1]
        if last.drafts and last.drafts[0].num_accepted + 1 > len(last.sampled):
            stops_inside_a_run += 1  # the model accepted drafts past the stop token; they were dropped
        assert engine.pool.num_free_blocks == engine.num_blocks
    assert stops_inside_a_run > 0


def test_context_limit_is_respected():
    model = tiny_model("qwen3")  # a context of 256 positions
    generator = torch.Generator().manual_seed(4)
    prompt = (random_tokens(12, generator) * 21)[:250]
    params = SamplingParams(max_tokens=20, ignore_eos=True)
    plain = Engine(model).generate([prompt], params)[0]
    spec = Engine(model, block_size=4, speculative_tokens=5).generate([prompt], params)[0]
    assert spec.token_ids == plain.token_ids and len(spec.token_ids) == 6
    assert spec.finish_reason == plain.finish_reason == "context_full"


def test_sampled_requests_decode_without_drafts():
    model = tiny_model("llama")
    prompt = workload()[1]
    sampled = SamplingParams(max_tokens=12, temperature=0.8, seed=5, ignore_eos=True)
    greedy = SamplingParams(max_tokens=12, ignore_eos=True)
    expected = Engine(model).generate([prompt, prompt], [sampled, greedy])
    engine = Engine(model, speculative_tokens=3)
    ids = [engine.add_request(prompt, sampled), engine.add_request(prompt, greedy)]
    records = [engine.step() for _ in iter(engine.has_unfinished, False)]
    assert [engine.output(i).token_ids for i in ids] == [o.token_ids for o in expected]
    assert {d.request_id for r in records for d in r.drafts} == {ids[1]}


def test_records_carry_drafts_through_json():
    model = tiny_model("llama")
    engine = Engine(model, block_size=4, speculative_tokens=3)
    engine.add_request(workload()[1], SamplingParams(max_tokens=10, ignore_eos=True))
    records = [engine.step() for _ in iter(engine.has_unfinished, False)]
    assert any(r.drafts for r in records)
    for record in records:
        again = typed(json.loads(json.dumps(record.to_dict())), StepRecord, "step")
        assert again.drafts == record.drafts and again.chunks == record.chunks
        for chunk, draft in zip([c for c in record.chunks if c.num_drafts], record.drafts):
            assert chunk.token_ids[-chunk.num_drafts:] == draft.draft_token_ids
            assert chunk.kind == "decode" and chunk.num_tokens == 1 + chunk.num_drafts


def test_prompt_lookup_and_greedy_verification():
    assert propose_drafts([1, 2, 3, 9, 1, 2, 3], 2) == [9, 1]  # the 3-gram 1 2 3 seen before
    assert propose_drafts([1, 2, 7, 5, 2, 8, 4, 2], 2) == [8, 4]  # no 3- or 2-gram: the last "2"
    assert propose_drafts([1, 2, 7, 5, 2, 8, 4, 2], 2, min_ngram=2) == []
    assert propose_drafts([4, 6, 6, 6], 3) == [6, 6, 6]  # the run goes on with its period
    assert propose_drafts([5, 1, 2, 1, 2], 3) == [1, 2, 1]
    assert propose_drafts([1, 2, 3], 4) == []
    assert accept([7, 8, 9], [7, 8, 9, 4]) == [7, 8, 9, 4]  # all accepted, plus the bonus token
    assert accept([7, 8, 9], [7, 5, 9, 4]) == [7, 5]  # the first mismatch is corrected
    assert accept([7], [2, 4]) == [2]


def test_bad_settings_are_refused_in_one_sentence():
    model = tiny_model("llama")
    with pytest.raises(EngineError, match="speculative_tokens must be a whole number from 0 to 16"):
        Engine(model, speculative_tokens=-1)
    with pytest.raises(EngineError, match="needs use_cache=True"):
        Engine(model, speculative_tokens=3, use_cache=False)
    with pytest.raises(EngineError, match="1 <= min <= max"):
        Engine(model, speculative_tokens=3, prompt_lookup_min=4)


def test_speculation_with_forked_samples_and_swap_preemption():
    """Drafts meet the other cache features: greedy samples forked from one prompt (their shared
    last block copied on write before drafts go into it) and preemption by swapping."""
    model = tiny_model("llama")
    prompts = workload()
    params = SamplingParams(max_tokens=20, ignore_eos=True)
    plain, _ = run_checked(Engine(model, block_size=4), prompts, params)
    forked = Engine(model, block_size=4, speculative_tokens=3)
    request_id = forked.add_request(prompts[0], SamplingParams(max_tokens=20, ignore_eos=True, n=3))
    while forked.has_unfinished():
        record = forked.step()
        check_pool(forked)
    assert forked.output(request_id).samples == [plain[0]] * 3
    assert forked.stats["accepted_tokens"] > 0
    assert forked.pool.num_free_blocks == forked.num_blocks
    swapped = Engine(model, block_size=4, num_blocks=14, speculative_tokens=3, preemption_mode="swap")
    outputs, records = run_checked(swapped, prompts, params)
    assert outputs == plain
    assert any(e.kind == "swap_out" for r in records for e in r.events)
    assert swapped.pool.num_free_blocks == swapped.num_blocks
    assert record.requests  # the last record still lists the finished samples
