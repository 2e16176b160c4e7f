"""Decodes are grouped by context length for attention; outputs stay those of transformers."""

import pytest
import torch

from kvviz import Engine, SamplingParams
from kvviz.engine.batch import MIN_GROUP, build_step_batch, by_context_length
from tiny_models import VOCAB, hf_greedy, tiny_model


def varied_prompts(num, seed=3):
    generator = torch.Generator().manual_seed(seed)
    lengths = [2 + (i * 37) % 90 for i in range(num)]  # 2 to 91 tokens, shuffled
    return [torch.randint(0, VOCAB - 1, (n,), generator=generator).tolist() for n in lengths]


def test_groups_hold_contexts_within_a_factor_of_two():
    engine = Engine(tiny_model("llama"))
    for prompt in varied_prompts(40):
        engine.add_request(prompt, SamplingParams(max_tokens=4, ignore_eos=True))
    engine.step()  # every prompt in one step
    chunks = engine.scheduler.schedule()  # 40 decodes of 3 to 92 tokens of context
    members = list(range(len(chunks)))
    groups = by_context_length(chunks, members)
    assert sorted(i for g in groups for i in g) == members  # each decode exactly once
    assert len(groups) > 1
    for group in groups:
        assert group == sorted(group)  # flat order inside a group
        ends = [chunks[i].end for i in group]
        assert len(group) >= MIN_GROUP
        # a group is a factor-of-two band, widened only to reach MIN_GROUP rows
        assert max(ends) < 2 * min(ends) or len([e for e in ends if 2 * e > max(ends)]) < MIN_GROUP
    batch = build_step_batch(chunks, engine.cache, engine.block_size, engine.device)
    padded_keys = sum(g.key_pos.numel() for g in batch.groups)
    one_group_keys = len(chunks) * max(len(g.key_pos[0]) for g in batch.groups)
    assert padded_keys < 0.8 * one_group_keys  # the point of grouping: fewer padded keys read


@pytest.mark.parametrize("arch", ["llama", "gemma2", "qwen3"])
def test_grouped_decodes_match_hf_generate(arch):
    model = tiny_model(arch)
    prompts = varied_prompts(24)
    expected = [hf_greedy(model, p, 6) for p in prompts]
    engine = Engine(model, block_size=4)
    outs = engine.generate(prompts, SamplingParams(max_tokens=6, ignore_eos=True))
    assert [o.token_ids for o in outs] == expected
    engine.pool.check_invariants()
