"""The Speculative lesson draws only from its records and kept texts: export, and replay with no model."""

import json

import pytest

from kvviz.lessons.files import LessonFileError
from kvviz.lessons.speculative.file import MAX_PASSES, export_speculative, import_speculative
from kvviz.lessons.speculative.logic import DEFAULT_PROMPT, SpeculativeLesson

from app_tests import one_sentence, open_lesson, page_view


@pytest.fixture(scope="module")
def run(tiny_lm):
    lesson = SpeculativeLesson.start(tiny_lm, DEFAULT_PROMPT, 4, 24, 4)
    while lesson.step():
        assert lesson.drafts_done == (not lesson.engine.has_unfinished())
    assert lesson.finished and not lesson.plain.has_unfinished()
    assert any(row.num_rejected for row in lesson.draft_steps())  # a rollback to export
    return lesson


def test_every_text_the_page_shows_is_the_tokenizers(run):
    decode = run.engine.tokenizer.decode
    for step, row in enumerate(run.draft_steps()):
        for ids in [row.draft_token_ids, row.added_token_ids, run.output(step), run.output(step, plain=True),
                    *[[t] for t in run.prompt_token_ids + row.draft_token_ids + row.added_token_ids]]:
            assert run.decode(ids) == decode(ids)


def test_export_then_import_gives_equal_records_and_views(run):
    replay, view_step = import_speculative(export_speculative(run, 2).encode())
    assert replay.replay and replay.engine is None and view_step == 2
    as_json = lambda records: json.loads(json.dumps([r.to_dict() for r in records]))  # noqa: E731
    assert as_json(replay.records) == as_json(run.records)
    assert as_json(replay.plain_records) == as_json(run.plain_records)
    assert (replay.texts, replay.prompt_token_ids, replay.settings) == (run.texts, run.prompt_token_ids, run.settings)
    assert replay.finished and not replay.step()
    for step in range(len(run.records)):
        assert replay.summary(step) == run.summary(step)
    assert replay.totals() == run.totals()


def damage(run, change) -> str:
    data = json.loads(export_speculative(run, 0))
    change(data)
    return json.dumps(data)


def drafted(data: dict) -> dict:
    """The first pass that proposed drafts."""
    return next(record for record in data["records"] if record["drafts"] and record["drafts"][0]["draft_token_ids"])


@pytest.mark.parametrize("change, field", [
    (lambda d: d["settings"].update(num_speculative="4"), "settings.num_speculative"),  # a wrong type
    (lambda d: d.update(plain_records=[{}] * (MAX_PASSES + 1)), "plain_records"),  # a huge list
    (lambda d: d.pop("texts"), "texts"),  # a missing field
    (lambda d: drafted(d).update(drafts=drafted(d)["drafts"] * 2), r"records\[\d+\].drafts"),
    (lambda d: drafted(d)["drafts"][0].update(num_accepted=99), r"records\[\d+\].drafts\[0\].num_accepted"),
    (lambda d: d["texts"][0].__setitem__(0, ["a"]), r"texts\[0\]\[0\]\[0\]"),
    (lambda d: d.update(records=[]), r"records \(the number of steps\)"),
    (lambda d: d.update(view_step=99), "view_step"),
    # issue 51: single fields that gave a traceback (StopIteration, MemoryError) or 1.1 GB of memory
    (lambda d: [c.update(num_drafts=0) for c in drafted(d)["chunks"]], r"records\[\d+\].chunks"),
    (lambda d: drafted(d)["requests"][0].update(num_computed_tokens=2**53 - 1),
     r"records\[\d+\].requests\[0\].num_computed_tokens"),
    (lambda d: d["records"][-1]["requests"][0].update(num_computed_tokens=13_000_000),
     r"records\[\d+\].requests\[0\].num_computed_tokens"),
])
def test_damaged_files_are_refused_in_one_sentence_naming_the_field(run, change, field):
    with pytest.raises(LessonFileError, match=f"field {field} ") as refused:
        import_speculative(damage(run, change))
    assert one_sentence(str(refused.value)), str(refused.value)


def test_the_stage_of_many_passes_is_built_in_one_sweep(run):
    """A 4,096-pass file cost 59 CPU s: each pass's summary summed every pass before it. The stage now adds one
    pass to the last; its numbers are still the lesson's own summary at every pass."""
    from kvviz.lessons.speculative.stage import stage_data

    replay, _ = import_speculative(export_speculative(run, 0).encode())
    steps = stage_data(replay, 0)["steps"]
    for step, data in enumerate(steps):
        whole = replay.summary(step)
        assert data["summary"] == {key: whole[key] for key in data["summary"]}


def test_a_replayed_file_renders_the_same_page_with_no_engine():
    live = open_lesson("lessons/speculative.py")
    live.slider(key="spec_max_tokens").set_value(16).run()
    live.button(key="spec_start").click().run()
    live.button(key="spec_to_end").click().run()
    lesson = live.session_state["spec_run"]
    replay, _ = import_speculative(export_speculative(lesson, 0))
    played = open_lesson("lessons/speculative.py")
    played.session_state["spec_run"] = replay
    played.session_state["spec_view"] = len(replay.records) - 1
    played.run()
    assert not played.exception and "Replaying a recorded run" in played.info[0].value
    assert played.button(key="spec_step").disabled and played.button(key="spec_to_end").disabled
    for step in range(len(lesson.records)):
        live.slider(key="spec_view_step").set_value(step + 1).run()  # the slider counts passes from 1
        played.slider(key="spec_view_step").set_value(step + 1).run()
        assert not played.exception
        assert page_view(played) == page_view(live), step
        chips = lambda at: [m.value for m in at.markdown if "title='context'" in m.value]  # noqa: E731
        assert chips(played) == chips(live) != []
