"""Export the "Speculative decoding" lesson to JSON and replay it without a model.

A file holds what the run was asked (prompt, drafts per step, tokens, block size), the prompt's
token ids, both engines' step records, the texts of the token lists the page shows and the pass
in view. A file is untrusted: each field is checked for type, range and agreement with the others
before anything is built, and a refusal is one sentence naming the field (kvviz/lessons/files.py).
"""

from __future__ import annotations

import json
from dataclasses import asdict

from kvviz.engine.config import MAX_SPECULATIVE_TOKENS
from kvviz.engine.records import StepRecord
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
from kvviz.lessons.speculative.logic import SpeculativeLesson

LESSON_KEY = "speculative"
MAX_PASSES = 4096
MAX_TEXTS = 50_000
MAX_TOKENS = 2**16  # in the prompt, or in one decoded list
FIELDS = {"format", "lesson", "model_name", "settings", "prompt_token_ids", "records", "plain_records", "texts",
          "view_step", ROOM_ANSWERS}  # room_answers may be missing (a kvviz-lesson/3 file)
SETTINGS = {"num_speculative": MAX_SPECULATIVE_TOKENS, "max_tokens": MAX_PASSES, "block_size": 1024}  # name -> most


def export_speculative(lesson: SpeculativeLesson, view_step: int) -> str:
    """The run as JSON: no code, no pickle, no model; `view_step` is the pass the page shows."""
    return json.dumps({
        "format": LESSON_FORMAT, "lesson": LESSON_KEY, "model_name": lesson.model_name, "settings": lesson.settings,
        "prompt_token_ids": lesson.prompt_token_ids,
        "records": [r.to_dict() for r in lesson.records],
        "plain_records": [r.to_dict() for r in lesson.plain_records],
        "texts": [[list(ids), text] for ids, text in lesson.texts.items()],
        "view_step": min(max(view_step, 0), len(lesson.records) - 1),
        ROOM_ANSWERS: [asdict(row) for row in lesson.room_answers],
    })


def import_speculative(data: bytes | str) -> tuple[SpeculativeLesson, int]:
    """A replay of `export_speculative` output and the pass it showed, checking everything first."""
    return build_checked(_build, read_lesson_file(data, LESSON_KEY))


def _build(payload: dict) -> tuple[SpeculativeLesson, int]:
    check_keys(payload, "", FIELDS, FIELDS - {ROOM_ANSWERS})
    asked, settings = settings_numbers(payload["settings"], SETTINGS, {"prompt"})
    asked["prompt"] = typed(settings["prompt"], str, "settings.prompt")
    prompt_ids = typed(bounded_list(payload["prompt_token_ids"], MAX_TOKENS, "prompt_token_ids"), list[int],
                       "prompt_token_ids")
    check_range(len(prompt_ids), 1, MAX_TOKENS, "prompt_token_ids (its length)")
    records = _records(payload["records"], "records", len(prompt_ids), 1 + asked["num_speculative"])
    plain_records = _records(payload["plain_records"], "plain_records", len(prompt_ids), 1)
    texts = {}
    for i, item in enumerate(bounded_list(payload["texts"], MAX_TEXTS, "texts")):
        ids, text = typed(item, tuple[list, str], f"texts[{i}]")
        texts[tuple(typed(bounded_list(ids, MAX_TOKENS, f"texts[{i}][0]"), list[int], f"texts[{i}][0]"))] = text
    lesson = SpeculativeLesson(None, None, prompt_ids, asked, records=records, plain_records=plain_records,
                               texts=texts, model_name=typed(payload["model_name"], str, "model_name")[:200],
                               room_answers=room_answers(payload))
    view_step = check_range(typed(payload["view_step"], int, "view_step"), 0, len(records) - 1, "view_step")
    return lesson, view_step


def _records(value, where: str, prompt_tokens: int, most_per_pass: int) -> list[StepRecord]:
    """One request's steps: at most one draft each (the page reads the first), carried by a chunk that ran
    drafts, none accepting more than it proposed; its cached tokens the prompt after the first pass, then
    growing by at most `most_per_pass` a pass (a token and its accepted drafts), so the stage's work is
    bounded by the file's size (13M tokens in an 87 KB file once took 1.1 GB)."""
    records = step_records(value, MAX_PASSES, where)
    before = 0
    for i, record in enumerate(records):
        if len(record.drafts) > 1:
            raise FieldError(f"{where}[{i}].drafts", "holds more than the one request's drafts")
        for d, draft in enumerate(record.drafts):
            if draft.num_accepted > len(draft.draft_token_ids):
                raise FieldError(f"{where}[{i}].drafts[{d}].num_accepted", "is more than the drafts proposed")
            if draft.draft_token_ids and not any(chunk.num_drafts for chunk in record.chunks):
                raise FieldError(f"{where}[{i}].chunks", "has no chunk that ran the drafts its pass proposed")
        for r, request in enumerate(record.requests):
            low, high = (0, prompt_tokens + most_per_pass) if i == 0 else (before, before + most_per_pass)
            before = check_range(request.num_computed_tokens, low, high,
                                 f"{where}[{i}].requests[{r}].num_computed_tokens")
    return records
