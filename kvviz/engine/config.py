"""The engine's settings and their defaults, in one place.

    Engine(lm)                                   # every default below
    Engine(lm, max_num_seqs=8)                   # one override
    Engine(lm, EngineConfig(block_size=8), record_blocks=True)

The command line, the bench and the pages read their defaults from here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(slots=True)
class EngineConfig:
    block_size: int = 16  # tokens per block
    num_blocks: int | None = None  # None: what free memory holds, at most max_num_seqs full contexts
    enable_prefix_caching: bool = True
    max_num_seqs: int = 64  # requests running at once
    max_num_batched_tokens: int = 2048  # token budget of one step
    enable_chunked_prefill: bool = True  # a long prompt may run over several steps
    use_cache: bool = True  # False: recompute every token every step (the lesson's "no cache")
    record_blocks: bool = False  # True: every StepRecord also lists every block of the pool
    memory_fraction: float = 0.9  # of free memory the pool may take when num_blocks is None
    speculative_tokens: int = 0  # draft tokens a greedy decode proposes by prompt lookup; 0: off
    prompt_lookup_max: int = 3  # longest n-gram looked up in the context to find drafts
    prompt_lookup_min: int = 1  # shortest n-gram tried before giving up on drafts
    preemption_mode: str = "recompute"  # or "swap": a victim's blocks wait in CPU memory
    swap_space_blocks: int | None = None  # CPU slots for "swap"; None: as many as the pool has blocks
    attention: str = "auto"  # "auto": the compiled kernel where it applies (CPU, float32); "sdpa": gather + SDPA

    def with_overrides(self, **overrides) -> "EngineConfig":
        """A copy with some settings changed; an unknown name is refused in one sentence."""
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise ValueError(f"The engine has no setting {unknown[0]!r}; the settings are {', '.join(sorted(names))}.")
        return dataclasses.replace(self, **overrides)

    def validate(self) -> None:
        if min(self.block_size, self.max_num_seqs, self.max_num_batched_tokens) < 1:
            raise ValueError("block_size, max_num_seqs and max_num_batched_tokens must all be at least 1.")
        if self.num_blocks is not None and self.num_blocks < 1:
            raise ValueError(f"The pool needs at least one block, not {self.num_blocks}.")
        if self.preemption_mode not in ("recompute", "swap"):
            raise ValueError(f"preemption_mode must be 'recompute' or 'swap', not {self.preemption_mode!r}.")
        if self.attention not in ("auto", "sdpa"):
            raise ValueError(f"attention must be 'auto' or 'sdpa', not {self.attention!r}.")
        if self.swap_space_blocks is not None and self.swap_space_blocks < 1:
            raise ValueError(f"The swap space needs at least one block, not {self.swap_space_blocks}.")
        if not 0 < self.memory_fraction <= 1:
            raise ValueError(f"memory_fraction must be in (0, 1], not {self.memory_fraction}.")
        if self.speculative_tokens < 0:
            raise ValueError(f"speculative_tokens must be 0 (off) or more, not {self.speculative_tokens}.")
        if not 1 <= self.prompt_lookup_min <= self.prompt_lookup_max:
            raise ValueError("prompt_lookup_min and prompt_lookup_max must satisfy 1 <= min <= max, not "
                             f"{self.prompt_lookup_min} and {self.prompt_lookup_max}.")
        if self.speculative_tokens and not self.use_cache:
            raise ValueError("Speculative decoding writes draft tokens into the KV cache, so it needs "
                             "use_cache=True; turn the cache on or set speculative_tokens=0.")


DEFAULTS = EngineConfig()
