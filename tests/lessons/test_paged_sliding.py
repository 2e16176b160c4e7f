"""The Paged lesson on a model with sliding-window layers: every layer group's block table is in
the records, drawn from them, and exported and replayed like the rest."""

import json

import pytest
import torch

from kvviz.lessons.paged_batching import figures
from kvviz.lessons.paged_batching.file import export_paged, import_paged
from kvviz.lessons.paged_batching.logic import DEFAULT_REQUESTS, PagedLesson, RequestSpec
from kvviz.lessons.paged_batching.stage import stage_data

SPECS = [RequestSpec(*request) for request in DEFAULT_REQUESTS]


def sliding_lm(bundled, arch):
    """A tiny random-weight model of `arch` (window 8) that reads the bundled tokenizer."""
    from transformers import AutoModelForCausalLM

    from kvviz.models import LoadedModel

    from tiny_models import tiny_config

    torch.manual_seed(0)
    config = tiny_config(arch)
    config.vocab_size = len(bundled.tokenizer)
    model = AutoModelForCausalLM.from_config(config).eval()
    return LoadedModel(model, bundled.tokenizer, torch.device("cpu"), torch.float32, f"tiny {arch}", "custom", 256)


@pytest.mark.parametrize("arch", ["gemma3", "mistral"])
def test_group_tables_are_drawn_exported_and_replayed(bundled, arch):
    lesson = PagedLesson.start(sliding_lm(bundled, arch), SPECS, block_size=4, num_blocks=48,
                               enable_prefix_caching=True)
    while lesson.step() is not None:
        pass
    names = [g.name for g in lesson.records[0].layer_groups]
    assert names == (["full", "sliding"] if arch == "gemma3" else ["sliding"])
    given_back = [(step, state) for step, record in enumerate(lesson.records) for state in record.requests
                  if None in state.group_block_tables[-1]]
    assert given_back  # the prompts outgrow the 8-token window
    step, state = given_back[-1]
    labels = {rid: lesson.label(rid) for rid in lesson.request_ids.values()}
    figure = figures.group_block_tables(lesson.records[step], labels, lesson.block_size)
    marks = [text for trace in figure.data for text in trace.text]
    assert marks.count("×") == sum(t.count(None) for r in lesson.records[step].requests for t in r.group_block_tables)
    rows = figure.layout.yaxis.ticktext
    assert any("sliding (8-token window)" in row for row in rows)
    assert stage_data(lesson, step)["steps"]  # the stage draws the first group's pool
    replay, _ = import_paged(export_paged(lesson, view_step=step).encode())
    as_json = lambda records: json.loads(json.dumps([r.to_dict() for r in records]))  # noqa: E731
    assert as_json(replay.records) == as_json(lesson.records)
    assert replay.reservation_comparison(step) == lesson.reservation_comparison(step)


def test_a_larger_full_pool_is_drawn_at_its_size_and_replayed(bundled):
    """With 128 blocks of 4 the sliding pool keeps 16 requests x (8 / 4 + 2) + 64 / 4 = 80 blocks and
    its other bytes become full blocks (engine/layer_groups.py): the stage and the pool grid draw
    the full group's 128 x 6 - 80 x 5 = 368, and a file with them replays."""
    lesson = PagedLesson.start(sliding_lm(bundled, "gemma3"), SPECS, block_size=4, num_blocks=128,
                               enable_prefix_caching=True)
    while lesson.step() is not None:
        pass
    last = len(lesson.records) - 1
    assert [g.num_blocks for g in lesson.records[0].layer_groups] == [368, 80] and lesson.num_blocks == 128
    assert stage_data(lesson, last)["num_blocks"] == 368 and len(lesson.pool_blocks(last)) == 368
    replay, _ = import_paged(export_paged(lesson, view_step=last).encode())
    assert len(replay.pool_blocks(last)) == 368 and replay.num_blocks == 128
