"""Export the "Paged cache and batching" lesson to JSON and replay it without a model.

A file holds the run's settings, its requests, every step record (the pool is rebuilt from
their events), each step's decoded texts and the step in view. Everything the page draws comes
from these. A file is untrusted: each field is checked for type, range and agreement with the
others (block ids inside the pool, request ids of the run) before anything is built, and a
refusal is one sentence naming the field (kvviz/lessons/files.py).
"""

from __future__ import annotations

import json
from dataclasses import asdict

from kvviz.engine.records import PoolReplay, StepRecord, first_pool_size
from kvviz.lessons.files import (
    LESSON_FORMAT,
    ROOM_ANSWERS,
    FieldError,
    bounded_list,
    build_checked,
    check_keys,
    check_range,
    read_lesson_file,
    room_answers,
    settings_numbers,
    step_records,
    typed,
)
from kvviz.lessons.paged_batching.logic import PagedLesson, RequestSpec

LESSON_KEY = "paged_batching"
MAX_REQUESTS = 256
MAX_STEPS = 10_000
MAX_BLOCKS = 1024  # the page's slider stops at 128; the pool grid draws every block
MAX_LAYERS = 128  # layers in a record's layer groups, all groups together (as a Prefill file's model.layers)
MAX_POOL_BLOCKS = 8192  # the drawn pool with layer groups (a sliding model's full pool may hold several num_blocks)
MAX_STAGE_BLOCKS = 250_000  # held blocks summed over every step: what the stage sends (a live run: pool x steps)
FIELDS = {"format", "lesson", "model_name", "settings", "specs", "request_ids", "prompt_lengths", "records",
          "texts", "view_step", ROOM_ANSWERS}  # room_answers may be missing (a kvviz-lesson/3 file)
SETTINGS = {"block_size": 1024, "num_blocks": MAX_BLOCKS, "max_context": 2**24}  # name -> most


def export_paged(lesson: PagedLesson, view_step: int) -> str:
    """The run as JSON: no code, no pickle, no model; `view_step` is the step the page shows."""
    return json.dumps({
        "format": LESSON_FORMAT, "lesson": LESSON_KEY, "model_name": lesson.model_name,
        "settings": {"block_size": lesson.block_size, "num_blocks": lesson.num_blocks,
                     "max_context": lesson.max_context, "enable_prefix_caching": lesson.enable_prefix_caching},
        "specs": [asdict(spec) for spec in lesson.specs],
        "request_ids": sorted(lesson.request_ids.items()),  # JSON keys are text: pairs keep the ints
        "prompt_lengths": sorted(lesson.prompt_lengths.items()),
        "records": [r.to_dict() for r in lesson.records],
        "texts": [sorted(texts.items()) for texts in lesson.texts],
        "view_step": min(max(view_step, 0), len(lesson.records) - 1),
        ROOM_ANSWERS: [asdict(row) for row in lesson.room_answers],
    })


def import_paged(data: bytes | str) -> tuple[PagedLesson, int]:
    """A replay of `export_paged` output and the step it showed, checking everything first."""
    return build_checked(_build, read_lesson_file(data, LESSON_KEY))


def _build(payload: dict) -> tuple[PagedLesson, int]:
    check_keys(payload, "", FIELDS, FIELDS - {ROOM_ANSWERS})
    sizes, settings = settings_numbers(payload["settings"], SETTINGS, {"enable_prefix_caching"})
    specs = bounded_list(payload["specs"], MAX_REQUESTS, "specs")
    check_range(len(specs), 1, MAX_REQUESTS, "specs (the number of requests)")
    specs = [typed(spec, RequestSpec, f"specs[{i}]") for i, spec in enumerate(specs)]
    request_ids = dict(typed(bounded_list(payload["request_ids"], len(specs), "request_ids"),
                             list[tuple[int, int]], "request_ids"))
    for index in request_ids:
        check_range(index, 0, len(specs) - 1, "request_ids (a request's index)")
    records = step_records(payload["records"], MAX_STEPS, "records")
    pool_size = _pool_size(records, sizes["num_blocks"])
    for i, record in enumerate(records):
        _check_record(record, f"records[{i}]", set(request_ids.values()), pool_size)
    _check_stage(records, pool_size)
    texts = bounded_list(payload["texts"], len(records), "texts")
    if len(texts) != len(records):
        raise FieldError("texts", f"has {len(texts)} steps where records has {len(records)}")
    texts = [dict(typed(t, list[tuple[int, str]], f"texts[{i}]")) for i, t in enumerate(texts)]
    lengths = typed(bounded_list(payload["prompt_lengths"], len(specs), "prompt_lengths"),
                    list[tuple[int, int]], "prompt_lengths")
    lesson = PagedLesson(
        specs, None, sizes["max_context"], sizes["block_size"], sizes["num_blocks"],
        typed(settings["enable_prefix_caching"], bool, "settings.enable_prefix_caching"),
        records=records, texts=texts, request_ids=request_ids, prompt_lengths=dict(lengths),
        model_name=typed(payload["model_name"], str, "model_name")[:200], room_answers=room_answers(payload))
    view_step = check_range(typed(payload["view_step"], int, "view_step"), 0, len(records) - 1, "view_step")
    return lesson, view_step


def _check_record(record: StepRecord, where: str, request_ids: set[int], num_blocks: int) -> None:
    """Ids that the page looks up: requests of this run, blocks inside the pool (num_blocks: the
    drawn pool's, _pool_size)."""
    for i, state in enumerate(record.requests):
        if state.request_id not in request_ids:
            raise FieldError(f"{where}.requests[{i}].request_id", "is not a request of this run")
        _check_blocks(state.block_table, num_blocks, f"{where}.requests[{i}].block_table")
        for g, table in enumerate(state.group_block_tables):
            _check_blocks(table, num_blocks, f"{where}.requests[{i}].group_block_tables[{g}]")
        if state.group_block_tables and len(state.group_block_tables) != len(record.layer_groups):
            raise FieldError(f"{where}.requests[{i}].group_block_tables", "does not have one table per layer group")
    for i, chunk in enumerate(record.chunks):  # a chunk names the request it ran: the page labels it (R1, R2...)
        if chunk.request_id not in request_ids:
            raise FieldError(f"{where}.chunks[{i}].request_id", "is not a request of this run")
    for i, event in enumerate(record.events):
        _check_blocks(event.block_ids, num_blocks, f"{where}.events[{i}].block_ids")
    for i, block in enumerate(record.blocks or []):
        _check_blocks([block.block_id], num_blocks, f"{where}.blocks[{i}].block_id")


def _pool_size(records: list[StepRecord], num_blocks: int) -> int:
    """The pool the page draws (records.first_pool_size): with layer groups the first group's, which
    shares out the bytes of num_blocks blocks of every layer, so never more than num_blocks x layers,
    and never more than MAX_POOL_BLOCKS."""
    for i, record in enumerate(records):
        layers = [layer for group in record.layer_groups for layer in group.layers]
        where = f"records[{i}].layer_groups"
        check_range(len(layers), 0, MAX_LAYERS, f"{where} (its layers, every group together)")
        if len(set(layers)) != len(layers) or any(layer >= MAX_LAYERS for layer in layers):
            raise FieldError(where, f"must name each layer once, from 0 to {MAX_LAYERS - 1}")
    if records and records[0].layer_groups:
        groups = records[0].layer_groups
        most = min(num_blocks * sum(len(group.layers) for group in groups), MAX_POOL_BLOCKS)
        for g, group in enumerate(groups):
            check_range(group.num_blocks, 1, most, f"records[0].layer_groups[{g}].num_blocks")
    return first_pool_size(records, num_blocks)


def _check_stage(records: list[StepRecord], num_blocks: int) -> None:
    """The stage sends, for every step, each block held or cached: their sum must stay drawable. One
    pass over the events, as the page's replay makes it (a block both held and cached counts twice)."""
    pool, total = PoolReplay(num_blocks), 0
    for step in range(len(records)):
        pool.advance(records, step)
        total += len(pool.owners) + len(pool.cached)  # at least the blocks the stage sends for this step
        if total > MAX_STAGE_BLOCKS:
            raise FieldError("records", f"hold more than {MAX_STAGE_BLOCKS:,} blocks over their steps (the pool's "
                                        "held and cached blocks, step by step), more than the stage draws")


def _check_blocks(block_ids: list[int], num_blocks: int, where: str) -> None:
    if any(block_id is not None and block_id >= num_blocks for block_id in block_ids):  # None: given back
        raise FieldError(where, f"names a block outside the pool of {num_blocks}")
