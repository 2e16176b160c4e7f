"""The Paged lesson draws only from its records: its numbers, its export, its replay with no model."""

import json

import pytest

from kvviz.lessons.files import LessonFileError
from kvviz.lessons.paged_batching.file import MAX_STEPS, export_paged, import_paged
from kvviz.lessons.paged_batching.logic import DEFAULT_REQUESTS, PagedLesson, RequestSpec
from kvviz.lessons.prefill_decode.file import export_lesson, import_lesson
from kvviz.lessons.prefill_decode.logic import PrefillLesson, LessonSettings, lesson_sampling

from app_tests import click_cleanly, one_sentence, open_lesson, page_view

SPECS = [RequestSpec(*request) for request in DEFAULT_REQUESTS]


@pytest.fixture(scope="module")
def run(tiny_lm):
    """The default requests on a pool of 12 blocks: too small for all of them, so some are preempted."""
    lesson = PagedLesson.start(tiny_lm, SPECS, block_size=8, num_blocks=12, enable_prefix_caching=True)
    finished = []
    while lesson.step() is not None:
        finished.append(lesson.finished == (not lesson.engine.has_unfinished()))
    assert all(finished) and lesson.finished
    return lesson


def test_the_numbers_come_from_the_records_and_match_the_engine(run):
    last = len(run.records) - 1
    assert run.num_preemptions(last) == run.engine.scheduler.num_preemptions > 0
    assert (run.block_size, run.num_blocks) == (run.engine.block_size, run.engine.num_blocks)
    for step, record in enumerate(run.records):
        events = sum(e.kind == "preempt" for r in run.records[:step + 1] for e in r.events)
        assert run.num_preemptions(step) == events
        assert run.texts[step] == {r.request_id: run.engine.tokenizer.decode(r.output_token_ids)
                                   for r in record.requests}
    assert run.prefix_stats(last)["cached_tokens"] > 0  # R2 and R4 share R1's system prompt


def test_export_then_import_gives_equal_records_and_views(run):
    replay, view_step = import_paged(export_paged(run, view_step=7).encode())
    assert replay.engine is None and replay.replay and view_step == 7
    as_json = lambda records: json.loads(json.dumps([r.to_dict() for r in records]))  # noqa: E731
    assert as_json(replay.records) == as_json(run.records)
    assert (replay.texts, replay.request_ids, replay.prompt_lengths, replay.specs) == \
           (run.texts, run.request_ids, run.prompt_lengths, run.specs)
    assert replay.finished and not replay.can_step and replay.step() is None
    for step in range(len(run.records)):
        assert replay.reservation_comparison(step) == run.reservation_comparison(step)
        assert replay.prefix_stats(step) == run.prefix_stats(step)
        assert replay.pool_blocks(step) == run.pool_blocks(step)
        assert replay.num_preemptions(step) == run.num_preemptions(step)


def damage(run, change) -> str:
    data = json.loads(export_paged(run, 0))
    change(data)
    return json.dumps(data)


def first_with_events(data: dict) -> dict:
    return next(record for record in data["records"] if record["events"])


@pytest.mark.parametrize("change, field", [
    (lambda d: d["settings"].update(block_size="8"), "settings.block_size"),  # a wrong type
    (lambda d: d["settings"].update(num_blocks=10**6), "settings.num_blocks"),
    (lambda d: d.update(records=[{}] * (MAX_STEPS + 1)), "records"),  # a huge list, refused by its length
    (lambda d: d["specs"].extend([d["specs"][0]] * 300), "specs"),
    (lambda d: d.pop("view_step"), "view_step"),  # a missing field
    (lambda d: d["settings"].pop("enable_prefix_caching"), "settings.enable_prefix_caching"),
    (lambda d: d["specs"][0].update(prompt=5), r"specs\[0\].prompt"),
    (lambda d: first_with_events(d)["events"][0].update(block_ids=[12]), r"records\[\d+\].events\[0\].block_ids"),
    (lambda d: d["records"][2]["requests"][0].update(request_id=99), r"records\[2\].requests\[0\].request_id"),
    (lambda d: d["records"][1]["requests"][0].update(num_preemptions=-1),
     r"records\[1\].requests\[0\].num_preemptions"),
    (lambda d: d["texts"].pop(), "texts"),
    (lambda d: d["texts"][0].append([0, ["not", "text"]]), r"texts\[0\]\[\d+\]\[1\]"),
    (lambda d: d.update(view_step=10**6), "view_step"),
    (lambda d: d["records"][0].update(__class__="os.system"), r"records\[0\].__class__"),
    (lambda d: d["records"][1]["chunks"][0].update(request_id=999), r"records\[1\].chunks\[0\].request_id"),  # issue 51
])
def test_damaged_files_are_refused_in_one_sentence_naming_the_field(run, change, field):
    with pytest.raises(LessonFileError, match=f"field {field} ") as refused:
        import_paged(damage(run, change))
    assert one_sentence(str(refused.value)), str(refused.value)


def test_each_page_refuses_the_other_lessons_file(run, tiny_lm):
    settings = LessonSettings(prompt="ROMEO:\nBut soft", sampling=lesson_sampling(max_tokens=3), block_size=4)
    first = PrefillLesson.start(tiny_lm, settings)
    first.prefill()
    with pytest.raises(LessonFileError, match="holds the “Prefill and decode” lesson") as refused:
        import_paged(export_lesson(first))
    assert one_sentence(str(refused.value))
    with pytest.raises(LessonFileError, match="holds the “Paged cache and batching” lesson"):
        import_lesson(export_paged(run, 0))
    old_file = json.loads(export_lesson(first))
    del old_file["lesson"]  # written before the other lessons could export: still the first lesson's
    assert import_lesson(json.dumps(old_file)).records[0].to_dict() == first.records[0].to_dict()


# ---- the page ------------------------------------------------------------------------------------
def test_a_replayed_file_renders_the_same_page_with_no_engine():
    live = open_lesson("lessons/paged_batching.py")
    live.slider(key="paged_num_blocks").set_value(12).run()
    click_cleanly(live, "Start")
    click_cleanly(live, "Run to the end")
    lesson = live.session_state["paged_run"]
    last = len(lesson.records) - 1
    preempted = next(s for s in range(last + 1) if lesson.num_preemptions(s))
    metrics = {m.label: m.value for m in live.metric}
    assert metrics["Preemptions so far"] == str(lesson.engine.scheduler.num_preemptions) != "0"

    replay, _ = import_paged(export_paged(lesson, last))
    played = open_lesson("lessons/paged_batching.py")
    played.session_state["paged_run"] = replay
    played.session_state["paged_view_step"] = last
    played.run()
    assert not played.exception and "Replaying a recorded run" in played.info[0].value
    assert all(b.disabled for b in played.button if b.label in ("Step", "Run to the end"))
    for step in (0, preempted, last // 2, last):
        live.slider(key="paged_view_step").set_value(step).run()
        played.slider(key="paged_view_step").set_value(step).run()
        assert not played.exception
        assert page_view(played) == page_view(live), step
        shown = {m.label: m.value for m in played.metric}
        assert shown["Preemptions so far"] == str(replay.num_preemptions(step))
        assert shown["Running requests"] == str(replay.reservation_comparison(step)["requests"])


def test_block_tables_say_so_when_no_request_holds_blocks(run):
    from kvviz.lessons.paged_batching.figures import block_tables

    labels = {spec_id: f"R{spec_id}" for spec_id in range(len(SPECS))}
    last, busy = run.records[-1], max(run.records, key=lambda r: sum(bool(q.block_table) for q in r.requests))
    assert not any(q.block_table for q in last.requests)  # the run ends with every request finished
    empty = block_tables(last, labels, 8)
    assert [a.text for a in empty.layout.annotations] == ["No request holds blocks at this step"]
    full = block_tables(busy, labels, 8)
    assert not full.layout.annotations and len(full.data) == sum(len(q.block_table) for q in busy.requests)


def test_prefix_hit_rate_counts_every_admission_after_a_preemption(run):
    """A request recomputed after a preemption is looked up in the prefix cache again. The rate
    must count both admissions' hits (the events table lists both), not only the latest."""
    last = len(run.records) - 1
    hit_events = [e for r in run.records for e in r.events if e.kind == "prefix_hit"]
    readmitted = {e.request_id for e in hit_events if sum(x.request_id == e.request_id for x in hit_events) > 1}
    assert readmitted, "the fixture's run should re-admit a request that hits the cache twice"
    stats = run.prefix_stats(last)
    assert stats["cached_tokens"] == sum(len(e.block_ids) for e in hit_events) * run.block_size
    assert stats["blocks_saved"] == sum(len(e.block_ids) for e in hit_events)
    assert 0 < stats["hit_rate"] < 1
    assert stats["looked_up_tokens"] > sum(run.prompt_lengths.values())  # a recompute looks up its output too


def test_pool_grid_and_schedule_axes_show_only_real_rows_and_whole_tokens(run):
    """A one-row pool grid had a '-1' row above it (autorange padded the range), and the scheduler
    chart labelled a step of 2 tokens 0, 0.5, 1, 1.5, 2."""
    from kvviz.lessons.paged_batching.figures import pool_grid, schedule_timeline

    blocks = run.pool_blocks(0)  # the fixture's pool: 12 blocks, one row of 16
    grid = pool_grid(blocks, {}, columns=16)
    assert grid.layout.yaxis.autorange is None and sorted(grid.layout.yaxis.range) == [-0.6, 0.6]
    decodes = [r for r in run.records if 0 < r.num_tokens_run <= 4][-3:]
    timeline = schedule_timeline(decodes, {})
    assert timeline.layout.xaxis.dtick == 1 and timeline.layout.uniformtext.mode == "hide"


def test_generated_text_keeps_requests_that_finished_earlier(run):
    """'Generated so far' at the last step listed only the request that finished last."""
    last = len(run.records) - 1
    shown = run.texts_so_far(last)
    assert set(shown) == set(run.request_ids.values())  # every request, finished or not
    assert all(state == "finished" and text for state, text in shown.values())
    for rid in shown:  # each keeps the text it had when it finished
        final = next(t[rid] for t in reversed(run.texts) if rid in t)
        assert shown[rid][1] == final
