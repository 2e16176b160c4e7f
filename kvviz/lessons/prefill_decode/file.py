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
import re
from dataclasses import asdict

import numpy as np

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
    typed,
)
from kvviz.lessons.prefill_decode.logic import (MAX_LESSON_TOKENS, MAX_TRIANGLE_TOKENS, LessonSettings, PrefillLesson,
                                               StepTrace)

# What a file's model summary may claim. The views draw layers x tokens cells (the cache), heads x
# tokens (attention) and tokens x head_dim (K and V), so each bound is set by the work it makes:
# at these limits every view draws in about a second. Real models stay inside them (Llama-3.1-405B:
# 126 layers, 128 heads, head size 128).
MODEL_LIMITS = {"layers": 128, "heads": 256, "kv_heads": 256, "head_dim": 512, "hidden_size": 2**20,
                "parameters": 2**50, "max_context": 2**24}
MAX_LATENT = 4096  # MLA: values in one cached latent row (DeepSeek-V3: 512 + 64)
MAX_REPLAY_TOKENS = 4096  # prompt and generated tokens of a replayed lesson
MODEL_TEXT = ("name", "source", "device", "dtype")


def export_lesson(lesson: PrefillLesson) -> str:
    """The lesson as JSON: settings, model summary, step records and compact traces. No code, no pickle."""
    return json.dumps({
        "format": LESSON_FORMAT, "lesson": "prefill_decode", "model": lesson.model_info,
        "settings": asdict(lesson.settings),
        "prompt_token_ids": lesson.prompt_token_ids, "token_texts": lesson.token_texts,
        "records": [r.to_dict() for r in lesson.records],
        "twin_records": [r.to_dict() for r in lesson.twin_records],
        "traces": [{"new_keys": _encode(t.new_keys), "new_values": _encode(t.new_values),
                    "attention": _encode(t.attention), "changed_rows": t.changed_rows,
                    "logit_difference": t.logit_difference,
                    "prompt_attention": None if t.prompt_attention is None else _encode(t.prompt_attention),
                    **({} if t.new_latents is None else {"new_latents": _encode(t.new_latents)})}  # MLA only
                   for t in lesson.traces],
        ROOM_ANSWERS: [asdict(row) for row in lesson.room_answers],
    })


def import_lesson(data: bytes | str) -> PrefillLesson:
    """Rebuild a lesson for replay from `export_lesson` output, checking everything first."""
    return build_checked(_build, read_lesson_file(data, "prefill_decode"))


# ---- checking ------------------------------------------------------------------------------
def _build(payload: dict) -> PrefillLesson:
    check_keys(payload, "", {"format", "lesson", "model", "settings", "prompt_token_ids", "token_texts",
                              "records", "twin_records", "traces", ROOM_ANSWERS},
               {"format", "model", "settings", "prompt_token_ids", "token_texts", "records", "twin_records", "traces"})
    model = _model(payload["model"])
    settings = _settings(payload["settings"])
    max_tokens = check_range(settings.sampling.max_tokens, 1, MAX_LESSON_TOKENS, "settings.sampling.max_tokens")
    check_range(settings.sampling.n, 1, 1, "settings.sampling.n")
    check_range(settings.block_size, 1, 1024, "settings.block_size")
    prompt_ids = typed(bounded_list(payload["prompt_token_ids"], MAX_REPLAY_TOKENS, "prompt_token_ids"), list[int],
                       "prompt_token_ids")
    check_range(len(prompt_ids), 1, min(model["max_context"] - 1, MAX_REPLAY_TOKENS - max_tokens),
                "prompt_token_ids (its length)")
    steps = typed(payload["records"], list, "records")
    check_range(len(steps), 1, max_tokens, "records (the number of steps)")
    records = [typed(r, StepRecord, f"records[{i}]") for i, r in enumerate(steps)]
    twins = typed(payload["twin_records"], list, "twin_records")
    if len(twins) > len(records):  # the twin stops early on a long context (logic.TWIN_MOST_FLOPS)
        raise FieldError("twin_records", f"has {len(twins)} steps where records has {len(records)}; it needs 1 to "
                                         f"{len(records)}")
    twin_records = [typed(r, StepRecord, f"twin_records[{i}]") for i, r in enumerate(twins)]
    traces = typed(payload["traces"], list, "traces")
    if len(traces) != len(records):
        raise FieldError("traces", f"has {len(traces)} steps where records has {len(records)}")
    lesson_traces = [_trace(t, i, model, len(prompt_ids)) for i, t in enumerate(traces)]
    texts = typed(bounded_list(payload["token_texts"], MAX_REPLAY_TOKENS, "token_texts"), list[str], "token_texts")
    sampled = sum(len(r.sampled) for r in records)
    if len(texts) != len(prompt_ids) + sampled:
        raise FieldError("token_texts", f"has {len(texts)} tokens where the prompt and the sampled tokens make "
                                        f"{len(prompt_ids) + sampled}")
    for i, record in enumerate(records):
        if record.trace is not None or (i < len(twin_records) and twin_records[i].trace is not None):
            raise FieldError(f"records[{i}].trace", "must be empty (traces travel in the traces field)")
        _check_record(record, f"records[{i}]", settings.block_size)
    return PrefillLesson(settings, model, records=records, twin_records=twin_records, traces=lesson_traces,
                  prompt_token_ids=prompt_ids, token_texts=texts, replay=True, room_answers=room_answers(payload))


def _check_record(record: StepRecord, where: str, block_size: int) -> None:
    """What the views read from a step: the lesson's one request, and a pool the stage draws block by block."""
    if len(record.requests) != 1:
        raise FieldError(f"{where}.requests", f"holds {len(record.requests)} requests where a lesson follows one")
    block_bytes = record.memory.bytes_per_token * block_size
    most = -(-MAX_REPLAY_TOKENS // block_size)  # blocks: the stage draws each of their block_size slots
    if block_bytes and record.memory.allocated_bytes // block_bytes > most:
        raise FieldError(f"{where}.memory.allocated_bytes",
                         f"makes a pool of more than {most} blocks of {block_size} tokens, "
                         "more than a lesson's tokens can fill")
    pool = record.memory.allocated_bytes // block_bytes if block_bytes else most
    request = record.requests[0]
    for name, table in [("block_table", request.block_table),
                        *((f"group_block_tables[{g}]", t) for g, t in enumerate(request.group_block_tables))]:
        if len(table) > most or any(block is not None and not 0 <= block < max(pool, 1) for block in table):
            raise FieldError(f"{where}.requests[0].{name}", f"must hold at most {most} block ids, each from 0 to "
                                                            f"{max(pool, 1) - 1} (the pool's blocks)")


def _settings(value) -> LessonSettings:
    return typed(value, LessonSettings, "settings")


def _model(value) -> dict:
    value = typed(value, dict, "model")
    model = {}
    for key in MODEL_TEXT:
        model[key] = typed(value.get(key), str, f"model.{key}")[:200]
    for key, pattern, example in (("dtype", r"[a-z][a-z0-9_]{1,23}", "float32"),
                                  ("device", r"[a-z]{2,8}(:\d{1,3})?", "cpu")):
        if not re.fullmatch(pattern, model[key]):  # the pages write these into sentences: only a name passes
            raise FieldError(f"model.{key}", f"must name a torch {key}, such as {example}")
    for key, most in MODEL_LIMITS.items():
        model[key] = check_range(typed(value.get(key), int, f"model.{key}"), 1, most, f"model.{key}")
    model["dtype_bytes"] = typed(value.get("dtype_bytes"), int, "model.dtype_bytes")
    if model["dtype_bytes"] not in (1, 2, 4, 8):
        raise FieldError("model.dtype_bytes", "must be 1, 2, 4 or 8")
    if model["heads"] % model["kv_heads"]:
        raise FieldError("model.kv_heads", f"({model['kv_heads']}) must divide model.heads ({model['heads']})")
    v_head_dim = typed(value.get("v_head_dim", model["head_dim"]), int, "model.v_head_dim")  # older files: head_dim
    model["v_head_dim"] = check_range(v_head_dim, 1, MODEL_LIMITS["head_dim"], "model.v_head_dim")
    for key in ("kv_lora_rank", "qk_rope_head_dim"):  # MLA, both or neither
        model[key] = typed(value.get(key), int | None, f"model.{key}")
        if model[key] is not None:
            check_range(model[key], 1, MAX_LATENT, f"model.{key}")
    if (model["kv_lora_rank"] is None) != (model["qk_rope_head_dim"] is None):
        raise FieldError("model.kv_lora_rank", "and model.qk_rope_head_dim must be given both or neither")
    model["sliding_window"] = typed(value.get("sliding_window"), int | None, "model.sliding_window")  # older: none
    if model["sliding_window"] is not None:
        check_range(model["sliding_window"], 1, MODEL_LIMITS["max_context"], "model.sliding_window")
    kinds = typed(value.get("layer_types"), list | None, "model.layer_types")
    if kinds is not None and (len(kinds) != model["layers"] or model["sliding_window"] is None
                              or not all(kind in ("full_attention", "sliding_attention") for kind in kinds)):
        raise FieldError("model.layer_types", f"must name each of the {model['layers']} layers full_attention or "
                                              "sliding_attention, with model.sliding_window")
    model["layer_types"] = kinds
    return model


def _trace(value, step: int, model: dict, prompt_tokens: int) -> StepTrace:
    where = f"traces[{step}]"
    value = typed(value, dict, where)
    mla = model["kv_lora_rank"] is not None
    latent_key = {"new_latents"} if mla else set()  # an MLA lesson's traces carry the cached rows too
    check_keys(value, where, {"new_keys", "new_values", "attention", "changed_rows", "logit_difference",
                         "prompt_attention"} | latent_key,
          {"new_keys", "new_values", "attention", "changed_rows", "logit_difference"} | latent_key)
    new = prompt_tokens if step == 0 else 1
    kv_shape = (model["layers"], new, model["kv_heads"], model["head_dim"])
    value_shape = kv_shape[:3] + (model["v_head_dim"],)
    attention_shape = (model["layers"], model["heads"], prompt_tokens + step)
    latents = None
    if mla:  # the rows the cache held: latent + rotary key per token and layer
        latent_shape = (model["layers"], new, model["kv_lora_rank"] + model["qk_rope_head_dim"])
        latents = _decode(value["new_latents"], latent_shape, f"{where}.new_latents")
    return StepTrace(_decode(value["new_keys"], kv_shape, f"{where}.new_keys"),
                     _decode(value["new_values"], value_shape, f"{where}.new_values"),
                     _decode(value["attention"], attention_shape, f"{where}.attention"),
                     typed(value["changed_rows"], int, f"{where}.changed_rows"),
                     typed(value["logit_difference"], float | None, f"{where}.logit_difference"),
                     _triangle(value.get("prompt_attention"), step, model, prompt_tokens, where), latents)


def _triangle(value, step: int, model: dict, prompt_tokens: int, where: str) -> np.ndarray | None:
    """The prefill's attention matrix: only at step 0, only for a prompt short enough to keep it."""
    if value is None:
        return None
    if step != 0 or prompt_tokens > MAX_TRIANGLE_TOKENS:
        raise FieldError(f"{where}.prompt_attention", "belongs only to the prefill step of a short prompt")
    shape = (model["layers"], model["heads"], prompt_tokens, prompt_tokens)
    return _decode(value, shape, f"{where}.prompt_attention")


def _encode(array: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(array, dtype="<f4").tobytes()).decode("ascii")


def _decode(value, shape: tuple, where: str) -> np.ndarray:
    if not isinstance(value, str):
        raise FieldError(where, "must be base64 text")
    expected = math.prod(shape) * 4
    if len(value) != 4 * -(-expected // 3):  # checked before decoding, so a huge field costs nothing
        raise FieldError(where, f"does not hold {'x'.join(map(str, shape))} float32 values, as the model and step "
                                "imply")
    try:
        raw = base64.b64decode(value, validate=True)
    except ValueError:
        raise FieldError(where, "is not valid base64") from None
    array = np.frombuffer(raw, dtype="<f4").astype(np.float32).reshape(shape)
    if not np.isfinite(array).all():
        raise FieldError(where, "holds a value that is not a finite number")
    return array
