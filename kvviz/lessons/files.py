"""Reading an untrusted lesson file: the envelope every lesson's file shares, and field checks.

A file is JSON with a format ("kvviz-lesson/4"), the lesson it holds (files of the first
lesson, written before the other lessons could export, have no lesson field) and that lesson's
fields. Format 4 added `room_answers`, what a class answered in a room (`RoomAnswers`); a
kvviz-lesson/3 file is the same without it, and is read. Older formats are refused with a
sentence naming theirs. `read_lesson_file` checks the size,
the JSON and the envelope; each lesson's builder checks its fields with `typed`, `check_keys` and
`check_range`, which raise FieldError, and `build_checked` turns that into one sentence naming the
field. A text field that is half of a character (a lone surrogate) is refused: no page could show it.
"""

from __future__ import annotations

import functools
import json
import math
import types
import typing
from dataclasses import MISSING, dataclass, field, fields, is_dataclass

from kvviz.engine.records import StepRecord
from kvviz.lessons.lecture_index import by_key
from kvviz.rooms.types import MAX_ANSWERS

LESSON_FORMAT = "kvviz-lesson/4"  # 3: the first lesson's settings hold a SamplingParams; 4: room_answers
READ_FORMATS = ("kvviz-lesson/3", LESSON_FORMAT)  # a /3 file is a /4 file without room_answers
ROOM_ANSWERS = "room_answers"  # the optional field every lesson's file may hold
MAX_ROOM_QUESTIONS = 100  # questions in a file's room_answers (a room asks at most 50; a lesson may have had two)
MAX_ROOM_ANSWERS = MAX_ANSWERS  # answers to one question: what a room keeps, so a room's file always replays
MAX_LESSON_BYTES = 20 * 2**20  # a 256-token lesson on the bundled model exports to a few MiB


class LessonFileError(ValueError):
    """An uploaded lesson file that kvviz will not replay; the message says why."""


def read_lesson_file(data: bytes | str, lesson: str) -> dict:
    """The file's JSON object, once its size, its format and its lesson (the key of a lesson in the
    lecture that replays files) are right."""
    if len(data) > MAX_LESSON_BYTES:
        raise LessonFileError(f"The file is {len(data) / 2**20:.1f} MiB, over the "
                              f"{MAX_LESSON_BYTES // 2**20} MiB limit; export a shorter lesson.")
    try:
        payload = load_json(data, "This file")
    except ValueError as error:
        raise LessonFileError(f"{str(error).rstrip('.')}; upload a file saved with “Export lesson”.") from None
    if isinstance(payload, dict) and payload.get("format") == "kvviz-lesson/2":
        raise LessonFileError(f"This file is in the older format {payload['format']}, which this kvviz no longer "
                              f"reads; export the lesson again to get a {LESSON_FORMAT} file.")
    if not isinstance(payload, dict) or payload.get("format") not in READ_FORMATS:
        raise LessonFileError("This JSON is not a kvviz lesson (its format field is missing or unknown); "
                              "upload a file saved with “Export lesson”.")
    kind = payload.get("lesson", "prefill_decode")
    if kind != lesson:
        other = by_key(kind) if isinstance(kind, str) else None
        if other is not None and other.replays:
            raise LessonFileError(f"This file holds the “{other.title}” lesson; "
                                  "replay it on that page.")
        raise LessonFileError("The lesson file's field lesson names no kvviz lesson; "
                              "upload a file saved with “Export lesson”.")
    return payload


@dataclass
class RoomAnswers:
    """A question a room was asked about the lesson, as the lesson's file keeps it."""

    room: str  # the room's code
    question: str
    unit: str
    step: int  # the step whose record holds the engine's answer
    engine: float | None  # the engine's answer; None when the file was written before the reveal
    answers: list[float] = field(default_factory=list)  # the students' numbers, sorted, no names
    exact: bool = False  # only the same number counts as right (a block id); else within 1%


def room_answers(payload: dict) -> list[RoomAnswers]:
    """The file's room_answers (none in a file without them), each checked; raises FieldError."""
    value = payload.get(ROOM_ANSWERS, [])
    if value and payload.get("format") != LESSON_FORMAT:
        raise FieldError(ROOM_ANSWERS, f"belongs to {LESSON_FORMAT} files, not {payload.get('format')}")
    rows = []
    for i, row in enumerate(bounded_list(value, MAX_ROOM_QUESTIONS, ROOM_ANSWERS)):
        where = f"{ROOM_ANSWERS}[{i}]"
        bounded_list(typed(row, dict, where).get("answers", []), MAX_ROOM_ANSWERS, f"{where}.answers")
        rows.append(typed(row, RoomAnswers, where))
        rows[-1].room, rows[-1].question, rows[-1].unit = row["room"][:12], row["question"][:1000], row["unit"][:40]
    return rows


def build_checked(build, payload: dict):
    """`build(payload)`, with a failed field check said as one sentence (a LessonFileError)."""
    try:
        return build(payload)
    except FieldError as bad:
        raise LessonFileError(f"The lesson file's field {bad.where} {bad.what}; "
                              "export the lesson again from kvviz.") from None


def load_json(data: bytes | str, what: str):
    """Parse untrusted JSON; a refusal is a ValueError with one sentence, never a RecursionError."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        return json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError(f"{what} is not JSON text.") from None
    except RecursionError:
        raise ValueError(f"{what} nests lists or objects too deeply to read.") from None


class FieldError(Exception):
    """A field of a lesson file that fails its check: where it is, and what is wrong with it."""

    def __init__(self, where: str, what: str):
        self.where, self.what = where, what


def typed(value, kind, where: str):
    """`value` checked against a type (int, float, str, bool, list[...], tuple[...], X | None, dict,
    list) and returned as it; a record dataclass is built from exactly its fields."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        return typed(value, next(a for a in args if a is not type(None)), where)
    if is_dataclass(kind):
        value = typed(value, dict, where)
        hints, required = _fields(kind)
        check_keys(value, where, set(hints), required)
        return kind(**{name: typed(item, hints[name], f"{where}.{name}") for name, item in value.items()})
    if origin in (list, tuple) or kind in (list, dict):
        container = dict if kind is dict else list
        if not isinstance(value, container):
            raise FieldError(where, f"must be a {'JSON object' if container is dict else 'list'}")
        if origin is list:
            return [typed(item, args[0], f"{where}[{i}]") for i, item in enumerate(value)]
        if origin is tuple:
            if len(value) != len(args):
                raise FieldError(where, f"must hold {len(args)} items")
            return tuple(typed(item, a, f"{where}[{i}]") for i, (item, a) in enumerate(zip(value, args)))
        return value
    if kind is bool:
        if not isinstance(value, bool):
            raise FieldError(where, "must be true or false")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**53:
            raise FieldError(where, "must be a whole number from 0 up")
        return value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise FieldError(where, "must be a finite number from 0 up")
        return float(value)
    if kind is str:
        if not isinstance(value, str) or len(value) > 100_000:
            raise FieldError(where, "must be text")
        if not value.isascii() and not _encodes(value):  # JSON's "\ud800" escape gives half a character
            raise FieldError(where, "holds a lone surrogate (\\ud800 to \\udfff), half of a character, which no "
                                    "page can show")
        return value
    raise FieldError(where, "has a type kvviz does not read")


@functools.cache
def _fields(kind) -> tuple[dict, set]:
    """A record dataclass's field types and required names, worked out once (not once per record read)."""
    required = {f.name for f in fields(kind) if f.default is MISSING and f.default_factory is MISSING}
    return typing.get_type_hints(kind), required


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_keys(value: dict, where: str, allowed: set, required: set | None = None) -> None:
    unknown = sorted(set(value) - allowed)
    if unknown:
        name = str(unknown[0])[:40].encode("utf-8", "backslashreplace").decode("utf-8")  # the sentence must print
        raise FieldError(f"{where}.{name}".lstrip("."), "is not one kvviz writes")
    missing = sorted((allowed if required is None else required) - set(value))
    if missing:
        raise FieldError(f"{where}.{missing[0]}".lstrip("."), "is missing")


def settings_numbers(value, limits: dict[str, int], others: set[str], where: str = "settings") -> tuple[dict, dict]:
    """An object holding exactly `limits`' names (whole numbers from 1 up to each limit) and `others`:
    the checked numbers, and the object for the caller to check `others` in."""
    value = typed(value, dict, where)
    check_keys(value, where, set(limits) | others)
    numbers = {name: check_range(typed(value[name], int, f"{where}.{name}"), 1, most, f"{where}.{name}")
               for name, most in limits.items()}
    return numbers, value


def step_records(value, most: int, where: str) -> list[StepRecord]:
    """From 1 to `most` step records, each built from exactly its fields, none with a trace."""
    steps = bounded_list(value, most, where)
    check_range(len(steps), 1, most, f"{where} (the number of steps)")
    records = [typed(step, StepRecord, f"{where}[{i}]") for i, step in enumerate(steps)]
    for i, record in enumerate(records):
        if record.trace is not None:
            raise FieldError(f"{where}[{i}].trace", "must be empty (this lesson's file keeps no trace)")
    return records


def bounded_list(value, most: int, where: str) -> list:
    """A list no longer than `most`, checked before its items are (a huge list costs nothing)."""
    value = typed(value, list, where)
    if len(value) > most:
        raise FieldError(where, f"has {len(value)} items, more than the {most} a lesson can hold")
    return value


def check_range(value: int, low: int, high: int, where: str) -> int:
    if not low <= value <= high:
        raise FieldError(where, f"is {value}, outside {low} to {high}")
    return value
