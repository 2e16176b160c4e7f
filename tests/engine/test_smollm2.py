"""SmolLM2-135M-Instruct (30 layers, 9 query heads over 3 KV heads), fetched by `kvviz fetch smollm2`:
the engine's greedy tokens equal transformers' generate with prefix caching, chunked prefill and
a forced preemption, and a chat question gets its answer. Skipped where it was not fetched
(scripts/test.sh fetches it once)."""

import pytest

from kvviz import Engine, SamplingParams, load_model
from kvviz.engine.chat import chat_answer, chat_params, chat_prompt
from kvviz.hub.fetch import fetch_command, fetched_folder

from tiny_models import hf_greedy

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(fetched_folder("smollm2") is None,
                                 reason=f"SmolLM2 is not fetched here; run `{fetch_command('smollm2')}` once")]

MAX_TOKENS = 12
# A pool these requests fill (3 prompts of about 40 tokens, the chat answer's 48): an engine sized from
# free memory zeroes about 6 GB of cache for SmolLM2 first (up to 64 whole 8,192-token contexts).
POOL = dict(num_blocks=64)
QUESTIONS = ("What is the capital of France? Answer in one sentence.", "Name three colours.",
             "Why is the sky blue?")
ENGINE_SETTINGS = {
    "prefix caching": POOL,  # the template's system turn is a prefix every prompt shares
    "chunked prefill": dict(POOL, max_num_batched_tokens=16),
    "forced preemption": dict(num_blocks=24, block_size=4),  # one request fits, three do not
}


@pytest.fixture(scope="module")
def smollm2():
    from transformers import AutoModelForCausalLM

    lm = load_model("smollm2")
    prompts = [chat_prompt(lm.tokenizer, question).token_ids for question in QUESTIONS]
    reference = AutoModelForCausalLM.from_pretrained(str(fetched_folder("smollm2"))).eval()  # untouched by the engine
    expected = [hf_greedy(reference, prompt, MAX_TOKENS) for prompt in prompts]
    return lm, prompts, expected


def test_the_shape_a_lecture_shows(smollm2):
    info = smollm2[0].describe()
    assert (info["layers"], info["heads"], info["kv_heads"], info["head_dim"]) == (30, 9, 3, 64)
    assert round(info["parameters"] / 1e6, 1) == 134.5


@pytest.mark.parametrize("setting", ENGINE_SETTINGS)
def test_greedy_identical_to_hf_generate(smollm2, setting):
    lm, prompts, expected = smollm2
    engine = Engine(lm, **ENGINE_SETTINGS[setting])
    outs = engine.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True))
    assert [out.token_ids for out in outs] == expected, setting
    if setting == "prefix caching":
        assert engine.stats["cached_tokens"] >= 2 * 16  # the shared system turn's full blocks, twice
    if setting == "forced preemption":
        assert engine.scheduler.num_preemptions > 0


def test_a_chat_question_is_answered_and_stops_at_the_end_of_its_turn(smollm2):
    lm = smollm2[0]
    turn = chat_prompt(lm.tokenizer, QUESTIONS[0])
    assert lm.tokenizer.convert_ids_to_tokens(turn.stop_token_ids) == ["<|im_end|>"]
    out = Engine(lm, **POOL).generate([turn.token_ids], chat_params(turn, SamplingParams(max_tokens=48)))[0]
    assert out.token_ids[-1] == turn.stop_token_ids[0] and len(out.token_ids) < 48
    answer = chat_answer(lm.tokenizer, out.token_ids)
    assert "Paris" in answer and "<|im_end|>" not in answer
