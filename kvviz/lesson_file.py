"""Export a lesson to JSON and replay it without a model, checking every field of an upload.

A file holds the settings, the model summary, every step record (without the engine's full
trace) and per step only what that step added: the new K/V rows and the newest token's
attention. Arrays travel as base64 of little-endian float32, so a replay draws the same pixels.
A file is untrusted: each field is checked for type, range and agreement with the model summary
before anything is built, and a refusal is one sentence naming the field.
"""

from __future__ import annotations

import base64
import json
import math
import types
import typing
from dataclasses import MISSING, asdict, fields, is_dataclass

import numpy as np

from kvviz.engine.records import StepRecord
from kvviz.prefill_decode import (MAX_LESSON_TOKENS, MAX_TRIANGLE_TOKENS, Lesson, LessonSettings, StepTrace,
                                  lesson_sampling)

LESSON_FORMAT = "kvviz-lesson/3"  # the settings hold a SamplingParams ("sampling")
FLAT_SETTINGS_FORMAT = "kvviz-lesson/2"  # still read: the sampling fields sat beside the prompt
FLAT_SAMPLING = ("max_tokens", "temperature", "top_k", "top_p", "seed")
MAX_LESSON_BYTES = 20 * 2**20  # a 256-token lesson on the bundled model exports to a few MiB
MODEL_LIMITS = {"layers": 512, "heads": 1024, "kv_heads": 1024, "head_dim": 1024, "hidden_size": 2**20,
                "parameters": 2**50, "max_context": 2**24}
MODEL_TEXT = ("name", "source", "device", "dtype")


class LessonFileError(ValueError):
    """An uploaded lesson file that kvviz will not replay; the message says why."""


def export_lesson(lesson: Lesson) -> str:
    """The lesson as JSON: settings, model summary, step records and compact traces. No code, no pickle."""
    return json.dumps({
        "format": LESSON_FORMAT, "model": lesson.model_info, "settings": asdict(lesson.settings),
        "prompt_token_ids": lesson.prompt_token_ids, "token_texts": lesson.token_texts,
        "records": [r.to_dict() for r in lesson.records],
        "twin_records": [r.to_dict() for r in lesson.twin_records],
        "traces": [{"new_keys": _encode(t.new_keys), "new_values": _encode(t.new_values),
                    "attention": _encode(t.attention), "changed_rows": t.changed_rows,
                    "logit_difference": t.logit_difference,
                    "prompt_attention": None if t.prompt_attention is None else _encode(t.prompt_attention)}
                   for t in lesson.traces],
    })


def load_json(data: bytes | str, what: str):
    """Parse untrusted JSON; a refusal is a ValueError with one sentence, never a RecursionError."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        return json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError(f"{what} is not JSON text.") from None
    except RecursionError:
        raise ValueError(f"{what} nests lists or objects too deeply to read.") from None


def import_lesson(data: bytes | str) -> Lesson:
    """Rebuild a lesson for replay from `export_lesson` output, checking everything first."""
    if len(data) > MAX_LESSON_BYTES:
        raise LessonFileError(f"The file is {len(data) / 2**20:.1f} MiB, over the "
                              f"{MAX_LESSON_BYTES // 2**20} MiB limit; export a shorter lesson.")
    try:
        payload = load_json(data, "This file")
    except ValueError as error:
        raise LessonFileError(f"{error} Upload a file saved with “Export lesson”.") from None
    if not isinstance(payload, dict) or payload.get("format") not in (LESSON_FORMAT, FLAT_SETTINGS_FORMAT):
        raise LessonFileError("This JSON is not a kvviz lesson (its format field is missing or unknown); "
                              "upload a file saved with “Export lesson”.")
    try:
        return _build(payload)
    except _Bad as bad:
        raise LessonFileError(f"The lesson file's field {bad.where} {bad.what}; "
                              "export the lesson again from kvviz.") from None


# ---- checking ------------------------------------------------------------------------------
class _Bad(Exception):
    def __init__(self, where: str, what: str):
        self.where, self.what = where, what


def _build(payload: dict) -> Lesson:
    _keys(payload, "", {"format", "model", "settings", "prompt_token_ids", "token_texts", "records",
                                "twin_records", "traces"})
    model = _model(payload["model"])
    settings = _settings(payload["settings"], payload["format"])
    max_tokens = _range(settings.sampling.max_tokens, 1, MAX_LESSON_TOKENS, "settings.sampling.max_tokens")
    _range(settings.sampling.n, 1, 1, "settings.sampling.n")
    _range(settings.block_size, 1, 1024, "settings.block_size")
    prompt_ids = _typed(payload["prompt_token_ids"], list[int], "prompt_token_ids")
    _range(len(prompt_ids), 1, model["max_context"] - 1, "prompt_token_ids (its length)")
    steps = _typed(payload["records"], list, "records")
    _range(len(steps), 1, max_tokens, "records (the number of steps)")
    records = [_typed(r, StepRecord, f"records[{i}]") for i, r in enumerate(steps)]
    twins = _typed(payload["twin_records"], list, "twin_records")
    if len(twins) != len(records):
        raise _Bad("twin_records", f"has {len(twins)} steps where records has {len(records)}")
    twin_records = [_typed(r, StepRecord, f"twin_records[{i}]") for i, r in enumerate(twins)]
    traces = _typed(payload["traces"], list, "traces")
    if len(traces) != len(records):
        raise _Bad("traces", f"has {len(traces)} steps where records has {len(records)}")
    lesson_traces = [_trace(t, i, model, len(prompt_ids)) for i, t in enumerate(traces)]
    texts = _typed(payload["token_texts"], list[str], "token_texts")
    sampled = sum(len(r.sampled) for r in records)
    if len(texts) != len(prompt_ids) + sampled:
        raise _Bad("token_texts", f"has {len(texts)} tokens where the prompt and the sampled tokens make "
                                  f"{len(prompt_ids) + sampled}")
    for i, record in enumerate(records):
        if record.trace is not None or twin_records[i].trace is not None:
            raise _Bad(f"records[{i}].trace", "must be empty (traces travel in the traces field)")
    return Lesson(settings, model, records=records, twin_records=twin_records, traces=lesson_traces,
                  prompt_token_ids=prompt_ids, token_texts=texts, replay=True)


def _settings(value, file_format: str) -> LessonSettings:
    """The settings; a kvviz-lesson/2 file's sampling fields, written beside the prompt, are moved
    into the lesson's SamplingParams first (a field it left out keeps the lesson's default)."""
    if file_format == FLAT_SETTINGS_FORMAT:
        value = _typed(value, dict, "settings")
        _keys(value, "settings", {"prompt", "block_size", *FLAT_SAMPLING}, {"prompt"})
        value = {key: item for key, item in value.items() if key not in FLAT_SAMPLING} | {"sampling": (
            asdict(lesson_sampling()) | {key: item for key, item in value.items() if key in FLAT_SAMPLING})}
    return _typed(value, LessonSettings, "settings")


def _model(value) -> dict:
    value = _typed(value, dict, "model")
    model = {}
    for key in MODEL_TEXT:
        model[key] = _typed(value.get(key), str, f"model.{key}")[:200]
    for key, most in MODEL_LIMITS.items():
        model[key] = _range(_typed(value.get(key), int, f"model.{key}"), 1, most, f"model.{key}")
    model["dtype_bytes"] = _typed(value.get("dtype_bytes"), int, "model.dtype_bytes")
    if model["dtype_bytes"] not in (1, 2, 4, 8):
        raise _Bad("model.dtype_bytes", "must be 1, 2, 4 or 8")
    if model["heads"] % model["kv_heads"]:
        raise _Bad("model.kv_heads", f"({model['kv_heads']}) must divide model.heads ({model['heads']})")
    return model


def _trace(value, step: int, model: dict, prompt_tokens: int) -> StepTrace:
    where = f"traces[{step}]"
    value = _typed(value, dict, where)
    _keys(value, where, {"new_keys", "new_values", "attention", "changed_rows", "logit_difference",
                         "prompt_attention"},
          {"new_keys", "new_values", "attention", "changed_rows", "logit_difference"})
    new = prompt_tokens if step == 0 else 1
    kv_shape = (model["layers"], new, model["kv_heads"], model["head_dim"])
    attention_shape = (model["layers"], model["heads"], prompt_tokens + step)
    return StepTrace(_decode(value["new_keys"], kv_shape, f"{where}.new_keys"),
                     _decode(value["new_values"], kv_shape, f"{where}.new_values"),
                     _decode(value["attention"], attention_shape, f"{where}.attention"),
                     _typed(value["changed_rows"], int, f"{where}.changed_rows"),
                     _typed(value["logit_difference"], float | None, f"{where}.logit_difference"),
                     _triangle(value.get("prompt_attention"), step, model, prompt_tokens, where))


def _triangle(value, step: int, model: dict, prompt_tokens: int, where: str) -> np.ndarray | None:
    """The prefill's attention matrix: only at step 0, only for a prompt short enough to keep it."""
    if value is None:
        return None
    if step != 0 or prompt_tokens > MAX_TRIANGLE_TOKENS:
        raise _Bad(f"{where}.prompt_attention", "belongs only to the prefill step of a short prompt")
    shape = (model["layers"], model["heads"], prompt_tokens, prompt_tokens)
    return _decode(value, shape, f"{where}.prompt_attention")


def _typed(value, kind, where: str):
    """`value` checked against a type (int, float, str, bool, list[...], tuple[...], X | None, dict,
    list) and returned as it; a record dataclass is built from exactly its fields."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        return _typed(value, next(a for a in args if a is not type(None)), where)
    if is_dataclass(kind):
        value = _typed(value, dict, where)
        hints = typing.get_type_hints(kind)
        required = {f.name for f in fields(kind) if f.default is MISSING and f.default_factory is MISSING}
        _keys(value, where, set(hints), required)
        return kind(**{name: _typed(item, hints[name], f"{where}.{name}") for name, item in value.items()})
    if origin in (list, tuple) or kind in (list, dict):
        container = dict if kind is dict else list
        if not isinstance(value, container):
            raise _Bad(where, f"must be a {'JSON object' if container is dict else 'list'}")
        if origin is list:
            return [_typed(item, args[0], f"{where}[{i}]") for i, item in enumerate(value)]
        if origin is tuple:
            if len(value) != len(args):
                raise _Bad(where, f"must hold {len(args)} items")
            return tuple(_typed(item, a, f"{where}[{i}]") for i, (item, a) in enumerate(zip(value, args)))
        return value
    if kind is bool:
        if not isinstance(value, bool):
            raise _Bad(where, "must be true or false")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**53:
            raise _Bad(where, "must be a whole number from 0 up")
        return value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise _Bad(where, "must be a finite number from 0 up")
        return float(value)
    if kind is str:
        if not isinstance(value, str) or len(value) > 100_000:
            raise _Bad(where, "must be text")
        return value
    raise _Bad(where, "has a type kvviz does not read")


def _keys(value: dict, where: str, allowed: set, required: set | None = None) -> None:
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise _Bad(f"{where}.{str(unknown[0])[:40]}".lstrip("."), "is not one kvviz writes")
    missing = sorted((allowed if required is None else required) - set(value))
    if missing:
        raise _Bad(f"{where}.{missing[0]}".lstrip("."), "is missing")


def _range(value: int, low: int, high: int, where: str) -> int:
    if not low <= value <= high:
        raise _Bad(where, f"is {value}, outside {low} to {high}")
    return value


def _encode(array: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(array, dtype="<f4").tobytes()).decode("ascii")


def _decode(value, shape: tuple, where: str) -> np.ndarray:
    if not isinstance(value, str):
        raise _Bad(where, "must be base64 text")
    expected = math.prod(shape) * 4
    if len(value) != 4 * -(-expected // 3):  # checked before decoding, so a huge field costs nothing
        raise _Bad(where, f"does not hold {'x'.join(map(str, shape))} float32 values, as the model and step imply")
    try:
        raw = base64.b64decode(value, validate=True)
    except ValueError:
        raise _Bad(where, "is not valid base64") from None
    array = np.frombuffer(raw, dtype="<f4").astype(np.float32).reshape(shape)
    if not np.isfinite(array).all():
        raise _Bad(where, "holds a value that is not a finite number")
    return array
