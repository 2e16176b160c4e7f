"""The first lesson's logic: one request, prefill then decode, with a no-cache twin beside it.

A `PrefillLesson` runs the real engine one step at a time and keeps every StepRecord, so any earlier
step can be looked at again. A second engine without a cache runs the same request, so the
lesson can show the work the cache saves and that caching changes no logit.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from kvviz.engine.batch import TRIANGLE_MOST_TOKENS
from kvviz.engine.engine import Engine
from kvviz.engine.errors import EngineError
from kvviz.engine.records import StepRecord
from kvviz.engine.sampling import SamplingParams
from kvviz.engine.token_text import piece_text
from kvviz.engine.block_pool import blocks_needed
from kvviz.engine.chat import chat_answer, chat_params, chat_prompt
from kvviz.engine.config import DEFAULTS
from kvviz.engine.records import TraceRecord
from kvviz.lessons.budget import ModelCost, Work, most_that_fits, timed
from kvviz.memory_bill import bill_breakdown, bytes_per_token_by_kind
from kvviz.models import summary_shape
from kvviz.shapes import FULL, SLIDING

MAX_LESSON_TOKENS = 256  # the longest lesson a page, a link or a file may ask for
MAX_TRIANGLE_TOKENS = TRIANGLE_MOST_TOKENS  # prompts up to this long keep the prefill's whole attention matrix
# The no-cache twin runs every token so far again at each step: that is the cost the cache saves, and past
# this many FLOPs a step (about 0.25 s on a 2-core CPU; SmolLM2 at about 185 tokens, the bundled model at
# thousands) it would be most of a click. It stops there: the work table counts its tokens from then on,
# and the logits were compared at every step it ran. (A 1,548-token SmolLM2 lesson spent 4.3-4.9 s a
# Next token on it.)
TWIN_MOST_FLOPS = 5e10


def lesson_sampling(**changes) -> SamplingParams:
    """The lesson's SamplingParams: 64 greedy tokens, seed 0, and no stop at the end-of-text token,
    so the lesson runs every step it asked for; `changes` as SamplingParams' own keywords."""
    return SamplingParams(**{"max_tokens": 64, "seed": 0, "ignore_eos": True, **changes})


@dataclass
class LessonSettings:
    prompt: str
    sampling: SamplingParams = field(default_factory=lesson_sampling)  # max_tokens: the steps after the prefill
    block_size: int = DEFAULTS.block_size
    chat: bool = False  # the prompt is a chat message: the model's template applied, decoding stops at its turn's end


@dataclass
class StepTrace:
    """What one step added to the traced request, kept compact: the history is rebuilt on demand."""

    new_keys: np.ndarray  # (layers, new_tokens, kv_heads, head_dim): rows written this step
    new_values: np.ndarray  # (layers, new_tokens, kv_heads, head_dim)
    attention: np.ndarray  # (layers, heads, tokens): the newest token's attention weights
    changed_rows: int  # earlier positions whose K or V differ from the step before (0: the cache works)
    logit_difference: float | None  # largest |logit with cache - logit without| at this step
    prompt_attention: np.ndarray | None = None  # (layers, heads, T, T): the prefill's causal triangle
    new_latents: np.ndarray | None = None  # MLA: (layers, new_tokens, latent + rope), the rows the cache holds


@dataclass
class PrefillLesson:
    """One request stepped through the cached engine and its no-cache twin."""

    settings: LessonSettings
    model_info: dict
    records: list[StepRecord] = field(default_factory=list)
    twin_records: list[StepRecord] = field(default_factory=list)
    prompt_token_ids: list[int] = field(default_factory=list)
    token_texts: list[str] = field(default_factory=list)  # every token so far, as text
    traces: list[StepTrace] = field(default_factory=list)
    engine: Engine | None = None
    twin: Engine | None = None
    twin_cost: ModelCost | None = None  # the twin's FLOPs per step, to stop it past TWIN_MOST_FLOPS
    tokenizer: object | None = None
    replay: bool = False  # loaded from a file: no model, steps come from the records
    replay_position: int = 0  # in a replay, the last step revealed so far
    released: bool = False  # freed after its session ended
    stage_steps: list[dict] = field(default_factory=list)  # each step as the stage draws it (stage.py), once
    room_answers: list = field(default_factory=list)  # files.RoomAnswers: what rooms answered about it
    done_at_copy: bool | None = None  # a room's copy of a lesson (room.follower): had it finished there

    @classmethod
    def start(cls, lm, settings: LessonSettings) -> "PrefillLesson":
        """Check the prompt and build the engines; nothing runs until `prefill`."""
        max_tokens = settings.sampling.max_tokens
        if not 1 <= max_tokens <= MAX_LESSON_TOKENS:
            raise EngineError(f"A lesson generates 1 to {MAX_LESSON_TOKENS} tokens, not {max_tokens}.")
        if settings.sampling.n != 1:
            raise EngineError(f"A lesson follows one sequence, not n={settings.sampling.n}; set n to 1.")
        twin = Engine(lm, use_cache=False, max_num_seqs=1, max_num_batched_tokens=lm.max_context)
        prompt = settings.prompt
        if settings.chat:
            try:
                turn = chat_prompt(lm.tokenizer, settings.prompt)
            except ValueError as error:
                raise EngineError(str(error)) from None
            prompt, settings = turn.token_ids, replace(settings, sampling=chat_params(turn, settings.sampling))
        prompt_ids = twin.check_request(prompt, settings.sampling)
        # the pool holds what this lesson can use, not the model's whole context
        most_tokens = min(len(prompt_ids) + max_tokens, lm.max_context)
        engine = Engine(lm, block_size=settings.block_size, max_num_seqs=1,
                        num_blocks=blocks_needed(most_tokens, settings.block_size))
        engine.check_request(prompt_ids, settings.sampling)
        lesson = cls(settings, lm.describe(), engine=engine, twin=twin, twin_cost=ModelCost.of(lm.model),
                     tokenizer=lm.tokenizer)
        lesson.prompt_token_ids = prompt_ids
        lesson.token_texts = [lesson.token_text(t) for t in prompt_ids]
        return lesson

    def answer(self) -> str | None:
        """A chat lesson's answer so far, without the template's special tokens (None: not a chat, or a replay)."""
        if not self.settings.chat or self.tokenizer is None:
            return None
        return chat_answer(self.tokenizer, [token for record in self.records for _, token in record.sampled])

    def answer_tail(self, most_chars: int) -> str | None:
        """The answer's last `most_chars` characters or fewer, from a word's start, "…" before them: one line
        of the page, however long the answer grows (the newest words are the ones a class watches arrive)."""
        answer = self.answer()
        if answer is None or len(answer) <= most_chars:
            return answer
        tail = answer[-most_chars:]
        space = tail.find(" ")
        return "…" + (tail[space:] if 0 <= space < most_chars // 3 else tail)

    def token_text(self, token_id: int) -> str:
        if self.tokenizer is None:
            return f"#{token_id}"
        return piece_text(self.tokenizer, token_id)  # a piece of an emoji shows its bytes, not U+FFFD

    # ---- stepping ------------------------------------------------------------------------
    @property
    def started(self) -> bool:
        return bool(self.records)

    @property
    def finished(self) -> bool:
        if self.done_at_copy is not None:
            return self.done_at_copy
        if self.replay:
            return self.replay_position >= len(self.records) - 1
        return self.started and not self.engine.has_unfinished()

    def last_step(self) -> int:
        """The step this lesson will end at: each step after the prefill samples one token, until
        max_tokens are out or the model ends its answer (then, and in a replay, the last step taken)."""
        if not self.started or self.finished or (self.replay and self.done_at_copy is None):
            return max(len(self.records) - 1, 0)
        sampled = sum(len(record.sampled) for record in self.records)
        return len(self.records) - 1 + max(self.settings.sampling.max_tokens - sampled, 0)

    @property
    def visible_records(self) -> list[StepRecord]:
        """The steps revealed so far (a replay reveals its recorded steps one at a time)."""
        return self.records[:self.replay_position + 1] if self.replay else self.records

    def prefill(self) -> StepRecord:
        assert not self.started, "prefill runs once; reset the lesson to start again"
        params = self.settings.sampling
        self.engine.add_request(self.prompt_token_ids, params, trace=True)
        self.twin.add_request(self.prompt_token_ids, params, trace=True)
        return self._step()

    def next_token(self) -> StepRecord | None:
        if self.replay:  # a follower's copy kept when its room went away says "not finished" at its last step
            if self.finished or self.replay_position >= len(self.records) - 1:
                return None
            self.replay_position += 1
            return self.records[self.replay_position]
        if not self.started:
            return self.prefill()
        if self.finished:
            return None
        return self._step()

    def twin_runs_next(self) -> bool:
        """Whether the no-cache twin runs the next step: while its pass over every token stays cheap."""
        if self.twin is None or self.twin_cost is None:
            return False
        tokens = len(self.prompt_token_ids) + len(self.records)  # what it would run: all of them
        return self.twin_cost.forward(tokens, 0) <= TWIN_MOST_FLOPS

    def step_work(self, twin_runs: bool) -> Work:
        """The next step's work, as lesson_work counts it: one traced engine step (the prompt, or one token
        after the cache) and, when `twin_runs`, the twin's traced pass over every token so far."""
        cost, cached = self.twin_cost, len(self.prompt_token_ids) + len(self.records) - 1
        if cost is None:
            return Work(click="lesson")
        flops = cost.forward(len(self.prompt_token_ids), 0) if not self.records else cost.forward(1, cached)
        if twin_runs:
            flops += cost.forward(cached + 1, 0)
        steps = 1 + twin_runs
        return Work(flops, steps=steps, read_backs=steps, read_back_tokens=steps * (cached + 1),
                    step_scale=cost.step_scale, click="lesson")

    def _step(self) -> StepRecord:
        twin_runs = self.twin_runs_next()
        if not twin_runs and self.twin is not None:
            self.twin = None  # stopped for good: its pool and model references go now
        with timed(self.step_work(twin_runs), self.engine.device):  # this server's pace: kvviz.lessons.budget
            record = self.engine.step()
            twin_record = self.twin.step() if twin_runs else None
            self.traces.append(self._compact(record.trace, twin_record.trace if twin_record else None))
        record.trace = None  # the full read-back grows with every step
        self.records.append(record)
        if twin_record is not None:
            twin_record.trace = None
            self.twin_records.append(twin_record)
        for _, token in record.sampled:
            self.token_texts.append(self.token_text(token))
        return record

    def _compact(self, cached: TraceRecord, fresh: TraceRecord | None) -> StepTrace:
        """Keep only this step's new K/V rows; check the older rows against what was kept."""
        before = self.num_tokens_at(len(self.traces) - 1) if self.traces else 0
        changed = 0
        if before:
            old = self.trace(len(self.traces) - 1)
            if cached.latents is not None:  # MLA: the cache holds latent rows; K and V are rebuilt from them
                moved = np.abs(cached.latents[:, :before] - old.latents).max(axis=(0, 2))  # (tokens,)
            else:
                moved = np.maximum(np.abs(cached.keys[:, :before] - old.keys).max(axis=(0, 2, 3)),
                                   np.abs(cached.values[:, :before] - old.values).max(axis=(0, 2, 3)))  # (tokens,)
            changed = int((moved > 0).sum())
        difference = None
        if fresh is not None and cached.logits is not None and fresh.logits is not None:
            difference = float(np.abs(cached.logits - fresh.logits).max())
        triangle = None  # kept for prompts short enough that it stays small (T^2 per head and layer)
        if not before and cached.prompt_attention is not None and cached.keys.shape[1] <= MAX_TRIANGLE_TOKENS:
            triangle = cached.prompt_attention.copy()
        latents = None if cached.latents is None else cached.latents[:, before:].copy()
        return StepTrace(cached.keys[:, before:].copy(), cached.values[:, before:].copy(),
                         cached.attention.copy(), changed, difference, triangle, latents)

    def twin_note(self) -> str | None:
        """A sentence when the no-cache twin stopped before the lesson's newest step, else None."""
        if len(self.twin_records) >= len(self.records) or not self.records:
            return None
        ran = len(self.twin_records)
        return (f"The no-cache twin ran the first {ran} step{'s' if ran != 1 else ''} and compared their logits; "
                f"from step {ran} on, each of its steps would run all {len(self.prompt_token_ids) + ran:,}+ tokens "
                "again (the very work the cache saves), so it stopped and the table counts those tokens instead.")

    def release(self) -> None:
        """Drop the engines and traces (the session that owned this lesson has ended)."""
        self.engine = self.twin = None
        self.traces.clear()
        self.records.clear()
        self.twin_records.clear()
        self.stage_steps.clear()
        self.released = True

    # ---- what the views show -------------------------------------------------------------
    def num_tokens_at(self, step: int) -> int:
        """Tokens in the cache after `step` (0 is prefill)."""
        return sum(t.new_keys.shape[1] for t in self.traces[:step + 1])

    def trace(self, step: int) -> TraceRecord:
        """The traced request after `step`: every cached K/V row so far and this step's attention."""
        kept = self.traces[:step + 1]
        latents = None
        if all(t.new_latents is not None for t in kept):  # MLA
            latents = np.concatenate([t.new_latents for t in kept], axis=1)  # (layers, tokens, latent + rope)
        return TraceRecord(request_id=0,
                           keys=np.concatenate([t.new_keys for t in kept], axis=1),  # (layers, tokens, kv, hd)
                           values=np.concatenate([t.new_values for t in kept], axis=1),
                           attention=kept[-1].attention, logits=None, latents=latents)

    def group_tables(self, step: int) -> list[list[int | None]]:
        """Each layer group's block table during `step` (a model with sliding layers; [] otherwise), None where a
        sliding window gave a block back. In the step a request finishes its tables are empty: they are read from
        each group's "finish" event, which gives back the blocks still held, in order."""
        record = self.records[step]
        request = record.requests[0]
        if request.status != "finished":
            return [list(table) for table in request.group_block_tables] if len(request.group_block_tables) > 1 else []
        finished = {event.group: list(event.block_ids) for event in record.events
                    if event.kind == "finish" and event.request_id == request.request_id}
        if len(finished) < 2:
            return []
        logical_blocks = len(finished[0])  # the full layers hold every block
        return [[None] * (logical_blocks - len(finished[g])) + finished[g] for g in sorted(finished)]

    def given_back(self, step: int) -> int:
        """How many of the oldest positions the sliding layers have given back after `step`: whole blocks, those
        their window has passed (0 for a model without sliding layers)."""
        tables = self.group_tables(step)
        if len(tables) < 2:
            return 0
        oldest = next((logical for logical, block in enumerate(tables[-1]) if block is not None), len(tables[-1]))
        return oldest * self.settings.block_size

    def entered_step(self, step: int) -> list[int]:
        """For each token position after `step`: the step at which it entered the cache."""
        prompt = len(self.prompt_token_ids)
        return [0] * prompt + list(range(1, step + 1))

    def logit_difference(self, step: int) -> float | None:
        """Largest |logit with cache - logit without| at `step`: the proof caching changes nothing."""
        return self.traces[step].logit_difference

    def work(self) -> list[dict]:
        """Per step: tokens run through the model, with and without the cache (counts, not times). Past the
        twin's last step (TWIN_MOST_FLOPS) "without" counts what it would have run: every token so far."""
        rows, with_total, without_total = [], 0, 0
        for step, cached in enumerate(self.visible_records):
            without = (self.twin_records[step].num_tokens_run if step < len(self.twin_records)
                       else len(self.prompt_token_ids) + step)
            with_total, without_total = with_total + cached.num_tokens_run, without_total + without
            rows.append({"step": step, "with_cache_tokens": cached.num_tokens_run, "without_cache_tokens": without,
                         "with_cache_total": with_total, "without_cache_total": without_total,
                         "max_logit_difference": self.logit_difference(step)})
        return rows

    def held(self, step: int) -> tuple[list[int], int, bool]:
        """(the blocks the request held during `step`, the tokens cached in them, whether it finished then).

        A request's blocks go back to the pool in the step it finishes, so that step's record holds
        none: they are read from the step's "finish" event, which lists the blocks it gave back."""
        request = self.records[step].requests[0]
        if request.status != "finished":
            return list(request.block_table), request.num_computed_tokens, False
        returned = next((e.block_ids for e in self.records[step].events
                         if e.kind == "finish" and e.request_id == request.request_id), [])
        return list(returned), request.num_computed_tokens, True

    def bill(self, step: int, dtype_bytes: int) -> dict:
        """The formula for this request's tokens beside the bytes its blocks held during `step`.

        Measured from the engine's block table and the bytes of one token's K and V in its tensors,
        as the engine's MemoryRecord counts them; at the last step, what the request held before its
        blocks went back to the pool ("returned")."""
        record = self.records[step]
        shape = summary_shape(self.model_info)  # a replayed lesson has the summary, not the model
        tokens = self.num_tokens_at(step)
        lines = bill_breakdown(shape, tokens=tokens, batch=1, dtype_bytes=dtype_bytes)
        blocks, cached_tokens, returned = self.held(step)
        per_token = record.memory.bytes_per_token
        block_bytes = len(blocks) * self.settings.block_size * per_token
        token_bytes, slack_slots = cached_tokens * per_token, len(blocks) * self.settings.block_size - cached_tokens
        tables, group_blocks = self.group_tables(step), []
        if tables and not returned:  # sliding layers: each group's blocks, as the engine measured them
            group_blocks = [sum(block is not None for block in table) for table in tables]
            blocks = [block for table in tables for block in table if block is not None]
            block_bytes, token_bytes = record.memory.used_block_bytes, record.memory.token_bytes
        elif tables:
            # it finished in this step and its blocks went back: each group's counted from its finish event (an
            # all-layers count would bill the sliding layers for every position, past their window)
            size, by_kind = self.settings.block_size, bytes_per_token_by_kind(shape, dtype_bytes)
            group_blocks = [sum(block is not None for block in table) for table in tables]
            sliding_held = cached_tokens - self.given_back(step)  # positions the sliding layers still hold
            token_bytes = cached_tokens * by_kind.get(FULL, 0) + sliding_held * by_kind.get(SLIDING, 0)
            block_bytes = size * (group_blocks[0] * by_kind.get(FULL, 0) + group_blocks[-1] * by_kind.get(SLIDING, 0))
            blocks = [block for table in tables for block in table if block is not None]
            slack_slots = len(blocks) * size - cached_tokens - sliding_held
        # a sliding layer gives a block back only once its window has passed all of the block's positions: its
        # oldest block may still hold positions outside the window, which the formula (the window alone) leaves out
        outside, outside_bytes = 0, 0
        if group_blocks and shape.sliding_window and tokens > shape.sliding_window:
            outside = max(0, tokens - shape.sliding_window - self.given_back(step))
            outside_bytes = outside * bytes_per_token_by_kind(shape, dtype_bytes).get(SLIDING, 0)
        return {"tokens": tokens, "formula": [line.formula for line in lines],
                "outside_window": outside, "outside_window_bytes": outside_bytes, "window": shape.sliding_window,
                "formula_bytes": sum(line.num_bytes for line in lines),
                "token_bytes": token_bytes, "blocks": len(blocks), "block_bytes": block_bytes,
                "slack_slots": slack_slots,
                "slack_bytes": block_bytes - token_bytes, "returned": returned, "group_blocks": group_blocks,
                "pool_bytes": record.memory.allocated_bytes, "bytes_per_token": per_token,
                "stores": ("one latent row (latent + RoPE key) for each layer" if shape.kv_lora_rank is not None
                           else "K and V for each layer and KV head")}


def lesson_work(lm, prompt_tokens: int, last_step: int) -> Work:
    """What a lesson runs from its prefill to `last_step` (0: the prefill alone): at each step one
    engine step of the cached engine (the prompt, then one token after the cache) and, while it stays
    under TWIN_MOST_FLOPS, one of its no-cache twin, which runs every token so far again; each traced and
    read back."""
    cost = ModelCost.of(lm.model)
    last_step = min(last_step, max(lm.max_context - prompt_tokens, 0))  # the lesson stops at the context
    flops, twin_steps, positions = cost.forward(prompt_tokens, 0), 0, 0
    for step in range(0, last_step + 1):
        if step:
            flops += cost.forward(1, prompt_tokens + step - 1)
        positions += prompt_tokens + step  # the context each traced step reads back
        twin = cost.forward(prompt_tokens + step, 0)
        if twin <= TWIN_MOST_FLOPS and twin_steps == step:  # once stopped, it stays stopped
            flops, twin_steps, positions = flops + twin, twin_steps + 1, positions + prompt_tokens + step
    steps = last_step + 1 + twin_steps
    return Work(flops, steps=steps, read_backs=steps, read_back_tokens=positions, step_scale=cost.step_scale,
                click="lesson")


def furthest_step(lm, prompt_tokens: int, target: int, device) -> int:
    """The furthest step up to `target` a lesson reaches within one click's budget; -1 when not even the prefill."""
    return most_that_fits(lambda step: lesson_work(lm, prompt_tokens, step).seconds(device), target)


def per_token_formula(info: dict) -> str:
    """What one token costs in the cache, factor by factor, from a model summary (LoadedModel.describe())."""
    if info.get("kv_lora_rank"):  # MLA: one latent row per layer, shared by every head
        return (f"{info['layers']} layers × ({info['kv_lora_rank']} latent + {info['qk_rope_head_dim']} RoPE) "
                f"values × {info['dtype_bytes']} bytes")
    return (f"2 (K and V) × {info['layers']} layers × {info['kv_heads']} KV heads × "
            f"{info['head_dim']} values × {info['dtype_bytes']} bytes")


def steps_text(num_steps: int) -> str:
    """A lesson's steps as the pages count them: "prefill + 47 decode steps" for 48 step records."""
    decode = num_steps - 1
    return "prefill only" if decode == 0 else f"prefill + {decode} decode step{'s' if decode > 1 else ''}"
