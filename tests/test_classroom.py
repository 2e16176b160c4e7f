"""Predict-then-reveal, export and replay, links that reopen a lesson, separate sessions."""

import json

import pytest
from streamlit.testing.v1 import AppTest

from conftest import ROOT, open_lesson
from kvviz import predict
from kvviz.lesson import Lesson, LessonFileError, LessonSettings, export_lesson, import_lesson


@pytest.fixture(scope="module")
def lesson(bundled):
    run = Lesson.start(bundled, LessonSettings(prompt="ROMEO:\nBut soft", max_tokens=12, block_size=4))
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


def test_export_then_replay_gives_the_same_records(lesson):
    text = export_lesson(lesson)
    replay = import_lesson(text.encode())
    assert replay.replay and replay.engine is None
    assert json.loads(json.dumps([r.to_dict() for r in replay.records])) == json.loads(text)["records"]
    assert replay.visible_records == replay.records[:1]
    while replay.next_token() is not None:
        pass
    assert replay.finished and len(replay.visible_records) == len(lesson.records)
    assert replay.work() == json.loads(json.dumps(lesson.work()))
    step = len(lesson.records) - 2
    assert replay.bill(step, 4) == lesson.bill(step, 4)


@pytest.mark.parametrize("payload, message", [
    (b"\x80\x04\x95pickle", "not JSON"),
    (b"{\"format\": \"something-else\"}", "not a kvviz lesson"),
    (b"[1, 2, 3]", "not a kvviz lesson"),
    (json.dumps({"format": "kvviz-lesson/1", "settings": {"prompt": "x", "evil": 1}}).encode(), "damaged"),
    (b" " * (51 * 2**20), "over the"),
])
def test_bad_lesson_files_are_refused(payload, message):
    with pytest.raises(LessonFileError, match=message):
        import_lesson(payload)


def test_hostile_record_fields_are_refused(lesson):
    data = json.loads(export_lesson(lesson))
    data["records"][0]["__class__"] = "os.system"
    with pytest.raises(LessonFileError, match="damaged"):
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
    lesson = second.session_state["lesson"]
    assert lesson.settings.prompt == "JULIET:\nAy me" and len(lesson.records) == 3
    assert [r.sampled for r in lesson.records] == [r.sampled for r in first.session_state["lesson"].records]


def test_two_sessions_do_not_see_each_other():
    one, two = new_session(), new_session()
    one.text_area(key="lesson_prompt").set_value("ROMEO:\nMy lips").run()
    two.text_area(key="lesson_prompt").set_value("KING:\nNow").run()
    for at in (one, two):
        next(b for b in at.button if b.label == "Prefill").click().run()
    next(b for b in one.button if b.label == "Next token").click().run()
    a, b = one.session_state["lesson"], two.session_state["lesson"]
    assert a is not b and a.engine is not b.engine
    assert len(a.records) == 2 and len(b.records) == 1
    assert a.prompt_token_ids != b.prompt_token_ids


def test_which_block_comes_next_is_answered_by_the_pool(bundled):
    from kvviz.paged_lesson import PagedLesson, RequestSpec

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
