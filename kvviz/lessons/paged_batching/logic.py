"""The "Paged cache and batching" lesson: several requests through the real engine, step by step.

Requests arrive at chosen steps, share a pool of blocks, and may share a cached prefix. Each
step keeps the engine's StepRecord and the requests' texts so far; the views read block tables,
the pool, the events and the texts from those alone (never the engine), and compare the paged
pool with a contiguous max-length reservation. So a run can be exported and replayed with no
model (kvviz/lessons/paged_batching/file.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvviz.engine.engine import Engine
from kvviz.engine.errors import EngineError
from kvviz.engine.records import StepRecord
from kvviz.engine.sampling import SamplingParams
from kvviz.engine.records import PoolReplay
from kvviz.lessons.paged_batching.events import PoolSteps

SYSTEM_PROMPT = "A hall in the castle. Enter the court, with lords and attendants.\n\n"
DEFAULT_REQUESTS = [
    (SYSTEM_PROMPT + "HAMLET:\n", 0, 40),
    (SYSTEM_PROMPT + "OPHELIA:\n", 2, 24),
    ("KING:\nOur hour is come", 4, 32),
    (SYSTEM_PROMPT + "HORATIO:\n", 8, 16),
]


@dataclass
class RequestSpec:
    prompt: str
    arrival_step: int = 0
    max_tokens: int = 32


@dataclass
class PagedLesson(PoolSteps):
    specs: list[RequestSpec]
    engine: Engine | None  # None in a replay: the steps come from a lesson file
    max_context: int
    block_size: int
    num_blocks: int
    enable_prefix_caching: bool
    records: list[StepRecord] = field(default_factory=list)
    texts: list[dict[int, str]] = field(default_factory=list)  # per step: request id -> its output decoded
    request_ids: dict[int, int] = field(default_factory=dict)  # spec index -> engine request id
    prompt_lengths: dict[int, int] = field(default_factory=dict)  # request id -> prompt tokens
    model_name: str = ""
    stage_steps: list[dict] = field(default_factory=list)  # each step as the stage draws it (stage.py), once
    room_answers: list = field(default_factory=list)  # files.RoomAnswers: what rooms answered about it
    pool: PoolReplay | None = field(default=None, repr=False, compare=False)  # the pool at the step last drawn

    @classmethod
    def start(cls, lm, specs: list[RequestSpec], block_size: int, num_blocks: int,
              enable_prefix_caching: bool, max_num_batched_tokens: int = 64) -> "PagedLesson":
        """Check every request before anything runs; raises EngineError with one sentence."""
        if not specs:
            raise EngineError("There are no requests; add at least one prompt.")
        engine = Engine(lm, block_size=block_size, num_blocks=num_blocks,
                        enable_prefix_caching=enable_prefix_caching, max_num_seqs=16,
                        max_num_batched_tokens=max_num_batched_tokens)
        for number, spec in enumerate(specs, 1):
            try:
                engine.check_request(spec.prompt, SamplingParams(max_tokens=spec.max_tokens))
            except EngineError as error:
                raise EngineError(f"Request {number}: {error}") from None
        return cls(specs, engine, lm.max_context, engine.block_size, engine.num_blocks, enable_prefix_caching,
                   model_name=lm.name)

    @property
    def step_index(self) -> int:
        return len(self.records)

    @property
    def replay(self) -> bool:
        return self.engine is None

    @property
    def finished(self) -> bool:
        """Every request arrived and none waits or runs after the last step (read from the records)."""
        pending = any(i not in self.request_ids for i in range(len(self.specs)))
        return bool(self.records) and not pending and all(
            r.status == "finished" for r in self.records[-1].requests)

    @property
    def can_step(self) -> bool:
        return not self.replay and not self.finished

    def step(self) -> StepRecord | None:
        if not self.can_step:
            return None
        for index, spec in enumerate(self.specs):
            if index not in self.request_ids and spec.arrival_step <= self.step_index:
                params = SamplingParams(max_tokens=spec.max_tokens, ignore_eos=True)
                rid = self.engine.add_request(spec.prompt, params)
                self.request_ids[index] = rid
                self.prompt_lengths[rid] = self.engine.requests[rid].num_prompt_tokens
        record = self.engine.step()
        self.records.append(record)
        self.texts.append(self._decode(record))
        return record

    def _decode(self, record: StepRecord) -> dict[int, str]:
        """Each request's output so far as text, kept beside the record (a replay has no tokenizer)."""
        tokenizer = self.engine.tokenizer
        if tokenizer is None:
            return {}
        return {r.request_id: tokenizer.decode(r.output_token_ids) for r in record.requests}

    def texts_so_far(self, step: int) -> dict[int, tuple[str, str]]:
        """Request id -> (state, text) at `step`, requests that finished earlier included: a record
        lists a request up to the step it finishes in, so each one's last text is kept."""
        states = {r.request_id: r.status for r in self.records[step].requests}
        texts: dict[int, str] = {}
        for snapshot in self.texts[:step + 1]:
            texts.update(snapshot)
        return {rid: (states.get(rid, "finished"), text) for rid, text in texts.items()}

    def label(self, request_id: int) -> str:
        index = next(i for i, rid in self.request_ids.items() if rid == request_id)
        return f"R{index + 1}"

    # ---- views drawn from the records ------------------------------------------------------
    def num_preemptions(self, step: int) -> int:
        """Preemptions up to `step`: each request's own count, as its latest record gives it."""
        counts: dict[int, int] = {}
        for record in self.records[:step + 1]:
            for state in record.requests:
                counts[state.request_id] = state.num_preemptions
        return sum(counts.values())


    def reservation_comparison(self, step: int) -> dict:
        """Paged blocks against a contiguous reservation of the whole context per request.

        A contiguous reservation holds a private copy of every request's tokens; the paged pool
        holds a shared prefix block once, so its waste counts distinct filled slots."""
        record = self.records[step]
        live = [r for r in record.requests if r.status == "running" and r.num_computed_tokens]
        tokens = sum(r.num_computed_tokens for r in live)
        block_size = self.block_size
        filled: dict[int, int] = {}  # physical block -> slots holding a token
        for r in live:
            for index, block_id in enumerate(r.block_table):
                if block_id is None:  # given back by a sliding window (an all-sliding model)
                    continue
                in_block = min(block_size, max(0, r.num_computed_tokens - index * block_size))
                filled[block_id] = max(filled.get(block_id, 0), in_block)
        distinct_tokens = sum(filled.values())
        reserved_tokens = len(live) * self.max_context
        paged_slots = len(filled) * block_size
        per_token = record.memory.bytes_per_token
        return {
            "requests": len(live), "tokens": tokens, "distinct_tokens": distinct_tokens,
            "paged_blocks": len(filled), "paged_slots": paged_slots,
            "contiguous_bytes": reserved_tokens * per_token,
            "contiguous_waste": 1 - tokens / reserved_tokens if reserved_tokens else None,  # None: nothing held
            "paged_bytes": paged_slots * per_token,
            "paged_waste": 1 - distinct_tokens / paged_slots if paged_slots else None,
        }

    def prefix_stats(self, step: int) -> dict:
        """Tokens looked up in the prefix cache up to `step`, those found, and the blocks that saved.

        Each admission looks up the request's tokens: its prompt first, and after a recompute
        preemption its prompt and output again. Counts add up over admissions, as vLLM's do."""
        counted = any(state.num_looked_up_tokens for record in self.records for state in record.requests)
        seen: dict[int, tuple[int, int]] = {}
        for record in self.records[:step + 1]:
            for state in record.requests:
                if counted:
                    seen[state.request_id] = (state.num_looked_up_tokens, state.num_hit_tokens)
                else:  # a file written before these counts: each request's last admission only
                    seen[state.request_id] = (state.num_prompt_tokens, state.num_cached_tokens)
        looked_up = sum(n for n, _ in seen.values())
        hit = sum(h for _, h in seen.values())
        return {"looked_up_tokens": looked_up, "cached_tokens": hit,
                "hit_rate": hit / looked_up if looked_up else 0.0,
                "blocks_saved": hit // self.block_size}


def waste_text(share: float | None) -> str:
    """A reservation's wasted share as the metrics show it; None (nothing held) has no share to show."""
    return "no request holds memory" if share is None else f"{share:.0%} wasted"
