"""The first lesson's logic: one request, prefill then decode, with a no-cache twin beside it.

A `Lesson` runs the real engine one step at a time and keeps every StepRecord, so any earlier
step can be looked at again. A second engine without a cache runs the same request, so the
lesson can show the work the cache saves and that caching changes no logit.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import numpy as np

from kvviz.engine import Engine, SamplingParams, StepRecord
from kvviz.memory import ModelShape, bill_breakdown

MAX_RECORDS = 400  # a lesson longer than this keeps its first and latest steps only


@dataclass
class LessonSettings:
    prompt: str
    max_tokens: int = 64
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = 0
    block_size: int = 16

    def sampling(self) -> SamplingParams:
        return SamplingParams(max_tokens=self.max_tokens, temperature=self.temperature, top_k=self.top_k,
                              top_p=self.top_p, seed=self.seed, ignore_eos=True)


@dataclass
class Lesson:
    """One request stepped through the cached engine and its no-cache twin."""

    settings: LessonSettings
    model_info: dict
    records: list[StepRecord] = field(default_factory=list)
    twin_records: list[StepRecord] = field(default_factory=list)
    prompt_token_ids: list[int] = field(default_factory=list)
    token_texts: list[str] = field(default_factory=list)  # every token so far, as text
    notes: list[str] = field(default_factory=list)
    engine: Engine | None = None
    twin: Engine | None = None
    tokenizer: object | None = None
    replay: bool = False  # loaded from a file: no model, steps come from the records
    replay_position: int = 0  # in a replay, the last step revealed so far

    @classmethod
    def start(cls, lm, settings: LessonSettings) -> "Lesson":
        """Check the prompt and build the engines; nothing runs until `prefill`."""
        engine = Engine(lm, block_size=settings.block_size, max_num_seqs=1,
                        num_blocks=-(-lm.max_context // settings.block_size) + 1)
        twin = Engine(lm, use_cache=False, max_num_seqs=1, max_num_batched_tokens=lm.max_context)
        prompt_ids = engine.check_request(settings.prompt, settings.sampling())
        lesson = cls(settings, lm.describe(), engine=engine, twin=twin, tokenizer=lm.tokenizer)
        lesson.prompt_token_ids = prompt_ids
        lesson.token_texts = [lesson.token_text(t) for t in prompt_ids]
        return lesson

    def token_text(self, token_id: int) -> str:
        if self.tokenizer is None:
            return f"#{token_id}"
        return self.tokenizer.decode([token_id])

    # ---- stepping ------------------------------------------------------------------------
    @property
    def started(self) -> bool:
        return bool(self.records)

    @property
    def finished(self) -> bool:
        if self.replay:
            return self.replay_position >= len(self.records) - 1
        return self.started and not self.engine.has_unfinished()

    @property
    def visible_records(self) -> list[StepRecord]:
        """The steps revealed so far (a replay reveals its recorded steps one at a time)."""
        return self.records[:self.replay_position + 1] if self.replay else self.records

    def prefill(self) -> StepRecord:
        assert not self.started, "prefill runs once; reset the lesson to start again"
        params = self.settings.sampling()
        self.engine.add_request(self.prompt_token_ids, params, trace=True)
        self.twin.add_request(self.prompt_token_ids, params, trace=True)
        return self._step()

    def next_token(self) -> StepRecord | None:
        if self.replay:
            if self.finished:
                return None
            self.replay_position += 1
            return self.records[self.replay_position]
        if not self.started:
            return self.prefill()
        if self.finished:
            return None
        return self._step()

    def _step(self) -> StepRecord:
        record = self.engine.step()
        self.twin_records.append(self.twin.step())
        self.records.append(record)
        for _, token in record.sampled:
            self.token_texts.append(self.token_text(token))
        if len(self.records) > MAX_RECORDS:  # keep memory per session bounded
            self._drop_trace(len(self.records) - MAX_RECORDS - 1)
        return record

    def _drop_trace(self, index: int) -> None:
        if index > 0 and self.records[index].trace is not None:
            self.records[index].trace = None
            self.twin_records[index].trace = None
            if not self.notes:
                self.notes.append(f"Only the latest {MAX_RECORDS} steps keep their keys and values.")

    # ---- what the views show -------------------------------------------------------------
    def num_tokens_at(self, step: int) -> int:
        """Tokens in the cache after `step` (0 is prefill)."""
        return self.records[step].trace.keys.shape[1] if self.records[step].trace is not None \
            else len(self.prompt_token_ids) + step

    def entered_step(self, step: int) -> list[int]:
        """For each token position after `step`: the step at which it entered the cache."""
        prompt = len(self.prompt_token_ids)
        return [0] * prompt + list(range(1, step + 1))

    def logit_difference(self, step: int) -> float | None:
        """Largest |logit with cache - logit without| at `step`: the proof caching changes nothing."""
        cached, fresh = self.records[step].trace, self.twin_records[step].trace
        if cached is None or fresh is None or cached.logits is None or fresh.logits is None:
            return None
        return float(np.abs(cached.logits - fresh.logits).max())

    def work(self) -> list[dict]:
        """Per step: tokens run through the model, with and without the cache (counts, not times)."""
        rows, with_total, without_total = [], 0, 0
        for step, (cached, fresh) in enumerate(zip(self.visible_records, self.twin_records)):
            with_total += cached.num_tokens_run
            without_total += fresh.num_tokens_run
            rows.append({"step": step, "with_cache_tokens": cached.num_tokens_run,
                         "without_cache_tokens": fresh.num_tokens_run,
                         "with_cache_total": with_total, "without_cache_total": without_total,
                         "max_logit_difference": self.logit_difference(step)})
        return rows

    def bill(self, step: int, dtype_bytes: int) -> dict:
        """The formula for this request's tokens beside the bytes the engine's blocks hold."""
        record = self.records[step]
        shape = ModelShape(name=self.model_info["name"], num_layers=self.model_info["layers"],
                           num_kv_heads=self.model_info["kv_heads"], head_dim=self.model_info["head_dim"])
        tokens = self.num_tokens_at(step)
        lines = bill_breakdown(shape, tokens=tokens, batch=1, dtype_bytes=dtype_bytes)
        return {"tokens": tokens, "formula": [line.formula for line in lines],
                "formula_bytes": sum(line.num_bytes for line in lines),
                "token_bytes": record.memory.token_bytes, "block_bytes": record.memory.used_block_bytes,
                "slack_bytes": record.memory.slack_bytes, "pool_bytes": record.memory.allocated_bytes,
                "bytes_per_token": record.memory.bytes_per_token}


# ---- export and replay -----------------------------------------------------------------------
LESSON_FORMAT = "kvviz-lesson/1"
MAX_LESSON_BYTES = 50 * 2**20


class LessonFileError(ValueError):
    """An uploaded lesson file that kvviz will not replay; the message says why."""


def export_lesson(lesson: Lesson) -> str:
    """The lesson as JSON: settings, model summary and every step record. No code, no pickle."""
    return json.dumps({
        "format": LESSON_FORMAT, "model": lesson.model_info, "settings": asdict(lesson.settings),
        "prompt_token_ids": lesson.prompt_token_ids, "token_texts": lesson.token_texts,
        "records": [r.to_dict() for r in lesson.records],
        "twin_records": [r.to_dict() for r in lesson.twin_records],
    })


def import_lesson(data: bytes | str) -> Lesson:
    """Rebuild a lesson for replay from `export_lesson` output, checking everything first."""
    if len(data) > MAX_LESSON_BYTES:
        raise LessonFileError(f"The file is {len(data) / 2**20:.1f} MiB, over the "
                              f"{MAX_LESSON_BYTES // 2**20} MiB limit; export a shorter lesson.")
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        payload = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise LessonFileError("This is not a kvviz lesson file (not JSON text); "
                              "upload a file saved with “Export lesson”.") from None
    if not isinstance(payload, dict) or payload.get("format") != LESSON_FORMAT:
        raise LessonFileError("This JSON is not a kvviz lesson (its format field is missing or unknown); "
                              "upload a file saved with “Export lesson”.")
    try:
        settings = LessonSettings(**payload["settings"])
        records = [StepRecord.from_dict(r) for r in payload["records"]]
        twin_records = [StepRecord.from_dict(r) for r in payload["twin_records"]]
        prompt_ids = [int(t) for t in payload["prompt_token_ids"]]
        texts = [str(t) for t in payload["token_texts"]]
        model = dict(payload["model"])
        for key in ("name", "layers", "heads", "kv_heads", "head_dim", "dtype_bytes"):
            model[key]  # noqa: B018 - a KeyError means a damaged file
    except (KeyError, TypeError, ValueError) as error:
        raise LessonFileError(f"The lesson file is damaged ({type(error).__name__}: {str(error)[:80]}); "
                              "export it again from kvviz.") from None
    if not records or len(records) != len(twin_records):
        raise LessonFileError("The lesson file holds no steps; export a lesson after pressing Prefill.")
    return Lesson(settings, model, records=records, twin_records=twin_records,
                  prompt_token_ids=prompt_ids, token_texts=texts, replay=True)
