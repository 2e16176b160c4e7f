"""The engine's settings and their defaults, in one place.

    Engine(lm)                                   # every default below
    Engine(lm, max_num_seqs=8)                   # one override
    Engine(lm, EngineConfig(block_size=8), record_blocks=True)

The command line, the bench and the pages read their defaults from here, and the command line
its flags: kvviz/cli/engine_flags.py makes one of every field, with the field's help and choices.
`validate` is the one check of every setting's type and range; what depends on the model (the
pool's bytes against free memory, the block size against the context) the Engine checks before
it allocates.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from numbers import Integral, Real

from kvviz.engine.kv_cache import KV_CACHE_DTYPES

# Upper bounds on the sizes, each for what it makes the machine do.
MAX_NUM_BLOCKS = 2**20  # a block costs about 460 bytes of bookkeeping: 2**20 blocks take ~0.5 GB and seconds to build
MAX_NUM_SEQS = 1024  # requests running at once; a pool sized from memory holds this many full contexts
MAX_NUM_BATCHED_TOKENS = 2**21  # tokens of one forward pass, whose activations grow with it; a 1M context fits
MAX_SPECULATIVE_TOKENS = 16  # draft tokens run after every greedy decode
MAX_PROMPT_LOOKUP = 16  # n-gram length: the lookup scans the context once per length, every step


PREEMPTION_MODES = ("recompute", "swap")
ATTENTIONS = ("auto", "sdpa")


def setting(default, help: str, choices: tuple | None = None):
    """A field of EngineConfig, with the help its command-line flag shows (kvviz/cli/engine_flags.py)."""
    return dataclasses.field(default=default, metadata={"help": help, "choices": choices})


@dataclass(slots=True)
class EngineConfig:
    block_size: int = setting(16, "tokens per block")
    num_blocks: int | None = setting(None, "blocks in the pool; None: what free memory holds, at most max_num_seqs "
                                           "full contexts")
    enable_prefix_caching: bool = setting(True, "reuse the cached blocks of a prompt's start that an earlier "
                                                "request already computed (prefix caching)")
    max_num_seqs: int = setting(64, "requests running at once")
    max_num_batched_tokens: int = setting(2048, "tokens of one step at most (the token budget)")
    enable_chunked_prefill: bool = setting(True, "a long prompt may run over several steps")
    use_cache: bool = setting(True, "off: recompute every token every step (the lesson's 'no cache')")
    record_blocks: bool = setting(False, "every StepRecord also lists every block of the pool")
    memory_fraction: float = setting(0.9, "of free memory the pool and swap space may take (a pool sized from "
                                          "memory: half of it)")
    speculative_tokens: int = setting(0, "draft tokens a greedy decode proposes by prompt lookup; 0: off")
    prompt_lookup_max: int = setting(3, "longest n-gram looked up in the context to find drafts")
    prompt_lookup_min: int = setting(1, "shortest n-gram tried before giving up on drafts")
    preemption_mode: str = setting("recompute", "what a preempted request loses: its blocks (recompute), or "
                                                "nothing (swap: its blocks wait in CPU memory)", PREEMPTION_MODES)
    swap_space_blocks: int | None = setting(None, "CPU blocks for preemption_mode swap; None: as many as the pool "
                                                  "has blocks")
    attention: str = setting("auto", "auto: the compiled kernel where it applies (CPU, float32); sdpa: gather + "
                                     "SDPA", ATTENTIONS)
    kv_cache_dtype: str = setting("auto", "auto: the model's dtype; int8 or fp8 (e4m3): 1 byte per value + scales; "
                                          "fp8_per_tensor: vLLM's fp8 scheme (one scale of 1.0, no scale bytes), "
                                          "to compare with vLLM", KV_CACHE_DTYPES)

    def with_overrides(self, **overrides) -> "EngineConfig":
        """A copy with some settings changed; an unknown name is refused in one sentence."""
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise ValueError(f"The engine has no setting {unknown[0]!r}; the settings are {', '.join(sorted(names))}.")
        return dataclasses.replace(self, **overrides)

    def validate(self) -> None:
        """Refuse, in one sentence, a setting of the wrong type or out of its range."""
        _whole("block_size", self.block_size, 1, None, "tokens per block")
        _whole("num_blocks", self.num_blocks, 1, MAX_NUM_BLOCKS, "each block costs about 460 bytes of "
               "bookkeeping and time to build", none="size the pool from free memory")
        _whole("max_num_seqs", self.max_num_seqs, 1, MAX_NUM_SEQS, "requests running at once")
        _whole("max_num_batched_tokens", self.max_num_batched_tokens, 1, MAX_NUM_BATCHED_TOKENS,
               "tokens in one forward pass, whose activations grow with it")
        _whole("swap_space_blocks", self.swap_space_blocks, 1, MAX_NUM_BLOCKS, "CPU blocks for preemption mode "
               "'swap'", none="as many as the pool")
        _whole("speculative_tokens", self.speculative_tokens, 0, MAX_SPECULATIVE_TOKENS,
               "draft tokens run after every greedy decode, 0 for off")
        _whole("prompt_lookup_min", self.prompt_lookup_min, 1, MAX_PROMPT_LOOKUP, "the shortest n-gram looked up")
        _whole("prompt_lookup_max", self.prompt_lookup_max, 1, MAX_PROMPT_LOOKUP,
               "the longest n-gram looked up; the lookup scans the context once per length")
        for name in ("enable_prefix_caching", "enable_chunked_prefill", "use_cache", "record_blocks"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, not {getattr(self, name)!r}.")
        fraction = self.memory_fraction
        if isinstance(fraction, bool) or not isinstance(fraction, Real) or not 0 < fraction <= 1:
            raise ValueError(f"memory_fraction (the share of free memory the pool may take) must be a number in "
                             f"(0, 1], not {fraction!r}.")
        if self.preemption_mode not in PREEMPTION_MODES:
            raise ValueError(f"preemption_mode must be 'recompute' or 'swap', not {self.preemption_mode!r}.")
        if self.attention not in ATTENTIONS:
            raise ValueError(f"attention must be 'auto' or 'sdpa', not {self.attention!r}.")
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(f"kv_cache_dtype must be one of {', '.join(map(repr, KV_CACHE_DTYPES))} (the "
                             f"model's dtype, 8-bit values with a scale per token and KV head, or vLLM's fp8 "
                             f"with one scale), not {self.kv_cache_dtype!r}.")
        if self.prompt_lookup_min > self.prompt_lookup_max:
            raise ValueError("prompt_lookup_min and prompt_lookup_max must satisfy 1 <= min <= max, not "
                             f"{self.prompt_lookup_min} and {self.prompt_lookup_max}.")
        if self.speculative_tokens and not self.use_cache:
            raise ValueError("Speculative decoding writes draft tokens into the KV cache, so it needs "
                             "use_cache=True; turn the cache on or set speculative_tokens=0.")


def _whole(name: str, value, low: int, high: int | None, reason: str, none: str | None = None) -> None:
    """Refuse `value` unless it is a whole number from `low` to `high` (high None: no upper bound;
    `none` set: None is allowed too, and means that)."""
    if none is not None and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, Integral) or value < low or (high is not None and value > high):
        allowed = f"a whole number from {low}" + (f" to {high:,}" if high is not None else " up")
        if none is not None:
            allowed = f"None ({none}) or {allowed}"
        raise ValueError(f"{name} must be {allowed} ({reason}), not {value!r}.")


DEFAULTS = EngineConfig()
