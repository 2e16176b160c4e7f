"""The engine's greedy outputs equal transformers' own generate, token for token."""

import pytest
import torch

from kvviz import Engine, SamplingParams

from tiny_models import ARCHS, ENGINE_SETTINGS, MAX_TOKENS, hf_greedy, mixed_prompts, tiny_model


@pytest.fixture(scope="module", params=ARCHS)
def arch_case(request):
    model = tiny_model(request.param)
    prompts = mixed_prompts()
    expected = [hf_greedy(model, p, MAX_TOKENS) for p in prompts]
    return request.param, model, prompts, expected


@pytest.mark.parametrize("setting", ENGINE_SETTINGS)
def test_greedy_identical_to_hf_generate(arch_case, setting):
    arch, model, prompts, expected = arch_case
    engine = Engine(model, **ENGINE_SETTINGS[setting])
    outs = engine.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True))
    assert [o.token_ids for o in outs] == expected, f"{arch} / {setting}"
    if setting == "tight pool" and arch != "mistral":  # mistral's sliding layers give blocks back: room for all
        assert engine.scheduler.num_preemptions > 0
    if setting == "prefix caching":
        # prompts 4 and 5 share 20 tokens and run in the same step: the second reuses the
        # first's full block, written earlier in the very same forward pass
        assert engine.stats["cached_tokens"] == 16
        # a prompt seen before reuses its full blocks' K and V
        again = engine.generate([prompts[4]], SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True))
        assert again[0].token_ids == expected[4]
        assert again[0].num_cached_tokens == 16  # one full 16-token block; never the last token
    if engine.pool is not None:
        engine.pool.check_invariants()
        assert engine.pool.num_free_blocks == engine.num_blocks  # nothing leaked


def test_bundled_model_matches_hf_generate(bundled):
    from transformers import AutoModelForCausalLM

    from kvviz.models import BUNDLED_DIR

    reference = AutoModelForCausalLM.from_pretrained(BUNDLED_DIR, dtype=torch.float32).eval()
    prompts = ["ROMEO:\n", "JULIET:\nO Romeo, Romeo", "First Citizen:\nBefore we proceed"]
    ids = [bundled.tokenizer(p)["input_ids"] for p in prompts]
    expected = [hf_greedy(reference, p, 16) for p in ids]
    outs = Engine(bundled).generate(prompts, SamplingParams(max_tokens=16, ignore_eos=True))
    assert [o.token_ids for o in outs] == expected
    assert all(o.text == bundled.tokenizer.decode(o.token_ids) for o in outs)
