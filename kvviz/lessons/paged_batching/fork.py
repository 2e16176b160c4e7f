"""Parallel sampling on the real engine: one prompt, n samples, shared blocks, copy-on-write.

`run_fork` runs SamplingParams(n=...) to the end and keeps every StepRecord; the other
functions read only those records: which blocks are shared (and by how many), each copy as it
happens, and the memory held against n independent requests that each keep their own copy of
the prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvviz.engine.engine import Engine
from kvviz.engine.records import StepRecord
from kvviz.engine.sampling import SamplingParams
from kvviz.engine.records import PoolReplay
from kvviz.lessons.paged_batching.events import PoolSteps


@dataclass
class ForkRun(PoolSteps):
    records: list[StepRecord]
    request_id: int  # the prompt's request (sample 0)
    sample_ids: list[int]  # every sample, sample 0 first
    texts: list[str]
    num_prompt_tokens: int
    block_size: int
    num_blocks: int
    bytes_per_block: int
    stage_steps: list[dict] = field(default_factory=list)  # each step as the stage draws it (stage.py), once
    pool: PoolReplay | None = field(default=None, repr=False, compare=False)  # the pool at the step last drawn

    def label(self, request_id: int) -> str:
        return f"sample {self.sample_ids.index(request_id)}" if request_id in self.sample_ids else f"#{request_id}"

    @property
    def labels(self) -> dict[int, str]:
        return {rid: self.label(rid) for rid in self.sample_ids}

    @property
    def short_labels(self) -> dict[int, str]:
        """"s0", "s1", ...: short enough to fit in a pool cell."""
        return {rid: f"s{index}" for index, rid in enumerate(self.sample_ids)}



def run_fork(lm, prompt: str | list[int], n: int = 4, max_tokens: int = 16, block_size: int = 8,
             temperature: float = 0.8, seed: int = 0, num_blocks: int = 64) -> ForkRun:
    """One prompt, n samples (seeds seed..seed+n-1), run step by step; raises EngineError."""
    engine = Engine(lm, block_size=block_size, num_blocks=num_blocks, max_num_seqs=max(16, n))
    params = SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed, n=n, ignore_eos=True)
    request_id = engine.add_request(prompt, params)
    records = []
    while engine.has_unfinished():
        records.append(engine.step())
    out = engine.output(request_id)
    sample_ids = [request_id] + engine.requests[request_id].sample_ids
    texts = out.texts or [" ".join(map(str, ids)) for ids in out.samples]
    return ForkRun(records, request_id, sample_ids, texts, len(out.prompt_token_ids), block_size,
                   engine.num_blocks, engine.cache.bytes_per_block)


def blocks_held(run: ForkRun, step: int) -> tuple[int, int]:
    """(blocks the samples hold, blocks n independent requests would hold) after `step`.

    Independent requests hold one table each, nothing shared: the sum of the table lengths.
    """
    tables = [r.block_table for r in run.records[step].requests if r.request_id in run.sample_ids]
    return len({b for table in tables for b in table}), sum(len(table) for table in tables)


def copies(run: ForkRun, up_to_step: int | None = None) -> list[dict]:
    """Every copy-on-write so far: which sample copied which shared block into which new one."""
    last = len(run.records) - 1 if up_to_step is None else up_to_step
    return [{"step": record.step, "sample": run.label(event.request_id), "shared block id": event.block_ids[0],
             "copy's block id": event.block_ids[1], "bytes": event.num_bytes}
            for record in run.records[:last + 1] for event in record.events if event.kind == "copy"]


def summary(run: ForkRun, step: int) -> dict:
    """The fork at a glance, after `step`: shared blocks, copies, blocks saved now, and the peaks so far.

    The saving now can fall (the first decode step copies the shared, partly filled prompt block);
    a peak is the most blocks held at any step up to `step`, so it never falls."""
    shared = [b for b in run.held_blocks(step) if b.ref_cnt > 1]
    held = [blocks_held(run, s) for s in range(step + 1)]
    copied = copies(run, step)
    blocks_now, separate_now = held[step]
    return {
        "n": len(run.sample_ids),
        "shared_blocks": len(shared),
        "max_ref_cnt": max((b.ref_cnt for b in shared), default=1),
        "copies": len(copied), "copied_bytes": sum(c["bytes"] for c in copied),
        "blocks_now": blocks_now, "separate_blocks_now": separate_now,
        "blocks_saved_now": separate_now - blocks_now,
        "bytes_saved_now": (separate_now - blocks_now) * run.bytes_per_block,
        "peak_blocks": max(h[0] for h in held), "separate_peak_blocks": max(h[1] for h in held),
        "full_prompt_blocks": run.num_prompt_tokens // run.block_size,
    }
