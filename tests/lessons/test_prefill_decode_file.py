"""Predict-then-reveal, export and replay, links that reopen a lesson, separate sessions."""

import json

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from kvviz.engine.errors import EngineError
from kvviz.lessons.files import LESSON_FORMAT, LessonFileError
from kvviz.lessons.prefill_decode import predict
from kvviz.lessons.prefill_decode.file import export_lesson, import_lesson
from kvviz.lessons.prefill_decode.logic import PrefillLesson, LessonSettings, lesson_sampling

from app_tests import ROOT, one_sentence, open_lesson


@pytest.fixture(scope="module")
def lesson(bundled):
    run = PrefillLesson.start(bundled,
                              LessonSettings(prompt="ROMEO:\nBut soft", sampling=lesson_sampling(max_tokens=12),
                                               block_size=4))
    run.prefill()
    return run


def test_questions_are_answered_by_the_engine(lesson):
    bytes_question = predict.ask(lesson, "bytes_after_five")
    blocks_question = predict.ask(lesson, "blocks_after_next")
    tokens = lesson.num_tokens_at(0)
    bytes_question.guess = (tokens + 5) * lesson.records[0].memory.bytes_per_token
    blocks_question.guess = 99
    assert not predict.reveal(bytes_question, lesson)  # not there yet
    for _ in range(5):
        lesson.next_token()
    assert predict.reveal(bytes_question, lesson) and predict.reveal(blocks_question, lesson)
    assert bytes_question.answer == lesson.records[5].memory.token_bytes and bytes_question.correct
    assert blocks_question.answer == len(lesson.records[1].requests[0].block_table) == -(-(tokens + 1) // 4)
    assert not blocks_question.correct
    assert predict.score([bytes_question, blocks_question]) == (1, 2)
    with pytest.raises(ValueError, match="ends before"):
        for _ in range(10):
            predict.ask(lesson, "bytes_after_five")
            lesson.next_token()


def assert_replays_exactly(replay, lesson):
    assert replay.replay and replay.engine is None
    as_json = lambda lessons: json.loads(json.dumps([r.to_dict() for r in lessons]))  # noqa: E731
    assert as_json(replay.records) == as_json(lesson.records)
    assert [r.sampled for r in replay.records] == [r.sampled for r in lesson.records]
    assert replay.visible_records == replay.records[:1]
    while replay.next_token() is not None:
        pass
    assert replay.finished and len(replay.visible_records) == len(lesson.records)
    assert replay.work() == json.loads(json.dumps(lesson.work()))
    assert replay.token_texts == lesson.token_texts
    for step in range(len(lesson.records)):
        original, replayed = lesson.trace(step), replay.trace(step)
        for name in ("keys", "values", "attention"):
            assert np.array_equal(getattr(original, name), getattr(replayed, name))
        assert replay.bill(step, 4) == lesson.bill(step, 4)
        assert replay.traces[step].changed_rows == lesson.traces[step].changed_rows == 0


def test_export_then_replay_gives_the_same_records(lesson):
    assert_replays_exactly(import_lesson(export_lesson(lesson).encode()), lesson)


def test_the_file_keeps_the_lessons_sampling_params(lesson):
    data = json.loads(export_lesson(lesson))
    assert data["format"] == LESSON_FORMAT == "kvviz-lesson/4" and data["settings"]["sampling"]["max_tokens"] == 12
    assert import_lesson(json.dumps(data)).settings == lesson.settings


def test_an_older_format_is_refused_in_one_sentence_naming_it(lesson):
    """kvviz-lesson/2 wrote the sampling fields flat beside the prompt; reading it cost a code path of
    its own, so it is refused, with its version named."""
    data = json.loads(export_lesson(lesson))
    data["format"] = "kvviz-lesson/2"
    with pytest.raises(LessonFileError, match="older format kvviz-lesson/2") as refused:
        import_lesson(json.dumps(data))
    assert one_sentence(str(refused.value))


def test_a_default_length_lesson_exports_small_and_replays_exactly(bundled):
    """Issue 12 item 7: 48 tokens used to export 69 MiB (every step's whole cache) and not replay."""
    from kvviz.lessons.prefill_decode.state import DEFAULTS, EXAMPLE_PROMPTS

    run = PrefillLesson.start(bundled, LessonSettings(prompt=EXAMPLE_PROMPTS[0],
                                               sampling=lesson_sampling(max_tokens=DEFAULTS["lesson_max_tokens"])))
    run.prefill()
    while run.next_token() is not None:
        pass
    assert len(run.records) == 48
    text = export_lesson(run)
    assert len(text) < 5 * 2**20
    assert_replays_exactly(import_lesson(text), run)


def damage(lesson, change):
    data = json.loads(export_lesson(lesson))
    change(data)
    return json.dumps(data)


@pytest.mark.parametrize("change, field", [
    (lambda d: d["model"].update(kv_heads=0), "model.kv_heads"),
    (lambda d: d["model"].update(layers="four"), "model.layers"),
    (lambda d: d["model"].update(layers=200_000), "model.layers"),
    (lambda d: d["model"].update(layers=5), r"traces\[0\].new_keys"),  # shapes disagree with the model
    (lambda d: d["traces"][1].update(attention=d["traces"][0]["attention"]), r"traces\[1\].attention"),
    (lambda d: d.update(prompt_token_ids=[]), "prompt_token_ids"),
    (lambda d: d["settings"]["sampling"].update(max_tokens=10**9), "settings.sampling.max_tokens"),
    (lambda d: d["records"][0]["memory"].update(token_bytes=-5), r"records\[0\].memory.token_bytes"),
    (lambda d: d["records"][1].update(sampled=[[0, "x"]]), r"records\[1\].sampled\[0\]\[1\]"),
    (lambda d: d["token_texts"].pop(), "token_texts"),
    (lambda d: d["twin_records"].append(d["twin_records"][0]), "twin_records"),  # fewer: a twin that stopped early
    (lambda d: d["records"][1]["requests"][0].update(block_table=[10**12]), r"records\[1\].requests\[0\].block_table"),
    (lambda d: d["records"][0]["requests"][0].update(block_table=[0] * 5000),
     r"records\[0\].requests\[0\].block_table"),
])
def test_damaged_fields_are_named_at_import(lesson, change, field):
    with pytest.raises(LessonFileError, match=f"field {field} "):
        import_lesson(damage(lesson, change))


@pytest.mark.parametrize("payload, message", [
    (b"\x80\x04\x95pickle", "not JSON"),
    (b"{\"format\": \"something-else\"}", "not a kvviz lesson"),
    (b"[1, 2, 3]", "not a kvviz lesson"),
    (b"{\"format\": \"kvviz-lesson/1\"}", "not a kvviz lesson"),
    (json.dumps({"format": LESSON_FORMAT, "settings": {"prompt": "x", "evil": 1}}).encode(), "field model is missing"),
    (b" " * (21 * 2**20), "over the"),
    (b"[" * 100_000 + b"]" * 100_000, "nests lists or objects too deeply"),
])
def test_bad_lesson_files_are_refused(payload, message):
    with pytest.raises(LessonFileError, match=message):
        import_lesson(payload)


def test_hostile_record_fields_are_refused(lesson):
    data = json.loads(export_lesson(lesson))
    data["records"][0]["__class__"] = "os.system"
    with pytest.raises(LessonFileError, match=r"field records\[0\].__class__ is not one kvviz writes"):
        import_lesson(json.dumps(data))


def new_session():
    return open_lesson("lessons/prefill_decode.py")


def test_a_link_reopens_the_same_prompt_and_step():
    first = new_session()
    first.text_area(key="lesson_prompt").set_value("JULIET:\nAy me").run()
    next(b for b in first.button if b.label == "Prefill").click().run()
    for _ in range(2):
        next(b for b in first.button if b.label == "Next token").click().run()
    link = dict(first.query_params)
    assert link["prompt"] == ["JULIET:\nAy me"] or link["prompt"] == "JULIET:\nAy me"
    second = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    for key, value in link.items():
        second.query_params[key] = value[0] if isinstance(value, list) else value
    second.run()
    second.switch_page("lessons/prefill_decode.py").run()
    lesson = second.session_state["lesson_run"]
    assert lesson.settings.prompt == "JULIET:\nAy me" and len(lesson.records) == 3
    assert [r.sampled for r in lesson.records] == [r.sampled for r in first.session_state["lesson_run"].records]


def test_two_sessions_do_not_see_each_other():
    one, two = new_session(), new_session()
    one.text_area(key="lesson_prompt").set_value("ROMEO:\nMy lips").run()
    two.text_area(key="lesson_prompt").set_value("KING:\nNow").run()
    for at in (one, two):
        next(b for b in at.button if b.label == "Prefill").click().run()
    next(b for b in one.button if b.label == "Next token").click().run()
    a, b = one.session_state["lesson_run"], two.session_state["lesson_run"]
    assert a is not b and a.engine is not b.engine
    assert len(a.records) == 2 and len(b.records) == 1
    assert a.prompt_token_ids != b.prompt_token_ids


def test_which_block_comes_next_is_answered_by_the_pool(bundled):
    from kvviz.lessons.paged_batching.logic import PagedLesson, RequestSpec

    paged = PagedLesson.start(bundled, [RequestSpec("ROMEO:\nBut soft", 0, 20)], block_size=4,
                              num_blocks=16, enable_prefix_caching=True)
    paged.step()
    rid = paged.request_ids[0]
    question = predict.BlockQuestion(rid, "R1", asked_at=0, guess=2)
    while not predict.reveal_block(question, paged.records) and not paged.finished:
        paged.step()
    table = paged.records[question.answered_at].request(rid).block_table
    assert question.answer == table[-1]  # the block the request really received
    assert question.answer == 2 and question.correct  # fresh pool: blocks go out in order


def open_link(params: dict):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    at.switch_page("lessons/prefill_decode.py").run()
    return at


def long_prompt(bundled, tokens: int) -> str:
    """A prompt of exactly `tokens` tokens, so a lesson fills the 512-token context in a few steps."""
    ids = bundled.tokenizer("ROMEO:\n" + "But soft, what light through yonder window breaks? " * 80)["input_ids"]
    text = bundled.tokenizer.decode(ids[:tokens])
    assert len(bundled.tokenizer(text)["input_ids"]) == tokens
    return text


@pytest.mark.parametrize("step", ["256", "600", "100000000"])
def test_a_link_step_is_clamped_and_costs_bounded_steps(bundled, step):
    """Issue 16 item 1: ?step=100000000 used to call Next token 10^8 times and lift max_tokens past the slider."""
    at = open_link({"prompt": long_prompt(bundled, 500), "step": step})
    assert not at.exception  # no StreamlitValueAboveMaxError from the slider
    lesson = at.session_state["lesson_run"]
    assert at.session_state["lesson_max_tokens"] <= at.slider(key="lesson_max_tokens").max
    assert lesson.finished and lesson.records[-1].requests[0].finish_reason == "context_full"
    assert lesson.engine.step_index == len(lesson.records) <= 256  # steps really run by the engine
    assert f"The link's step {int(step):,} is past the last step" in at.error[0].value


def test_a_link_step_that_is_not_a_number_keeps_its_message():
    at = open_link({"prompt": "JULIET:\nAy me", "step": "abc"})
    assert not at.exception and len(at.session_state["lesson_run"].records) == 1
    assert [e.value for e in at.error] == ["The link's step is not a number; showing the lesson from prefill."]


def test_a_lesson_holds_what_it_can_use_and_keeps_compact_traces(bundled):
    """Issue 16 item 2: the pool was sized to the model's whole context and every step kept the whole cache."""
    run = PrefillLesson.start(bundled,
                              LessonSettings(prompt="ROMEO:\nBut soft", sampling=lesson_sampling(max_tokens=20)))
    prompt = len(run.prompt_token_ids)
    assert run.engine.num_blocks == -(-(prompt + 20) // 16) < -(-bundled.max_context // 16)
    run.prefill()
    for _ in range(3):
        run.next_token()
    assert all(r.trace is None and t.trace is None for r, t in zip(run.records, run.twin_records))
    assert [t.new_keys.shape[1] for t in run.traces] == [prompt, 1, 1, 1]  # only the rows each step added
    assert run.trace(3).keys.shape[1] == prompt + 3
    run.release()
    assert run.engine is None and not run.traces and run.released


def test_a_lesson_follows_one_sequence(bundled):
    with pytest.raises(EngineError, match="set n to 1"):
        PrefillLesson.start(bundled, LessonSettings("ROMEO:", lesson_sampling(max_tokens=2, n=2)))
