"""The Prefill and decode stage's data on a deep GQA model (issue 32 item 3): the layers folded to a
band, the query heads grouped under the KV head they share, the tokenizer's special tokens flagged.
A small random-weight model (12 layers, 9 query heads over 3 KV heads) so it runs without SmolLM2."""

import json

import pytest

from kvviz.engine.sampling import SamplingParams
from kvviz.lessons.prefill_decode.logic import PrefillLesson, LessonSettings
from kvviz.lessons.prefill_decode.stage import BAND_LAYERS, head_groups, stage_data
from kvviz.models import CustomShape, load_model

# a ChatML-like template written with the bundled tokenizer's one special token, <|endoftext|> (id 0)
TEMPLATE = ("{% for m in messages %}<|endoftext|>{{ m['role'] }}\n{{ m['content'] }}<|endoftext|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|endoftext|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def gqa_lm():
    lm = load_model(shape=CustomShape(num_layers=12, hidden_size=144, num_heads=9, num_kv_heads=3))
    lm.tokenizer.chat_template = TEMPLATE  # this model's own tokenizer (a fresh one per load)
    return lm


def run(lm, prompt: str, chat: bool, tokens: int = 3) -> PrefillLesson:
    lesson = PrefillLesson.start(lm, LessonSettings(prompt, SamplingParams(max_tokens=tokens), chat=chat))
    lesson.prefill()
    for _ in range(tokens - 1):
        lesson.next_token()
    return lesson


def test_a_deep_gqa_model_folds_its_layers_and_groups_its_heads(gqa_lm):
    data = stage_data(run(gqa_lm, "The cache holds", chat=False), step=2)
    assert data["layers"] == 12 and data["band_layers"] == BAND_LAYERS < 12
    assert data["heads"] == 9 and data["head_groups"] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert data["special"] == []
    step = data["steps"][-1]
    assert len(step["attention"]) == 12 and len(step["attention"][0]) == 9  # the strip's layers pick from all


def test_the_chat_templates_special_tokens_are_flagged(gqa_lm):
    lesson = run(gqa_lm, "Why cache keys?", chat=True)
    data = stage_data(lesson, step=0)
    ids = lesson.prompt_token_ids
    assert data["special"] == [position for position, token in enumerate(ids) if token == 0]
    # <|endoftext|>user ... <|endoftext|> <|endoftext|>assistant
    assert len(data["special"]) == 3 and data["special"][0] == 0
    assert all(data["tokens"][p] == "<|endoftext|>" for p in data["special"])
    json.dumps(data)  # plain JSON for the browser


def test_the_bundled_model_is_drawn_whole():
    lm = load_model("bundled")
    data = stage_data(run(lm, "KING:", chat=False, tokens=2), step=1)
    assert data["band_layers"] == data["layers"] == 6
    assert data["head_groups"] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_head_groups_of_mha_mqa_and_mla():
    assert head_groups({"heads": 4, "kv_heads": 4}) == [[0], [1], [2], [3]]
    assert head_groups({"heads": 4, "kv_heads": 1}) == [[0, 1, 2, 3]]
    assert head_groups({"heads": 4, "kv_heads": 4, "kv_lora_rank": 32}) == [[0, 1, 2, 3]]


def test_the_bar_counts_the_lessons_steps_not_only_those_taken(gqa_lm):
    """Issue 33 item 11: "Step 3 of 3" after three of 8 tokens read as the end; the data says the last step."""
    from kvviz.lessons.prefill_decode.room import follower

    lesson = PrefillLesson.start(gqa_lm,
                                 LessonSettings("The cache holds", SamplingParams(max_tokens=8, ignore_eos=True)))
    lesson.prefill()
    assert stage_data(lesson, step=0)["last_step"] == 7  # the prefill samples token 1 of 8
    lesson.next_token()
    lesson.next_token()
    assert stage_data(lesson, step=2)["last_step"] == 7
    copy = follower(lesson, 1)  # a room's follower at the teacher's step 1: the same plan
    assert stage_data(copy, step=1)["last_step"] == 7
    while lesson.next_token() is not None:
        pass
    assert len(lesson.records) == 8 and stage_data(lesson, step=7)["last_step"] == 7


def test_a_lesson_that_ends_early_says_why_its_stop_token_or_the_context():
    """The Done sentence said a chat answer that ended at <|im_end|> had "filled the model's context of
    8192 tokens"; it names the stop token now, and the context only when the context is what filled."""
    from kvviz.hub.fetch import fetched_folder
    from kvviz.lessons.prefill_decode.state import stop_note
    from kvviz.ui.text import plain

    short = load_model(shape=CustomShape(num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2, max_context=24))
    lesson = PrefillLesson.start(short,
                                 LessonSettings("The cache holds keys", SamplingParams(max_tokens=40, ignore_eos=True)))
    lesson.prefill()
    while lesson.next_token() is not None:
        pass
    assert len(lesson.prompt_token_ids) + len(lesson.records) == 24  # the context filled
    assert "filled the model's context of 24 tokens" in stop_note(lesson)
    if fetched_folder("smollm2") is None:
        pytest.skip("SmolLM2 is not fetched here; run `kvviz fetch smollm2` once")
    lesson = PrefillLesson.start(load_model("smollm2"), LessonSettings("What is the capital of France?",
                                                                SamplingParams(max_tokens=24), chat=True))
    lesson.prefill()
    while lesson.next_token() is not None:
        pass
    note = stop_note(lesson)
    assert "Paris" in lesson.answer() and len(lesson.records) < 24
    assert f"ended its turn with “{plain('<|im_end|>')}”" in note and "context" not in note  # markdown


def test_a_lesson_that_ends_before_the_steps_asked_for_tells_the_stage_so():
    """Issue 59 item 8: Play on a chat model's lesson went from "Step 17 of 47" to "Step 18 of 18" without a word.
    The stage gets the step the lesson was to end at beside the one it ends at (stage.js names the difference)."""
    lm = load_model(shape=CustomShape(num_layers=2, hidden_size=64, num_heads=2, num_kv_heads=1, max_context=24))
    lesson = PrefillLesson.start(lm, LessonSettings("The cache holds keys and values", SamplingParams(max_tokens=48,
                                                                                               ignore_eos=True)))
    lesson.prefill()
    assert stage_data(lesson, 0)["asked_last_step"] == stage_data(lesson, 0)["last_step"] == 47
    while not lesson.finished:
        lesson.next_token()
    data = stage_data(lesson, len(lesson.records) - 1)
    assert data["last_step"] == len(lesson.records) - 1 < data["asked_last_step"] == 47  # the context filled first
