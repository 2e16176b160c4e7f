"""GQA and MQA from an existing checkpoint: mean-pool key/value heads within groups.

Ainslie et al. (2023) turn a multi-head checkpoint into a grouped-query one by replacing each
group of key/value heads with their mean: the rows of `k_proj` and `v_proj` that make up the
heads of a group are averaged into one head, and the query heads that read any head of the group
now share it. The paper then trains a little more ("uptraining", about 5% of the original
steps) to win back quality; this module does not, so the held-out loss shows the conversion's
raw cost. The cache shrinks by exactly old_kv_heads / new_kv_heads: fewer heads, fewer K and V.

    mqa = convert_kv_heads(lm, 1)            # a LoadedModel in, a LoadedModel out (or a bare model)
    report = gqa_report(lm, 1)               # bytes per token and held-out loss, before and after
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, replace

import torch

from kvviz.engine.model_parts import model_parts
from kvviz.memory_bill import kv_bytes_per_token
from kvviz.models import default_heldout_text
from kvviz.shapes import ModelShape
from kvviz.strategies.base import StrategyCache
from kvviz.strategies.dynamic import DynamicKV

KV_PROJECTIONS = ("k_proj.weight", "k_proj.bias", "v_proj.weight", "v_proj.bias")


def mean_pool_heads(weight: torch.Tensor, num_heads: int, num_groups: int) -> torch.Tensor:
    """weight: (num_heads * head_dim, ...) rows of K or V heads, head after head.
    Returns (num_groups * head_dim, ...): each run of num_heads / num_groups neighbouring heads
    averaged into one (neighbours, because query head q reads KV head q // (heads / kv_heads))."""
    rows = weight.unflatten(0, (num_groups, num_heads // num_groups, -1))  # (groups, heads per group, head_dim, ...)
    return rows.mean(dim=1).flatten(0, 1)  # (groups * head_dim, ...)


def convert_kv_heads(lm, num_kv_heads: int):
    """A copy of the model with `num_kv_heads` key/value heads (1: MQA), k_proj/v_proj mean-pooled.

    lm: a kvviz LoadedModel (a LoadedModel comes back) or a transformers model (a model comes back).
    Llama-style attention only: separate k_proj and v_proj per layer. Raises ValueError.
    """
    model = model_parts(lm).model
    old = ModelShape.of_model(model).num_kv_heads
    if not isinstance(num_kv_heads, int) or isinstance(num_kv_heads, bool) or num_kv_heads < 1:
        raise ValueError(f"num_kv_heads must be a whole number above zero, not {num_kv_heads!r}.")
    if num_kv_heads > old or old % num_kv_heads:
        raise ValueError(f"The model has {old} KV heads; mean-pooling can only merge them into a number "
                         f"that divides {old} (such as {old // 2 or 1}), not {num_kv_heads}.")
    state = model.state_dict()
    names = [n for n in state if n.endswith(KV_PROJECTIONS)]
    if not names:
        raise ValueError(f"{type(model).__name__} has no separate k_proj/v_proj weights; GQA conversion "
                         "works on Llama-style attention (Llama, Mistral, Qwen, Gemma, OLMo).")
    for name in names:
        state[name] = mean_pool_heads(state[name], old, num_kv_heads)
    config = copy.deepcopy(model.config)  # a deep copy: the original model keeps its own config
    config.get_text_config().num_key_value_heads = num_kv_heads
    parameter = next(model.parameters())
    converted = type(model)(config).to(device=parameter.device, dtype=parameter.dtype).eval()
    converted.load_state_dict(state)  # strict: every other weight is copied unchanged
    if lm is model:  # a bare model in, a bare model out
        return converted
    kind = "MQA" if num_kv_heads == 1 else f"GQA-{num_kv_heads}"
    return replace(lm, model=converted, name=f"{lm.name} ({kind}, mean-pooled)")


def heldout_windows(tokenizer, text: str | None = None, window: int = 256, num_windows: int = 8) -> torch.Tensor:
    """`num_windows` windows of `window` tokens spread evenly over the text: (num_windows, window)."""
    # verbose=False: the whole text is longer than the context on purpose; we cut it into windows
    token_ids = tokenizer(text if text is not None else default_heldout_text(), verbose=False)["input_ids"]
    if len(token_ids) < window + 1:
        raise ValueError(f"The held-out text has {len(token_ids)} tokens, fewer than one window of {window}; "
                         "give a longer text or a smaller window.")
    last_start = len(token_ids) - window
    starts = [round(i * last_start / max(num_windows - 1, 1)) for i in range(num_windows)]
    return torch.tensor([token_ids[s:s + window] for s in starts])


@torch.inference_mode()
def heldout_loss(lm, tokenizer=None, text: str | None = None, *, window: int = 256, num_windows: int = 8) -> float:
    """Mean next-token cross-entropy (nats per token) over a few windows of held-out text.

    lm: a LoadedModel, or a transformers model with `tokenizer`. text: default, the bundled
    model's held-out text (kvviz/bundled_model/heldout.txt), never seen in its training.
    """
    model, own_tokenizer, max_context = model_parts(lm)
    tokenizer = tokenizer or own_tokenizer
    if tokenizer is None:
        raise ValueError("Measuring held-out loss needs a tokenizer; pass one with the model.")
    window = min(window, max_context)
    input_ids = heldout_windows(tokenizer, text, window, num_windows).to(next(model.parameters()).device)
    logits = model(input_ids=input_ids, use_cache=False).logits  # (windows, window, vocab)
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].flatten(0, 1).float(), input_ids[:, 1:].flatten()).item()


@torch.inference_mode()
def measured_bytes_per_token(model, num_tokens: int = 8) -> int:
    """Run `num_tokens` tokens through the model with kvviz's dynamic cache; bytes it holds per token."""

    cache = StrategyCache([DynamicKV() for _ in range(ModelShape.of_model(model).num_layers)])
    input_ids = torch.zeros(1, num_tokens, dtype=torch.long, device=next(model.parameters()).device)
    model(input_ids=input_ids, cache=cache, use_cache=True)
    assert cache.nbytes % num_tokens == 0
    return cache.nbytes // num_tokens


@dataclass(slots=True)
class GQAReport:
    model: str
    num_heads: int  # query heads (unchanged)
    kv_heads_before: int
    kv_heads_after: int
    bytes_per_token_before: int  # measured: nbytes of a dynamic cache / tokens
    bytes_per_token_after: int
    predicted_bytes_per_token_before: int  # kvviz.memory_bill's formula
    predicted_bytes_per_token_after: int
    cache_saved_fraction: float  # 1 - after / before
    parameters_before: int
    parameters_after: int
    loss_before: float  # held-out cross-entropy, nats per token
    loss_after: float
    loss_change: float  # after - before (no uptraining)
    num_windows: int
    window: int
    seconds: float


def gqa_report(lm, num_kv_heads: int, *, window: int = 256, num_windows: int = 8,
               text: str | None = None) -> GQAReport:
    """Convert `lm` to `num_kv_heads` KV heads; measure the cache per token and the held-out loss, before and after."""
    start = time.perf_counter()
    converted = convert_kv_heads(lm, num_kv_heads)
    before, after = {}, {}
    for side, candidate in ((before, lm), (after, converted)):
        model, shape = candidate.model, candidate.shape
        side["measured"] = measured_bytes_per_token(model)
        side["predicted"] = kv_bytes_per_token(shape, shape.dtype_bytes)
        side["kv_heads"], side["num_heads"] = shape.num_kv_heads, shape.num_heads
        side["parameters"] = sum(p.numel() for p in model.parameters())
        side["loss"] = heldout_loss(candidate, text=text, window=window, num_windows=num_windows)
    return GQAReport(
        lm.name, before["num_heads"], before["kv_heads"], after["kv_heads"],
        before["measured"], after["measured"], before["predicted"], after["predicted"],
        1 - after["measured"] / before["measured"], before["parameters"], after["parameters"],
        before["loss"], after["loss"], after["loss"] - before["loss"], num_windows,
        min(window, lm.max_context), time.perf_counter() - start)
