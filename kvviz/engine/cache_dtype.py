"""What an 8-bit paged cache saves and what it costs, measured on the engine itself.

    measured_bytes_per_token(shape, "fp8")       # bytes a PagedKVCache of that dtype holds per token
    quality = cache_dtype_quality(lm, prompts, "int8", max_tokens=32)
    quality.mean_kl, quality.first_difference    # against the "auto" (full-precision) cache

The saving is read off real cache tensors (values and scales), not off the formula. The cost is
the next-token distribution's drift: at each of the reference continuation's steps, the KL
divergence KL(auto || quantized) of the next-token distributions, both engines given the same
tokens (teacher forcing), and the first generated token where the two greedy outputs part.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvviz.engine.engine import Engine
from kvviz.engine.kv_cache import CacheShape, PagedKVCache
from kvviz.engine.sampling import SamplingParams
from kvviz.shapes import ModelShape


def measured_bytes_per_token(shape: ModelShape, kv_cache_dtype: str, dtype: torch.dtype = torch.float32) -> int:
    """Bytes one token costs in a PagedKVCache of `kv_cache_dtype` for a model of this shape whose
    weights are in `dtype`: a one-block cache of one-token blocks is built and its tensors counted."""
    cache = PagedKVCache(CacheShape(shape.num_layers, shape.num_kv_heads, shape.head_dim, dtype, kv_cache_dtype),
                         num_blocks=1, block_size=1, device=torch.device("cpu"))
    return cache.nbytes


@dataclass(slots=True)
class PromptQuality:
    """One prompt: the per-step KL (nats) along the reference continuation, and the first index of
    the generated tokens where greedy output differs (None: identical over the tokens compared)."""

    step_kl: list[float]
    first_difference: int | None
    reference_tokens: list[int]
    quantized_tokens: list[int]


@dataclass(slots=True)
class DtypeQuality:
    kv_cache_dtype: str
    prompts: list[PromptQuality]

    @property
    def mean_kl(self) -> float:
        steps = [kl for p in self.prompts for kl in p.step_kl]
        return sum(steps) / len(steps)

    @property
    def max_kl(self) -> float:
        return max(kl for p in self.prompts for kl in p.step_kl)

    @property
    def first_difference(self) -> list[int | None]:
        return [p.first_difference for p in self.prompts]


def next_token_logits(engine: Engine, token_ids: list[int]) -> torch.Tensor:
    """(V,) float32: the logits after `token_ids`, read from a traced one-token request. With
    prefix caching, the earlier blocks are hits: their keys and values come from the cache as
    stored (quantized, in a quantized cache), just as in a step-by-step decode."""
    engine.add_request(token_ids, SamplingParams(max_tokens=1), trace=True)
    logits = None
    while engine.has_unfinished():
        record = engine.step()
        if record.trace is not None and record.trace.logits is not None:
            logits = torch.from_numpy(record.trace.logits)
    assert logits is not None, "a one-token request samples once"
    return logits


def kl_divergence(reference_logits: torch.Tensor, logits: torch.Tensor) -> float:
    """KL(p || q) in nats, p from the reference logits, q from the other: (V,) each."""
    log_p = reference_logits.double().log_softmax(-1)
    log_q = logits.double().log_softmax(-1)
    return float((log_p.exp() * (log_p - log_q)).sum())


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first index where two token lists differ (a shorter list differs where it ends)."""
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


def cache_dtype_quality(lm, prompts: list[str], kv_cache_dtypes: list[str], max_tokens: int = 32,
                        **engine_settings) -> dict[str, DtypeQuality]:
    """For each 8-bit dtype: the KL against the "auto" cache along each prompt's greedy "auto"
    continuation (max_tokens steps, EOS ignored), and where the two greedy outputs first differ."""
    greedy = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    reference = Engine(lm, kv_cache_dtype="auto", **engine_settings)
    engines = {name: Engine(lm, kv_cache_dtype=name, **engine_settings) for name in kv_cache_dtypes}
    results = {name: DtypeQuality(name, []) for name in kv_cache_dtypes}
    for prompt in prompts:
        reference_out, = reference.generate([prompt], greedy)
        contexts = [reference_out.prompt_token_ids + reference_out.token_ids[:i] for i in range(max_tokens)]
        reference_logits = [next_token_logits(reference, context) for context in contexts]
        for name, engine in engines.items():
            out, = engine.generate([prompt], greedy)
            step_kl = [kl_divergence(expected, next_token_logits(engine, context))
                       for expected, context in zip(reference_logits, contexts)]
            differs_at = first_difference(reference_out.token_ids, out.token_ids)
            results[name].prompts.append(PromptQuality(step_kl, differs_at, reference_out.token_ids, out.token_ids))
    return results
