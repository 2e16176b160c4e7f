"""Every session key has one owner, and loading another model clears exactly the lessons' runs."""

from pathlib import Path

import importlib

import pytest

from kvviz.lessons import lecture
from kvviz.lessons.lesson import Lesson
from kvviz.lessons.room_view import InRoom
from kvviz.lessons.stepped import Stepped
from kvviz.ui.session_keys import Keys
from kvviz.lessons.lecture import LECTURE, by_key

from app_tests import click_cleanly, open_lesson


def declared() -> dict:
    """One value under every key the lessons clear, one under a widget of each, and the app's own."""
    keys = {key: 1 for lesson in LECTURE for part in lesson.parts for key in part.clears}
    keys.update({key: 1 for key in lecture.ROOM_KEYS.clears})
    keys.update({"lesson_guess_0_bytes_after_five": 1, "paged_block_size": 8, "spec_k": 4, "batch_count": 16,
                 "strategies_gqa_heads": 2, "strategies_eviction_budget": 16, "paged_fork_n": 3,
                 "paged_swap_num_blocks": 9,
                 "model_source": "bundled", "presenter": True, "bill_layers": 32, "lab_result": "kept"})
    return keys


def test_each_lesson_resets_exactly_its_own_keys():
    for lesson in [*LECTURE, lecture.ROOM_KEYS]:
        session = declared()
        lesson.reset(session)
        gone = set(declared()) - set(session)
        assert all(lesson.cleared(key) for key in gone), lesson
        assert not any(lesson.cleared(key) for key in session), lesson
        assert bool(gone) == any(part.clears for part in getattr(lesson, "parts", [lesson])), lesson


def test_every_key_a_lesson_declares_starts_with_its_one_prefix():
    """A key's prefix names its owner: no lesson's prefix begins another's, and every key a lesson's modules
    declare (cleared or kept) starts with its lesson's prefix."""
    prefixes = [lesson.prefix for lesson in LECTURE] + [lecture.ROOM_PREFIX, *lecture.APP_PREFIXES]
    assert not [(a, b) for a in prefixes for b in prefixes if a != b and b.startswith(a)]
    for lesson in LECTURE:
        for part in lesson.parts:
            assert all(lesson.owns(key) for key in part.clears | set(part.kept) | set(part.made_per_question)), lesson
    assert all(key.startswith(lecture.ROOM_PREFIX) for key in lecture.ROOM_KEYS.clears)


def test_a_model_change_clears_every_run_and_keeps_the_inputs():
    session = declared()
    lecture.reset_lessons(session)
    assert set(session) == {"paged_block_size", "spec_k", "batch_count", "strategies_gqa_heads",
                            "strategies_eviction_budget", "paged_fork_n", "paged_swap_num_blocks", "model_source",
                            "presenter", "bill_layers", "lab_result"}


def test_every_declared_key_has_one_owner():
    for key in declared():
        assert len(lecture.owners(key)) == 1, (key, lecture.owners(key))


def session_keys(at) -> set[str]:
    return set(at.session_state.keys())


RUN_BUTTONS = ("Prefill", "Next token", "Start", "Step")  # the prefill lesson's, then the paged and speculative ones


@pytest.mark.parametrize("path", [lesson.path for lesson in LECTURE])
def test_every_key_a_page_makes_has_one_owner(path):
    at = open_lesson(path)
    for label in RUN_BUTTONS:
        if any(b.label == label and not b.disabled for b in at.button):
            click_cleanly(at, label)
    for key in session_keys(at):
        assert len(lecture.owners(key)) == 1, (path, key, lecture.owners(key))


def load_model_again(at):
    at.text_input(key="model_request").set_value("bundled")
    click_cleanly(at, "Load model")


def test_loading_a_model_leaves_no_paged_key_behind():
    at = open_lesson("lessons/paged_batching.py")
    click_cleanly(at, "Start")
    click_cleanly(at, "Step")
    before = session_keys(at)
    assert {"paged_run", "paged_view_step", "paged_questions"} <= before
    load_model_again(at)
    after = session_keys(at)
    assert not {key for key in after if lecture.cleared(key)}
    assert {key for key in before if not lecture.cleared(key)} <= after  # widgets, model picker, presenter mode
    assert {"paged_block_size", "paged_editor", "model_source", "presenter"} <= after


def test_loading_a_model_reruns_the_linked_prefill_lesson_on_it():
    at = open_lesson("lessons/prefill_decode.py")
    click_cleanly(at, "Prefill")
    click_cleanly(at, "Next token")
    old = at.session_state["lesson_run"]
    before = session_keys(at)
    load_model_again(at)
    # every lesson key went; the page read its link again (?prompt=...&step=1) and ran it anew
    assert at.session_state["lesson_run"] is not old
    assert len(at.session_state["lesson_run"].records) == len(old.records)
    assert {key for key in before if not lecture.cleared(key)} <= session_keys(at)


def test_the_stepped_lessons_are_found():
    assert [lesson.page for lesson in lecture.stepped()] == ["prefill_decode", "paged_batching", "speculative"]


@pytest.mark.parametrize("lesson", lecture.stepped(), ids=[lesson.page for lesson in lecture.stepped()])
def test_the_reset_button_clears_its_lessons_run(lesson):
    run_keys = lesson.keys.run_keys()  # declared once, in the lesson's StepKeys
    at = open_lesson(by_key(lesson.page).path)
    for label in RUN_BUTTONS:
        if any(b.label == label and not b.disabled for b in at.button):
            click_cleanly(at, label)
    assert run_keys & session_keys(at)
    assert all(lecture.cleared(key) for key in run_keys)  # a model change clears the run too
    click_cleanly(at, "Reset")
    assert not run_keys & session_keys(at)


def test_every_lesson_folder_exports_one_lesson_and_the_lecture_lists_it_in_order():
    """A lesson folder whose LESSON the lecture did not list would have no page and keep its run across a model
    change; each module-level LESSON is a Lesson, STEPS a Stepped, KEYS a Keys, in every lesson folder."""
    lessons = Path(lecture.__file__).parent
    folders = {path.parent.name for path in lessons.glob("*/lesson.py")}
    assert folders == {path.name for path in lessons.iterdir() if (path / "__init__.py").exists()}
    assert [lesson.key for lesson in LECTURE if lesson.key in folders] == [lesson.key for lesson in LECTURE[1:]]
    assert folders == {lesson.key for lesson in LECTURE} - {"home"}
    for lesson in LECTURE[1:]:
        assert lesson is importlib.import_module(f"kvviz.lessons.{lesson.key}.lesson").LESSON
        assert isinstance(lesson, Lesson)
        for path in (lessons / lesson.key).glob("*.py"):
            module = importlib.import_module(f"kvviz.lessons.{lesson.key}.{path.stem}")
            for name, kind in (("LESSON", Lesson), ("STEPS", Stepped), ("KEYS", Keys)):
                assert isinstance(getattr(module, name, None), (kind, type(None))), (module.__name__, name)
        state = importlib.import_module(f"kvviz.lessons.{lesson.key}.state") if lesson.stepped else None
        assert lesson.stepped is getattr(state, "STEPS", None), lesson.key


def test_each_stepped_lesson_is_one_object_with_one_key_prefix_and_its_room():
    """A stepped lesson is its Stepped: its page, every key its run and settings leave (one prefix), and what a room
    follows it by; the lecture's rooms are exactly the lessons whose run implements InRoom."""
    for lesson in lecture.stepped():
        assert all(key.startswith(lesson.keys.prefix) for key in lesson.cleared_keys()), lesson.page
        assert isinstance(lesson, InRoom) == by_key(lesson.page).rooms, lesson.page
    assert [lesson.page for lesson in lecture.rooms()] == [lesson.key for lesson in LECTURE if lesson.rooms]


@pytest.mark.parametrize("lesson", lecture.rooms(), ids=[lesson.page for lesson in lecture.rooms()])
def test_a_rooms_lesson_file_round_trips_through_its_lesson(lesson):
    """What a room in Redis carries: the teacher's run as its file's text, read back as a replay at the same step."""
    at = open_lesson(by_key(lesson.page).path)
    for label in RUN_BUTTONS:
        if any(b.label == label and not b.disabled for b in at.button):
            click_cleanly(at, label)
    run = at.session_state[lesson.keys.run]
    export, read = lecture.lesson_files(lesson.page)
    replay = read(export(run))
    assert replay is not run and replay.replay
    assert len(replay.records) == len(run.records) > 1


def test_the_design_pages_worked_example_is_the_lessons_code():
    """docs/design.md shows Speculative decoding's lesson.py and Stepped as the worked example: word for word."""
    code = (Path(lecture.__file__).parent / "speculative" / "state.py").read_text()
    example = code[code.index("class SpeculativeSteps("):code.index("\n\n\ndef lesson()")]
    lesson = (Path(lecture.__file__).parent / "speculative" / "lesson.py").read_text()
    page = (Path(lecture.__file__).parents[2] / "docs" / "design.md").read_text()
    assert example in page and lesson[lesson.index("LESSON = "):].strip() in page


def test_the_sidebars_model_wins_over_the_links_and_the_address_follows_it():
    """Issue 59 item 5: on a link to a lesson on another model, Load model in the sidebar replayed the link's
    lesson on the link's model (twice). Now the model loaded is the sidebar's, the link's prompt and step run
    on it, and ?model= names it."""
    from streamlit.testing.v1 import AppTest

    from app_tests import ROOT

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.query_params.update({"model": "tiny-gemma3", "prompt": "KING:\nWho goes there?", "step": "1"})
    at.run()
    at.switch_page("lessons/prefill_decode.py").run()
    assert at.session_state["model_source"] == "tiny-gemma3"
    for _ in range(2):
        load_model_again(at)
        assert not at.exception
        assert at.session_state["model_source"] == "bundled"
        assert at.query_params["model"] == "bundled"
        lesson = at.session_state["lesson_run"]
        assert lesson.model_info["name"] != "tiny-gemma3" and len(lesson.records) == 2  # the link's step 1, on bundled


@pytest.mark.parametrize("path, first, step", [("lessons/prefill_decode.py", "Prefill", "Next token"),
                                               ("lessons/paged_batching.py", "Start", "Step")])
def test_a_visit_to_another_page_keeps_the_step_in_view(path, first, step):
    """Issue 59 item 5: Next: Memory bill, then Previous, showed "Prefill (step 0 of 47)" while the engine was at
    step 11, and the next click jumped to 12: Streamlit forgot the look-back slider's value while its page was away."""
    at = open_lesson(path)
    click_cleanly(at, first)
    for _ in range(3):
        click_cleanly(at, step)
    lesson = next(each for each in lecture.stepped() if by_key(each.page).path == path)
    assert at.session_state[lesson.keys.view] == 3
    at.switch_page("lessons/memory_bill.py").run()
    at.switch_page(path).run()
    assert not at.exception
    assert at.session_state[lesson.keys.view] == 3
