"""Tokens per second: one definition for the Batch page, `python -m kvviz generate` and the bench.

    output_tokens_per_s(output_tokens=392, seconds=0.6)   # 653.3
    throughput_text(392, 0.6, "of engine steps")          # '392 output tokens ÷ 0.60 s of engine steps = 653 tokens/s'

Output tokens are the tokens generated for the requests (prompt tokens are not counted, nor
tokens a static batch generates past a request's length). The seconds are those of generation
only: from the first engine step to the last request's finish, without loading the model or
building the engine. Whoever shows the figure names the seconds it divided by.
"""

from __future__ import annotations

import os

DEFINITION = "output tokens ÷ seconds of generation"


def output_tokens_per_s(output_tokens: int, seconds: float) -> float:
    """Output tokens per second of generation; 0 when no time was measured."""
    return output_tokens / seconds if seconds > 0 else 0.0


def throughput_text(output_tokens: int, seconds: float, which_seconds: str) -> str:
    """The figure with what it divides: '392 output tokens ÷ 0.60 s of engine steps = 653 tokens/s'."""
    rate = output_tokens_per_s(output_tokens, seconds)
    return f"{output_tokens:,} output tokens ÷ {seconds:.2f} s {which_seconds} = {rate:,.0f} tokens/s"


def machine_load() -> float | None:
    """The 1-minute load average (None where the system has none), to read before timing."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def busy_note(runs_seconds: list[list[float]], load_before: float | None, cores: int | None = None) -> str | None:
    """Why these timings may not be the machine's best, in one sentence, or None: repeated runs of
    one kind more than 30% apart, or a load average above the number of cores when they started.

    runs_seconds: for each thing timed, the seconds of its repeated runs."""
    cores = cores or os.cpu_count() or 1
    if load_before is not None and load_before > cores:
        return (f"The machine was busy (load {load_before:.1f} on {cores} cores) when these runs started; "
                "the times are slower than an idle machine gives. Run again when it is idle.")
    widest = max((max(runs) / min(runs) for runs in runs_seconds if runs and min(runs) > 0), default=1.0)
    if widest > 1.3:
        return (f"Repeated runs differed by up to {widest - 1:.0%}: something else was using the machine. "
                "The medians are the fairest figures; run again when it is idle.")
    return None
