"""Issue 35, items 1 and 3: a crafted Paged or Prefill file costs seconds, not minutes. Its layer
groups, its pool and the blocks the stage sends are bounded on arrival, and a replay walks the
pool one step's events at a time (it rebuilt the pool from the first step for every step)."""

import copy
import json
import time

import pytest

from kvviz.engine.records import PoolReplay, pool_blocks
from kvviz.lessons.files import LessonFileError
from kvviz.lessons.paged_batching import figures
from kvviz.lessons.paged_batching.file import (MAX_BLOCKS, MAX_LAYERS, MAX_POOL_BLOCKS, MAX_STAGE_BLOCKS,
                                               export_paged, import_paged)
from kvviz.lessons.paged_batching.logic import DEFAULT_REQUESTS, PagedLesson, RequestSpec
from kvviz.lessons.paged_batching.stage import stage_data
from kvviz.lessons.prefill_decode.file import MAX_REPLAY_TOKENS, export_lesson, import_lesson
from kvviz.lessons.prefill_decode.logic import PrefillLesson, LessonSettings, lesson_sampling

from app_tests import one_sentence


@pytest.fixture(scope="module")
def run(tiny_lm):
    lesson = PagedLesson.start(tiny_lm, [RequestSpec(*r) for r in DEFAULT_REQUESTS], 8, 12, True)
    while lesson.step() is not None:
        pass
    return lesson


def refused(data, read=import_paged) -> str:
    started = time.process_time()
    with pytest.raises(LessonFileError) as refusal:
        read(data)
    assert time.process_time() - started < 2
    assert one_sentence(str(refusal.value)), refusal.value
    return str(refusal.value)


def grouped(run, layers: int, pool: int) -> dict:
    """The run's first step as a file whose one layer group lists `layers` layers and a pool of `pool` blocks."""
    data = json.loads(export_paged(run, 0))
    data["records"], data["texts"], data["settings"]["num_blocks"] = data["records"][:1], data["texts"][:1], MAX_BLOCKS
    data["records"][0]["layer_groups"] = [{"name": "full", "window": None, "layers": list(range(layers)),
                                           "num_blocks": pool, "num_free_blocks": 0, "num_cached_blocks": 0}]
    for state in data["records"][0]["requests"]:
        state["group_block_tables"] = [state["block_table"]]
    return data


def test_layer_groups_of_more_layers_than_a_model_has_are_refused(run):
    """256 layers made a pool of a million blocks: 58 s of CPU and 804 MiB to replay one step."""
    message = refused(json.dumps(grouped(run, 2 * MAX_LAYERS, 1_000_000)))
    assert f"field records[0].layer_groups (its layers, every group together) is 256, outside 0 to {MAX_LAYERS}" \
        in message
    data = grouped(run, 4, 10)
    data["records"][0]["layer_groups"][0]["layers"] = [0, 0, 1, 2]
    assert "field records[0].layer_groups must name each layer once" in refused(json.dumps(data))


def test_a_pool_larger_than_the_page_draws_is_refused_and_the_largest_replays_in_seconds(run):
    assert f"num_blocks is {MAX_POOL_BLOCKS + 1}, outside 1 to {MAX_POOL_BLOCKS}" in refused(
        json.dumps(grouped(run, MAX_LAYERS, MAX_POOL_BLOCKS + 1)))
    started = time.process_time()
    replay, step = import_paged(json.dumps(grouped(run, MAX_LAYERS, MAX_POOL_BLOCKS)))
    figures.pool_grid(replay.pool_blocks(step), {}).to_json()
    json.dumps(stage_data(replay, step))
    assert time.process_time() - started < 10


def test_blocks_the_stage_would_send_over_every_step_are_bounded(run):
    """A pool held and cached at step 0, then many steps: the stage sends the pool once per step."""
    data = grouped(run, MAX_LAYERS, MAX_POOL_BLOCKS)
    first = data["records"][0]
    rid = first["requests"][0]["request_id"]
    first["events"] = [{"kind": kind, "request_id": rid, "block_ids": list(range(MAX_POOL_BLOCKS)), "num_bytes": 0,
                        "cpu_slots": [], "group": 0} for kind in ("allocate", "cache")]
    steps = MAX_STAGE_BLOCKS // (2 * MAX_POOL_BLOCKS) + 1
    data["records"] += [dict(copy.deepcopy(first), step=i, events=[]) for i in range(1, steps)]
    data["texts"] *= steps
    assert f"field records hold more than {MAX_STAGE_BLOCKS:,} blocks over their steps" in refused(json.dumps(data))


def test_a_long_replay_walks_the_pool_once(run):
    """2,000 steps on a pool of 4,096 blocks took 54 s of CPU: every step rebuilt the pool from step 0."""
    data = json.loads(export_paged(run, 0))
    data["settings"]["num_blocks"] = MAX_BLOCKS
    last = data["records"][-1]
    data["records"] += [dict(copy.deepcopy(last), step=i, events=[]) for i in range(len(data["records"]), 2000)]
    data["texts"] += [data["texts"][-1]] * (2000 - len(data["texts"]))
    started = time.process_time()
    replay, _ = import_paged(json.dumps(data))
    json.dumps(stage_data(replay, 1999))
    for step in range(0, 2000, 100):
        replay.pool_blocks(step)
    assert time.process_time() - started < 10


def test_the_kept_pool_steps_forward_and_back_to_the_same_blocks(run):
    pool = PoolReplay(run.num_blocks)
    for step in [*range(len(run.records)), 3, 0, len(run.records) - 1, 5]:
        every = pool_blocks(run.records[:step + 1], run.num_blocks)
        assert pool.blocks(run.records, step) == every
        assert pool.held(run.records, step) == [b for b in every if not b.free or b.cached]


def test_a_prefill_pool_of_more_slots_than_a_lesson_fills_is_refused(bundled):
    """block_size 1024 and 4,096 blocks (a 71 KiB file): the stage drew 4 million slots for 99 s."""
    lesson = PrefillLesson.start(bundled, LessonSettings(prompt="ROMEO:", sampling=lesson_sampling(max_tokens=2)))
    lesson.prefill()
    lesson.next_token()
    data = json.loads(export_lesson(lesson))
    data["settings"]["block_size"] = 1024
    for record in data["records"] + data["twin_records"]:
        record["memory"]["allocated_bytes"] = record["memory"]["bytes_per_token"] * 1024 * 4096
    assert (f"field records[0].memory.allocated_bytes makes a pool of more than {MAX_REPLAY_TOKENS // 1024} "
            "blocks of 1024 tokens") in refused(json.dumps(data), import_lesson)
