"""A room's answers travel in the teacher's lesson file (kvviz-lesson/4, issue 27), and older files still read."""

import json

import pytest

from kvviz.lessons.files import LESSON_FORMAT, MAX_ROOM_ANSWERS, MAX_ROOM_QUESTIONS, LessonFileError, RoomAnswers
from kvviz.lessons.paged_batching.file import export_paged, import_paged
from kvviz.lessons.paged_batching.logic import DEFAULT_REQUESTS, PagedLesson, RequestSpec
from kvviz.lessons.prefill_decode.file import export_lesson, import_lesson
from kvviz.lessons.prefill_decode.logic import PrefillLesson, LessonSettings, lesson_sampling
from kvviz.lessons.speculative.file import export_speculative, import_speculative
from kvviz.lessons.speculative.logic import SpeculativeLesson

from app_tests import one_sentence

ANSWERS = [RoomAnswers("K7QW2MXP", "Which physical block id will the pool give R2?", "block id", 3, 9.0,
                       [4.0, 9.0, 9.0], exact=True),
           RoomAnswers("K7QW2MXP", "How many bytes after five steps?", "bytes", 6, None, [1000.0])]


@pytest.fixture(scope="module")
def files(tiny_lm):
    """Each engine-driven lesson, a few steps in, with a room's answers, as its exported file."""
    paged = PagedLesson.start(tiny_lm, [RequestSpec(*r) for r in DEFAULT_REQUESTS], 8, 40, True)
    for _ in range(3):
        paged.step()
    prefill = PrefillLesson.start(tiny_lm, LessonSettings("ROMEO:\n", lesson_sampling(max_tokens=4)))
    prefill.prefill()
    speculative = SpeculativeLesson.start(tiny_lm, "KING:\nI am sorry.\nKING:\n", 2, 6, 4)
    speculative.step()
    for lesson in (paged, prefill, speculative):
        lesson.room_answers = list(ANSWERS)
    return {"paged": (export_paged(paged, 2), lambda data: import_paged(data)[0]),
            "prefill": (export_lesson(prefill), import_lesson),
            "speculative": (export_speculative(speculative, 0), lambda data: import_speculative(data)[0])}


@pytest.mark.parametrize("kind", ["paged", "prefill", "speculative"])
def test_the_rooms_answers_are_exported_and_replayed(files, kind):
    text, replay = files[kind]
    data = json.loads(text)
    assert data["format"] == LESSON_FORMAT == "kvviz-lesson/4"
    assert data["room_answers"][0] == {"room": "K7QW2MXP", "question": ANSWERS[0].question, "unit": "block id",
                                       "step": 3, "engine": 9.0, "answers": [4.0, 9.0, 9.0], "exact": True}
    assert replay(text.encode()).room_answers == ANSWERS


@pytest.mark.parametrize("kind", ["paged", "prefill", "speculative"])
def test_a_format_3_file_without_answers_still_replays(files, kind):
    text, replay = files[kind]
    data = json.loads(text)
    data["format"] = "kvviz-lesson/3"
    del data["room_answers"]
    assert replay(json.dumps(data)).room_answers == []


def test_a_format_3_file_with_answers_is_refused_in_one_sentence(files):
    text, replay = files["paged"]
    data = json.loads(text)
    data["format"] = "kvviz-lesson/3"
    with pytest.raises(LessonFileError, match="field room_answers belongs to kvviz-lesson/4 files") as refused:
        replay(json.dumps(data))
    assert one_sentence(str(refused.value))


@pytest.mark.parametrize("bad, field", [({"answers": [-1.0]}, "room_answers[0].answers[0]"),
                                        ({"engine": "nine"}, "room_answers[0].engine"),
                                        ({"who": "a student"}, "room_answers[0].who"),
                                        ({"answers": [1.0] * (MAX_ROOM_ANSWERS + 1)}, "room_answers[0].answers")])
def test_a_bad_answer_is_refused_naming_its_field(files, bad, field):
    text, replay = files["speculative"]
    data = json.loads(text)
    data["room_answers"][0].update(bad)
    with pytest.raises(LessonFileError, match=f"field {field.replace('[', '.').replace(']', '.')}") as refused:
        replay(json.dumps(data))
    assert one_sentence(str(refused.value))


def test_room_answers_at_their_limits_read_in_seconds(files):
    """Issue 35 item 4: 500 questions x 4,000 answers (11 MiB) took 26 s of CPU to upload; the limits
    are now what a class gives, and a file past them is refused before its answers are read."""
    import time

    text, replay = files["paged"]
    data = json.loads(text)
    row = dict(data["room_answers"][0], answers=[float(i) for i in range(MAX_ROOM_ANSWERS)])
    data["room_answers"] = [row] * MAX_ROOM_QUESTIONS
    started = time.process_time()
    assert len(replay(json.dumps(data)).room_answers) == MAX_ROOM_QUESTIONS
    assert time.process_time() - started < 5
    data["room_answers"] = [row] * (MAX_ROOM_QUESTIONS + 1)
    with pytest.raises(LessonFileError, match=f"field room_answers has {MAX_ROOM_QUESTIONS + 1} items"):
        replay(json.dumps(data))


def test_the_answers_chart_has_a_bar_per_answer_or_per_distance_and_room_for_its_labels():
    """The teacher's chart at the reveal (issue 33 item 7): a few distinct answers get a bar each, green where
    right; a room of 60 different guesses is counted by how far each is from the engine's answer."""
    from kvviz.lessons.room_answers import ANSWER_BARS, answer_rows, answers_chart

    rows = answer_rows(9.0, [4.0, 9.0, 9.0], exact=True)  # a block id: right only when exact
    assert rows == [("4", 1, False), ("9", 2, True)]
    guesses = [300_000 * (1 + (i - 30) / 100) for i in range(60)]  # -30% to +29%, one student each
    rows = answer_rows(300_000.0, guesses, exact=False)
    assert len(guesses) > ANSWER_BARS and [label for label, _, _ in rows][1:] == [
        "within 10%", "within a factor of 2", "further off"]
    assert sum(count for _, count, _ in rows) == 60 and rows[0][1] == 3  # -1%, 0, +1% are within 1%
    assert rows[1][1] == 18 and rows[2][1] == 39 and rows[3][1] == 0  # 10% either side, then the rest
    figure = answers_chart("bytes", 300_000.0, [300_000.0, 301_000.0], exact=False)
    assert figure.layout.height >= 200 and figure.layout.xaxis.title.text == "students"
    assert list(figure.data[0].marker.color) == ["#2e9e5b", "#2e9e5b"]  # both within 1%
