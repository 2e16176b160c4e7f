"""Issue 25, the lesson-file items: what a crafted file can make a replaying page do. One test per cause:
one sentence naming the field, no traceback, and where the cause was work, the refusal before it."""

import base64
import json
import time

import numpy as np
import pytest

from kvviz.lessons.cache_strategies.file import export_strategies, import_strategies
from kvviz.lessons.cache_strategies.figures import bill_waterfall, kl_per_step, memory_per_step, time_per_step
from kvviz.lessons.cache_strategies.logic import compare_strategies, lesson_specs
from kvviz.lessons.cache_strategies.state import EXAMPLE_PROMPT, comparison
from kvviz.lessons.files import LessonFileError
from kvviz.lessons.paged_batching.file import export_paged, import_paged
from kvviz.lessons.paged_batching.logic import DEFAULT_REQUESTS, PagedLesson, RequestSpec
from kvviz.lessons.prefill_decode import figures, predict
from kvviz.lessons.prefill_decode.file import MAX_REPLAY_TOKENS, MODEL_LIMITS, export_lesson, import_lesson
from kvviz.lessons.prefill_decode.logic import PrefillLesson, LessonSettings, lesson_sampling
from kvviz.lessons.speculative.file import export_speculative, import_speculative
from kvviz.lessons.speculative.logic import DEFAULT_PROMPT, SpeculativeLesson
from kvviz.ui.text import chart_text, plain

from app_tests import one_sentence


@pytest.fixture(scope="module")
def lesson(bundled):
    run = PrefillLesson.start(bundled,
                              LessonSettings(prompt="ROMEO:\nBut soft", sampling=lesson_sampling(max_tokens=8)))
    run.prefill()
    while run.next_token() is not None:
        pass
    return run


@pytest.fixture(scope="module")
def short(bundled):
    """Two steps: room in a file's 20 MiB for the longest prompt a replay takes."""
    run = PrefillLesson.start(bundled, LessonSettings(prompt="ROMEO:", sampling=lesson_sampling(max_tokens=2)))
    run.prefill()
    run.next_token()
    return run


def refused(data, read=import_lesson) -> str:
    """The sentence a crafted file gets: one, printable (a page can show it), with no traceback."""
    with pytest.raises(LessonFileError) as refusal:
        read(data)
    message = str(refusal.value)
    assert one_sentence(message) and "Traceback" not in message, message
    message.encode("utf-8")  # a lone surrogate in the sentence itself would fail the page that shows it
    return message


def encoded(shape) -> str:
    return base64.b64encode(np.full(shape, 0.5, dtype="<f4").tobytes()).decode("ascii")


def reshaped(lesson, layers: int, heads: int, kv_heads: int, head_dim: int, prompt_tokens: int | None = None) -> dict:
    """The lesson's file with a model summary of another shape, every trace made to agree with it,
    so that only a bound on the shape can refuse it."""
    data = json.loads(export_lesson(lesson))
    prompt = prompt_tokens or len(data["prompt_token_ids"])
    data["model"].update(layers=layers, heads=heads, kv_heads=kv_heads, head_dim=head_dim, v_head_dim=head_dim,
                         max_context=2 * prompt)
    sampled = len(data["token_texts"]) - len(data["prompt_token_ids"])
    data["prompt_token_ids"] = (data["prompt_token_ids"] * prompt)[:prompt]
    data["token_texts"] = ["a"] * (prompt + sampled)
    for step, trace in enumerate(data["traces"]):
        new = prompt if step == 0 else 1
        trace["new_keys"] = trace["new_values"] = encoded((layers, new, kv_heads, head_dim))
        trace["attention"] = encoded((layers, heads, prompt + step))
        trace["prompt_attention"] = None
    return data


# ---- item 2: a model summary that makes the views quadratic or huge --------------------------
def test_a_file_claiming_a_thousand_heads_is_refused_before_any_view(lesson):
    data = json.dumps(reshaped(lesson, 1, 1024, 1024, 2))
    assert len(data) < 2 * 2**20  # a small file: the 20 MiB limit does not stop it
    started = time.perf_counter()
    message = refused(data)
    assert time.perf_counter() - started < 5
    assert "field model.heads is 1024, outside 1 to 256" in message


def test_the_attention_view_is_not_quadratic_in_kv_heads():
    """One line between KV-head groups, set at once: 256 heads took 18 s of CPU, added one at a time."""
    weights = np.random.default_rng(0).random((256, 40), dtype=np.float32)
    started = time.process_time()
    fig = figures.attention_by_head(weights, 256, [f"t{i}" for i in range(40)], 0)
    fig.to_json()
    assert time.process_time() - started < 5
    assert len(fig.layout.shapes) == 255


@pytest.mark.parametrize("layers, heads, kv_heads, head_dim, prompt", [  # prompts as long as 20 MiB allow
    (MODEL_LIMITS["layers"], 1, 1, 1, MAX_REPLAY_TOKENS - 2),  # the cache grid: layers x tokens cells
    (1, MODEL_LIMITS["heads"], MODEL_LIMITS["kv_heads"], 1, 2048),  # attention: heads x tokens, a line per group
    (1, 1, 1, MODEL_LIMITS["head_dim"], 1024),  # keys and values: tokens x head_dim
])
def test_every_view_of_a_file_at_the_limits_draws_in_seconds(short, layers, heads, kv_heads, head_dim, prompt):
    replay = import_lesson(json.dumps(reshaped(short, layers, heads, kv_heads, head_dim, prompt)))
    step = len(replay.records) - 1
    started = time.process_time()
    trace = replay.trace(step)
    tokens = replay.num_tokens_at(step)
    for fig in (figures.cache_growth(replay.entered_step(step), layers),
                figures.kv_heatmap(trace.keys[0, :, 0], "K", 0, 0, 1, 0, replay.token_texts[:tokens]),
                figures.attention_by_head(trace.attention[0], kv_heads, replay.token_texts, 0),
                figures.work_saved(replay.work())):
        fig.to_json()
    replay.bill(step, 4)
    assert time.process_time() - started < 20


def test_a_prompt_longer_than_a_replay_holds_is_refused(lesson):
    data = json.loads(export_lesson(lesson))
    data["prompt_token_ids"] = [1] * (MAX_REPLAY_TOKENS + 1)
    assert "field prompt_token_ids has 4097 items" in refused(json.dumps(data))


def test_a_pool_the_stage_would_draw_block_by_block_is_refused(lesson):
    data = json.loads(export_lesson(lesson))
    data["records"][0]["memory"]["allocated_bytes"] = 2**52  # the stage draws every block of the pool
    assert "field records[0].memory.allocated_bytes makes a pool of more than" in refused(json.dumps(data))


# ---- item 3: file text is text --------------------------------------------------------------
LINK = "![p](http://kvviz.invalid/x.png) [Log in again](http://kvviz.invalid/login) www.kvviz.invalid a@kvviz.invalid"


def test_plain_text_gives_markdown_no_address_to_link():
    """GitHub-flavoured markdown links a bare address found after the escapes are read: an escaped
    'http\\://' still became a link in every viewer's page."""
    shown = plain(LINK).replace("\\", "")  # what the markdown reads, once its escapes are undone
    for address in ("http://", "www.", "a@k"):
        assert address not in shown
    assert shown.replace("\u2060", "") == LINK  # it reads as typed
    assert chart_text('<a href="http://x">y</a> &lt;') == '&lt;a href="http://x"&gt;y&lt;/a&gt; &amp;lt;'


def test_strategy_labels_from_a_file_are_text_in_every_chart(tiny_lm):
    settings = {"max_tokens": 3, "window": 4, "group_size": 8, "residual": 0, "timing_runs": 1}
    results = compare_strategies(tiny_lm, EXAMPLE_PROMPT, 3, lesson_specs(4, 8, 0, tiny_lm.max_context), 1)
    pieces = [["x"] * len(r.token_ids) for r in results]
    data = json.loads(export_strategies(comparison(results, "tiny", EXAMPLE_PROMPT, settings, pieces)))
    for result in data["results"]:
        result["label"] += ' <a href="http://kvviz.invalid/">log in</a>'
        for item in result["final_bill"]["differences"]:
            item["name"] = '<a href="http://kvviz.invalid/">bill</a>'
    replayed = import_strategies(json.dumps(data))["results"]
    paged = next(r for r in replayed if r.strategy == "paged")
    for fig in (memory_per_step(replayed), time_per_step(replayed), kl_per_step(replayed),
                bill_waterfall(paged.final_bill, paged.label, "#000")):
        assert "<a href" not in fig.to_json() and "&lt;a href" in fig.to_json()


# ---- item 12: half a character ----------------------------------------------------------------
def test_a_lone_surrogate_in_a_model_name_or_token_text_is_refused(lesson, tiny_lm):
    for change, field in ((lambda d: d["model"].update(name="gpt2 \ud800"), "model.name"),
                          (lambda d: d["token_texts"].__setitem__(1, "\udfff"), r"token_texts[1]")):
        data = json.loads(export_lesson(lesson))
        change(data)
        message = refused(json.dumps(data))  # JSON's "\ud800" escape: valid JSON, half a character
        assert f"field {field} holds a lone surrogate" in message
    speculative = SpeculativeLesson.start(tiny_lm, DEFAULT_PROMPT, 2, 4, 4)
    while speculative.step():
        pass
    data = json.loads(export_speculative(speculative, 0))
    data["settings"]["prompt"] = "KING:\ud800"
    assert "field settings.prompt holds a lone surrogate" in refused(json.dumps(data), import_speculative)
    paged = PagedLesson.start(tiny_lm, [RequestSpec(*r) for r in DEFAULT_REQUESTS[:1]], 8, 12, True)
    paged.step()
    data = json.loads(export_paged(paged, 0))
    data["records"][0]["__\ud800"] = 1  # an unknown key is named in the sentence: it must print
    assert "field records[0].__\\ud800 is not one kvviz writes" in refused(json.dumps(data), import_paged)


# ---- item 13: fields the pages index --------------------------------------------------------
def test_steps_that_lose_the_lessons_request_are_refused_before_predict(lesson):
    data = json.loads(export_lesson(lesson))
    for record in data["records"][1:]:
        record["requests"] = []
    assert "field records[1].requests holds 0 requests where a lesson follows one" in refused(json.dumps(data))
    replay = import_lesson(export_lesson(lesson))  # the same steps with their request: Predict answers
    question = predict.ask(replay, "blocks_after_next")
    replay.next_token()
    assert predict.reveal(question, replay) and question.answer >= 1


def test_a_strategy_without_an_option_the_page_reads_is_refused(tiny_lm):
    settings = {"max_tokens": 3, "window": 4, "group_size": 8, "residual": 0, "timing_runs": 1}
    results = compare_strategies(tiny_lm, EXAMPLE_PROMPT, 3, lesson_specs(4, 8, 0, tiny_lm.max_context), 1)
    data = json.loads(export_strategies(comparison(results, "tiny", EXAMPLE_PROMPT, settings,
                                                   [["x"] * len(r.token_ids) for r in results])))
    paged = next(i for i, r in enumerate(data["results"]) if r["strategy"] == "paged")
    del data["results"][paged]["options"]["num_blocks"]
    message = refused(json.dumps(data), import_strategies)
    assert f"field results[{paged}].options.num_blocks is missing" in message
