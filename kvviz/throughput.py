"""Tokens per second: one definition for the Batch page, `python -m kvviz generate` and the bench.

    output_tokens_per_s(output_tokens=392, seconds=0.6)   # 653.3
    throughput_text(392, 0.6, "of engine steps")          # '392 output tokens ÷ 0.60 s of engine steps = 653 tokens/s'

Output tokens are the tokens generated for the requests (prompt tokens are not counted, nor
tokens a static batch generates past a request's length). The seconds are those of generation
only: from the first engine step to the last request's finish, without loading the model or
building the engine. Whoever shows the figure names the seconds it divided by.
"""

from __future__ import annotations

DEFINITION = "output tokens ÷ seconds of generation"


def output_tokens_per_s(output_tokens: int, seconds: float) -> float:
    """Output tokens per second of generation; 0 when no time was measured."""
    return output_tokens / seconds if seconds > 0 else 0.0


def throughput_text(output_tokens: int, seconds: float, which_seconds: str) -> str:
    """The figure with what it divides: '392 output tokens ÷ 0.60 s of engine steps = 653 tokens/s'."""
    rate = output_tokens_per_s(output_tokens, seconds)
    return f"{output_tokens:,} output tokens ÷ {seconds:.2f} s {which_seconds} = {rate:,.0f} tokens/s"
