"""The "Speculative decoding" lesson: one greedy request with prompt-lookup drafts, step by step,
beside the same request decoded one token per forward pass.

Each press of Step runs one forward pass of both engines, so the page can compare them pass for
pass. Every number shown comes from the two engines' StepRecords (kvviz.engine.speculative), and
every text from the decoded token lists kept beside them; never from the engines, so a run can be
exported and replayed with no model (kvviz/lessons/speculative/file.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from itertools import accumulate

from kvviz.engine.engine import Engine
from kvviz.engine.errors import EngineError
from kvviz.engine.records import StepRecord
from kvviz.engine.sampling import SamplingParams
from kvviz.engine.block_pool import blocks_needed
from kvviz.engine.config import MAX_SPECULATIVE_TOKENS

# a line that comes back like a refrain: the lookup copies it, and the model says it again
DEFAULT_PROMPT = "KING:\nI am sorry, my lord.\n\nQUEEN:\nI am sorry, my lord.\n\nKING:\n"


@dataclass(slots=True)
class DraftStep:
    """What one forward pass of the speculative engine did for the request."""

    step: int
    draft_token_ids: list[int]  # proposed by prompt lookup ([] when nothing recurred, or at prefill)
    num_accepted: int  # drafts the model agreed with, from the first
    added_token_ids: list[int]  # tokens the pass added: the accepted drafts, then the model's own
    rolled_back_slots: list[int]  # cache slots of the rejected drafts, given back
    freed_block_ids: list[int]  # blocks the rollback emptied

    @property
    def number(self) -> int:
        """This pass counted from 1, as the page counts passes: pass 1 is the prefill."""
        return self.step + 1

    @property
    def num_rejected(self) -> int:
        return len(self.draft_token_ids) - self.num_accepted


@dataclass
class SpeculativeLesson:
    engine: Engine | None  # speculative; None in a replay (the steps come from a lesson file)
    plain: Engine | None  # the same settings, no drafts
    prompt_token_ids: list[int]
    settings: dict  # prompt, num_speculative, max_tokens, block_size: what the run was asked
    records: list[StepRecord] = field(default_factory=list)
    plain_records: list[StepRecord] = field(default_factory=list)
    texts: dict[tuple[int, ...], str] = field(default_factory=dict)  # token ids -> the tokenizer's text
    released: bool = False  # freed after its session ended (kvviz.ui.live_lessons)
    model_name: str = ""
    stage_steps: list[dict] = field(default_factory=list)  # each pass as the stage draws it (stage.py), once
    room_answers: list = field(default_factory=list)  # files.RoomAnswers: what rooms answered about it

    @classmethod
    def start(cls, lm, prompt: str, num_speculative: int, max_tokens: int, block_size: int) -> "SpeculativeLesson":
        """Both engines with the request queued; raises EngineError with one sentence."""
        if not 1 <= num_speculative <= MAX_SPECULATIVE_TOKENS:
            raise EngineError(f"Draft tokens per step must be from 1 to {MAX_SPECULATIVE_TOKENS}, "
                              f"not {num_speculative}.")
        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
        prompt_ids = Engine(lm, use_cache=False, max_num_seqs=1).check_request(prompt, params)  # no pool
        # each pool holds what this request can use (its drafts too), not the model's whole context:
        # a model of a million positions took 2 x 3 GiB and 14 s to start
        most_tokens = min(len(prompt_ids) + max_tokens + num_speculative + 1, lm.max_context)
        settings = dict(block_size=block_size, max_num_seqs=1, max_num_batched_tokens=1024,
                        num_blocks=blocks_needed(most_tokens, block_size))
        engine = Engine(lm, speculative_tokens=num_speculative, **settings)
        plain = Engine(lm, **settings)
        for each in (engine, plain):
            each.add_request(prompt_ids, params)
        asked = dict(prompt=prompt, num_speculative=num_speculative, max_tokens=max_tokens, block_size=block_size)
        lesson = cls(engine, plain, list(engine.requests[0].prompt_token_ids), asked, model_name=lm.name)
        lesson._keep_texts(*[[t] for t in lesson.prompt_token_ids])
        return lesson

    @property
    def replay(self) -> bool:
        return self.engine is None

    def release(self) -> None:
        """Drop both engines and the records (the session that owned this lesson has ended)."""
        self.engine = self.plain = None
        self.records.clear()
        self.plain_records.clear()
        self.released = True

    @property
    def drafts_done(self) -> bool:
        """The speculative engine's request has finished (read from its last record)."""
        return _done(self.records)

    @property
    def finished(self) -> bool:
        return self.drafts_done and _done(self.plain_records)

    def step(self) -> bool:
        """One forward pass of each engine that has work left; False once both are done."""
        if self.replay or self.finished:
            return False
        if not self.drafts_done:
            self.records.append(self.engine.step())
            row = self.draft_steps()[-1]
            self._keep_texts(row.draft_token_ids, row.added_token_ids, self.output(len(self.records) - 1),
                             *[[t] for t in row.draft_token_ids + row.added_token_ids])
        if not _done(self.plain_records):
            self.plain_records.append(self.plain.step())
            self._keep_texts(self.output(len(self.plain_records) - 1, plain=True))
        return True

    def _keep_texts(self, *token_lists: list[int]) -> None:
        tokenizer = self.engine.tokenizer
        for ids in token_lists:
            if tokenizer is not None and tuple(ids) not in self.texts:
                self.texts[tuple(ids)] = tokenizer.decode(ids)

    def decode(self, token_ids: list[int]) -> str:
        """The text of tokens the page shows, as the tokenizer gave it during the run."""
        text = self.texts.get(tuple(token_ids))
        if text is None:  # not kept (a run without a tokenizer): the token ids themselves
            return " ".join(self.texts.get((t,), f"#{t}") for t in token_ids)
        return text

    # ---- drawn from the records --------------------------------------------------------------
    def draft_steps(self) -> list[DraftStep]:
        """One row per forward pass of the speculative engine."""
        rows = []
        for record in self.records:
            draft = record.drafts[0] if record.drafts else None
            rows.append(DraftStep(record.step, draft.draft_token_ids if draft else [],
                                  draft.num_accepted if draft else 0, [t for _, t in record.sampled],
                                  draft.rolled_back_slots if draft else [], draft.freed_block_ids if draft else []))
        return rows

    def output(self, step: int, plain: bool = False) -> list[int]:
        """Tokens generated after `step` forward passes (the first pass is step 0)."""
        records = (self.plain_records if plain else self.records)[:step + 1]
        return [t for record in records for _, t in record.sampled]

    def tokens_by_pass(self, step: int, plain: bool = False) -> list[int]:
        """Tokens generated so far after each forward pass, up to `step`."""
        records = (self.plain_records if plain else self.records)[:step + 1]
        return list(accumulate(len(record.sampled) for record in records))

    def summary(self, step: int) -> dict:
        """The comparison after `step` forward passes of each engine."""
        rows = self.draft_steps()[:step + 1]
        passes, plain_passes = len(rows), min(step + 1, len(self.plain_records))
        tokens, plain_tokens = self.output(step), self.output(step, plain=True)
        proposed = sum(len(r.draft_token_ids) for r in rows)
        accepted = sum(r.num_accepted for r in rows)
        shared = min(len(tokens), len(plain_tokens))
        return {
            "passes": passes, "plain_passes": plain_passes,
            "tokens": len(tokens), "plain_tokens": len(plain_tokens),
            "tokens_per_pass": len(tokens) / passes if passes else 0.0,
            "proposed": proposed, "accepted": accepted,
            "acceptance": accepted / proposed if proposed else 0.0,
            "rolled_back_slots": sum(len(r.rolled_back_slots) for r in rows),
            "freed_blocks": sum(len(r.freed_block_ids) for r in rows),
            "same_tokens": tokens[:shared] == plain_tokens[:shared],
        }

    def totals(self) -> dict:
        """Both whole runs: forward passes each needed, and whether they gave the same tokens."""
        return {"passes": len(self.records), "plain_passes": len(self.plain_records),
                "same_tokens": self.output(len(self.records)) == self.output(len(self.plain_records), plain=True)}


def _done(records: list[StepRecord]) -> bool:
    return bool(records) and all(r.status == "finished" for r in records[-1].requests)


def run_workload(lm, prompts: list[str], max_tokens: int, num_speculative: int = 0) -> dict:
    """Each prompt alone through one engine (batch 1, where speculation pays): the outputs, the
    forward passes and the wall-clock seconds, for scripts/bench_speculative.py."""
    engine = Engine(lm, speculative_tokens=num_speculative, max_num_seqs=1)
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    outputs, passes = [], 0
    start = time.perf_counter()
    for prompt in prompts:
        request_id = engine.add_request(prompt, params)
        while engine.has_unfinished():
            engine.step()
            passes += 1
        outputs.append(engine.output(request_id).token_ids)
    seconds = time.perf_counter() - start
    return {"outputs": outputs, "passes": passes, "seconds": seconds, "tokens": sum(map(len, outputs)),
            "accepted": engine.stats["accepted_tokens"], "proposed": engine.stats["draft_tokens"]}
