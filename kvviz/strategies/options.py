"""The strategies by name, their options, and the checks that turn a bad option into one sentence."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from kvviz.engine.block_pool import blocks_needed
from kvviz.engine.config import DEFAULTS
from kvviz.shapes import DEFAULT_CONTEXT, ModelShape
from kvviz.strategies.base import StrategyCache
from kvviz.strategies.dynamic import DynamicKV
from kvviz.strategies.quantized import QuantizedKV
from kvviz.strategies.sliding import SlidingWindowKV
from kvviz.strategies.static import StaticKV

# name -> its options and their defaults (None: chosen from the model or the request)
STRATEGIES: dict[str, dict] = {
    "dynamic": {},
    "static": {"capacity": None},  # None: the model's whole context, as a server sizing for the worst case
    "sliding_window": {"window": 16},
    "quantized": {"bits": 8, "group_size": None, "residual": 0},  # group None: min(32, head_dim)
    "paged": {"block_size": DEFAULTS.block_size, "num_blocks": None},  # None: just enough blocks for this request
    "no_cache": {},
}
ENGINE_STRATEGIES = ("paged", "no_cache")  # run by kvviz's Engine; the others through transformers


@dataclass(slots=True)
class StrategySpec:
    """A strategy and its options, e.g. StrategySpec("quantized", {"bits": 4, "residual": 16})."""

    name: str
    options: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        o = self.options
        if self.name == "sliding_window":
            return f"sliding window (W={o.get('window', STRATEGIES['sliding_window']['window'])})"
        if self.name == "quantized":
            text = f"int{o.get('bits', 8)}"
            if o.get("group_size"):
                text += f" (group {o['group_size']})"
            return text + (f" + {o['residual']} recent full" if o.get("residual") else "")
        if self.name == "static" and o.get("capacity"):
            return f"static ({o['capacity']} reserved)"
        return self.name.replace("_", " ")

    @classmethod
    def of(cls, item) -> "StrategySpec":
        """Accept a spec, a name, or a (name, options) pair."""
        if isinstance(item, cls):
            return item
        if isinstance(item, str):
            return cls(item)
        name, options = item
        return cls(name, dict(options))


@dataclass(slots=True)
class ModelFacts:
    """What the strategies need to know about a model."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype
    device: torch.device
    max_context: int

    @classmethod
    def of(cls, model: torch.nn.Module, max_context: int | None = None) -> "ModelFacts":
        shape = ModelShape.of_model(model)
        return cls(shape.num_layers, shape.num_kv_heads, shape.head_dim, shape.dtype,
                   next(model.parameters()).device, max_context or shape.max_context or DEFAULT_CONTEXT)


def resolve_options(name: str, options: dict, facts: ModelFacts, num_tokens: int) -> dict:
    """Check a strategy's options against the model and a request of `num_tokens` tokens
    (prompt plus generated); return them with every default filled in. Raises ValueError."""
    if name not in STRATEGIES:
        raise ValueError(f"Unknown strategy {name!r}; use one of {', '.join(STRATEGIES)}.")
    unknown = set(options) - set(STRATEGIES[name])
    if unknown:
        allowed = ", ".join(STRATEGIES[name]) or "no options"
        raise ValueError(f"The {name} strategy has no option {sorted(unknown)[0]!r}; it takes {allowed}.")
    resolved = {**STRATEGIES[name], **options}
    if num_tokens >= facts.max_context:  # the Engine keeps one position free beyond the request
        raise ValueError(f"The prompt and the tokens to generate make {num_tokens} tokens, more than the "
                         f"{facts.max_context - 1} that fit the model's {facts.max_context}-token context; "
                         "shorten the prompt or generate fewer tokens.")
    if name == "static":
        resolved["capacity"] = resolved["capacity"] or facts.max_context
        _check_whole("capacity", resolved["capacity"])
        if not num_tokens <= resolved["capacity"] <= facts.max_context:
            raise ValueError(f"The static capacity must be between the request's {num_tokens} tokens and the "
                             f"model's context of {facts.max_context}, not {resolved['capacity']}.")
    if name == "sliding_window":
        _check_whole("window", resolved["window"])
        if resolved["window"] > facts.max_context:
            raise ValueError(f"The window ({resolved['window']} tokens) is larger than the model's context "
                             f"({facts.max_context} tokens); pick a window of at most {facts.max_context}.")
    if name == "quantized":
        if resolved["bits"] not in (4, 8):
            raise ValueError(f"bits must be 4 or 8, not {resolved['bits']!r}.")
        resolved["group_size"] = resolved["group_size"] or min(32, facts.head_dim)
        _check_whole("group_size", resolved["group_size"])
        if facts.head_dim % resolved["group_size"] or resolved["group_size"] % 2:
            raise ValueError(f"group_size must be even and divide the head size {facts.head_dim}, "
                             f"not {resolved['group_size']}.")
        if not isinstance(resolved["residual"], int) or resolved["residual"] < 0:
            raise ValueError(f"residual must be 0 or more recent tokens, not {resolved['residual']!r}.")
    if name == "paged":
        _check_whole("block_size", resolved["block_size"])
        # the Engine asks for room for one token beyond the request (see run._run_in_engine)
        resolved["num_blocks"] = resolved["num_blocks"] or blocks_needed(num_tokens + 1, resolved["block_size"])
        _check_whole("num_blocks", resolved["num_blocks"])
    return resolved


def _check_whole(what: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{what} must be a whole number above zero, not {value!r}.")


def make_cache(name: str, options: dict, facts: ModelFacts) -> StrategyCache:
    """A fresh cache, one kvviz layer per model layer, for a strategy run through transformers."""
    def layer():
        if name == "dynamic":
            return DynamicKV()
        if name == "static":
            return StaticKV(options["capacity"], facts.num_kv_heads, facts.head_dim, facts.dtype, facts.device)
        if name == "sliding_window":
            return SlidingWindowKV(options["window"])
        if name == "quantized":
            return QuantizedKV(options["bits"], options["group_size"], options["residual"])
        raise ValueError(f"The {name} strategy runs in kvviz's Engine, not in a transformers cache.")
    return StrategyCache([layer() for _ in range(facts.num_layers)])
