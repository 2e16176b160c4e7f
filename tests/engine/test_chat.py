"""Chat prompts: the template applied once (no doubled special tokens), the end-of-turn token found
from the template itself, the engine stopping there, the answer without the template's tokens."""

from dataclasses import replace

import pytest
from transformers import AutoTokenizer

from kvviz import Engine, SamplingParams
from kvviz.engine.chat import chat_answer, chat_params, chat_prompt, has_chat_template, special_token_ids
from kvviz.models import BUNDLED_DIR

from app_tests import one_sentence
from tiny_gguf import CHATML


@pytest.fixture(scope="module")
def chatml_tokenizer():
    """The bundled tokenizer with ChatML's two tokens and template, as SmolLM2's has them."""
    tokenizer = AutoTokenizer.from_pretrained(str(BUNDLED_DIR))
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tokenizer.chat_template = CHATML
    return tokenizer


def test_the_prompt_is_the_template_applied_once(chatml_tokenizer):
    turn = chat_prompt(chatml_tokenizer, "Who is Romeo?")
    im_start, im_end = chatml_tokenizer.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"])
    assert turn.text == "<|im_start|>user\nWho is Romeo?<|im_end|>\n<|im_start|>assistant\n"
    assert turn.token_ids[0] == im_start and turn.token_ids.count(im_start) == 2
    assert chatml_tokenizer.decode(turn.token_ids) == turn.text
    assert im_end in turn.stop_token_ids and {im_start, im_end} <= special_token_ids(chatml_tokenizer)
    system = chat_prompt(chatml_tokenizer, "Who is Romeo?", system="Answer briefly.")
    assert system.text.startswith("<|im_start|>system\nAnswer briefly.<|im_end|>\n")


def test_the_engine_stops_at_the_end_of_the_turn_and_the_answer_drops_special_tokens(chatml_tokenizer, tiny_lm):
    turn = chat_prompt(chatml_tokenizer, "Who is Romeo?")
    params = chat_params(turn, SamplingParams(max_tokens=6, stop_token_ids=[7]))
    assert set(params.stop_token_ids) == {7, *turn.stop_token_ids}
    im_end = chatml_tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert chat_answer(chatml_tokenizer, chatml_tokenizer(" Romeo loves Juliet.")["input_ids"] + [im_end]) \
        == "Romeo loves Juliet."
    prompt = chatml_tokenizer("ROMEO: Who is Juliet?")["input_ids"]  # ids the tiny model's vocabulary holds
    first = Engine(tiny_lm).generate([prompt], SamplingParams(max_tokens=6, ignore_eos=True))[0].token_ids
    ends_on_third = chat_params(replace(turn, stop_token_ids=[first[2]]), SamplingParams(max_tokens=6))
    stopped = Engine(tiny_lm).generate([prompt], ends_on_third)[0]
    assert stopped.token_ids == first[:first.index(first[2]) + 1]  # stops on the end-of-turn id, keeping it


def test_refusals_are_one_sentence(chatml_tokenizer, bundled):
    assert not has_chat_template(bundled.tokenizer)
    for tokenizer, message, words in ((bundled.tokenizer, "hi", "no chat template"),
                                      (chatml_tokenizer, "  ", "empty"),
                                      (chatml_tokenizer, "x" * 5000, "shorter")):
        with pytest.raises(ValueError, match=words) as refused:
            chat_prompt(tokenizer, message)
        assert one_sentence(str(refused.value))


def test_a_chat_lesson_prefills_the_templated_prompt_and_shows_the_answer(chatml_tokenizer, bundled):
    import torch

    from kvviz.lessons.prefill_decode.logic import PrefillLesson, LessonSettings, lesson_sampling
    from kvviz.models import LoadedModel

    from tiny_gguf import tiny_llama

    lm = LoadedModel(tiny_llama(len(chatml_tokenizer)), chatml_tokenizer, torch.device("cpu"), torch.float32,
                     "tiny chat llama", "custom", 256)
    lesson = PrefillLesson.start(lm, LessonSettings("Who is Romeo?", lesson_sampling(max_tokens=3), chat=True))
    assert lesson.token_texts[0] == "<|im_start|>"
    assert "".join(lesson.token_texts) == chat_prompt(chatml_tokenizer, "Who is Romeo?").text
    assert chatml_tokenizer.convert_tokens_to_ids("<|im_end|>") in lesson.settings.sampling.stop_token_ids
    while lesson.next_token() is not None:
        pass
    generated = [token for record in lesson.records for _, token in record.sampled]
    assert len(generated) <= 3 and lesson.answer() == chat_answer(chatml_tokenizer, generated)
    assert PrefillLesson.start(lm,
                               LessonSettings("Who is Romeo?")).answer() is None  # a plain prompt has no answer line
    with pytest.raises(ValueError, match="no chat template") as refused:
        PrefillLesson.start(bundled, LessonSettings("Who is Romeo?", chat=True))
    assert one_sentence(str(refused.value))
