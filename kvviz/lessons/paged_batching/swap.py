"""Swap or recompute: the same requests on the same tight pool under both preemption modes.

Each mode runs the workload `runs` times on a fresh engine; the first run only warms up, so
with one run nothing is timed. The figures come from the engine's records: swap-out and swap-in
events carry the bytes they moved, request records count the tokens run again.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from kvviz.engine.engine import Engine
from kvviz.engine.errors import EngineError
from kvviz.engine.records import StepRecord
from kvviz.engine.sampling import SamplingParams

MODES = ("recompute", "swap")


@dataclass
class ModeRun:
    mode: str
    outputs: list[list[int]]
    request_ids: list[int]  # in the order of the prompts
    records: list[StepRecord]  # of the last run
    preemptions: int
    recomputed_tokens: int
    swap_fallbacks: int  # victims recomputed because the swap space was full
    bytes_out: int
    bytes_in: int
    seconds: list[float]  # warm runs; empty when there was only one run (not timed)

    @property
    def timed(self) -> bool:
        return bool(self.seconds)

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds)

    @property
    def spread_s(self) -> tuple[float, float]:
        return min(self.seconds), max(self.seconds)


def run_mode(lm, prompts: list, mode: str, block_size: int, num_blocks: int, max_tokens: int,
             runs: int = 3, swap_space_blocks: int | None = None, progress=None) -> ModeRun:
    """Greedy, so the two modes must agree token for token; raises EngineError.
    progress: optional callable(run index, steps taken), called after every engine step."""
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    seconds = []
    for run in range(runs):
        engine = Engine(lm, block_size=block_size, num_blocks=num_blocks, preemption_mode=mode,
                        swap_space_blocks=swap_space_blocks, max_num_batched_tokens=256)
        ids = [engine.add_request(p, params) for p in prompts]
        records, start = [], time.perf_counter()
        while engine.has_unfinished():
            records.append(engine.step())
            if progress is not None:
                progress(run, len(records))
        seconds.append(time.perf_counter() - start)
    events = [e for r in records for e in r.events]
    return ModeRun(
        mode=mode, outputs=[engine.output(i).token_ids for i in ids], request_ids=ids, records=records,
        preemptions=engine.scheduler.num_preemptions,
        recomputed_tokens=sum(r.num_recomputed_tokens for r in engine.requests.values()),
        swap_fallbacks=sum(e.kind == "swap_full" for e in events),
        bytes_out=sum(e.num_bytes for e in events if e.kind == "swap_out"),
        bytes_in=sum(e.num_bytes for e in events if e.kind == "swap_in"), seconds=seconds[1:])


def compare(lm, prompts: list, block_size: int = 8, num_blocks: int = 12, max_tokens: int = 32,
            runs: int = 3, progress=None) -> dict[str, ModeRun]:
    """Both modes on the same requests and pool. progress: optional callable(fraction, text) after each step."""
    if not prompts:
        raise EngineError("There are no requests to compare; add at least one prompt to the table.")
    results = {}
    for index, mode in enumerate(MODES):
        def tell(run: int, steps: int, index=index, mode=mode) -> None:
            if progress is not None:  # a run's length is not known ahead: each step moves a little less
                fraction = (index + (run + steps / (steps + 20)) / runs) / len(MODES)
                progress(fraction, f"{mode}: run {run + 1} of {runs}, step {steps}")
        results[mode] = run_mode(lm, prompts, mode, block_size, num_blocks, max_tokens, runs, progress=tell)
    return results


def swap_events(run: ModeRun, labels: dict[int, str] | None = None) -> list[dict]:
    """Every swap-out, swap-in and fallback of the run: step, request, blocks, slots, bytes."""
    labels = labels or {}
    return [{"step": record.step, "event": event.kind, "request": labels.get(event.request_id, f"#{event.request_id}"),
             "blocks": ", ".join(map(str, event.block_ids)), "CPU slots": ", ".join(map(str, event.cpu_slots)),
             "bytes": event.num_bytes}
            for record in run.records for event in record.events
            if event.kind in ("swap_out", "swap_in", "swap_full")]
