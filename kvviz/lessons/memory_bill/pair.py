"""Two real models, one prompt: what their caches hold, measured, beside the bill's formula.

    rows = measure_pair([load_model("smollm2"), load_model("gemma3")], text, tokens=2000)

SmolLM2-135M shares 3 KV heads among 9 query heads in every one of its 30 layers, and every layer
keeps every position. Gemma 3 270M shares one KV head among 4 query heads (MQA), and 15 of its 18
layers slide over the last 512 positions. Each model runs the same text, cut to the same number
of its own tokens, through the engine (a prefill, then one decode step, at which a sliding layer gives
back the blocks its window has left); the bytes its cache then holds are read from the engine
(MemoryRecord.layer_used_bytes), split by kind of layer, beside what the formula says.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvviz.engine.block_pool import blocks_needed
from kvviz.engine.engine import Engine
from kvviz.engine.sampling import SamplingParams
from kvviz.lessons.budget import ModelCost, Work, check_click, most_that_fits
from kvviz.memory_bill import bill_breakdown, bytes_per_token_by_kind
from kvviz.shapes import FULL, SLIDING, ModelShape

PAIR = ("smollm2", "gemma3")  # the two packaged models this compares
PAIR_TOKENS = 2000
PAIR_LEAST_TOKENS = 640  # past Gemma 3's window of 512 by eight blocks: its sliding layers have given some back
BLOCK_SIZE = 16


@dataclass(frozen=True, slots=True)
class KindBytes:
    """One kind of layer of one model after the prefill."""

    kind: str  # FULL or SLIDING
    layers: int
    window: int | None
    formula: str  # the bill's line, its factors named
    formula_bytes: int  # what the formula gives, in whole blocks
    held_bytes: int  # what the engine's blocks hold, measured


@dataclass(frozen=True, slots=True)
class PairRow:
    """One model's cache after a prefill of `tokens` of its own tokens."""

    name: str
    heads: int
    kv_heads: int
    tokens: int
    first_token_bytes: int  # what one token costs in every layer, inside every window
    later_token_bytes: int  # what one more token costs once every window is full (the full layers alone)
    kinds: list[KindBytes]

    @property
    def held_bytes(self) -> int:
        return sum(kind.held_bytes for kind in self.kinds)


def pair_work(lms, tokens: int) -> Work:
    """A prefill of `tokens` - 1 and one decode step in each model's engine."""
    work = Work(click="bill_pair")
    for lm in lms:
        cost = ModelCost.of(lm.model)
        work += Work(cost.forward(tokens - 1, 0) + cost.forward(1, tokens - 1), steps=2, step_scale=cost.step_scale,
                     click="bill_pair")
    return work


def pair_tokens(lms) -> int:
    """The tokens the comparison runs on this server: PAIR_TOKENS, or the most under it whose two prefills fit
    one click's budget; 0 when not even PAIR_LEAST_TOKENS fit (the button is then not offered)."""
    device = next(lms[0].model.parameters()).device
    fits = most_that_fits(lambda tokens: pair_work(lms, tokens).seconds(device), PAIR_TOKENS, PAIR_LEAST_TOKENS)
    return fits if fits >= PAIR_LEAST_TOKENS else 0


def measure_pair(lms, text: str, tokens: int = PAIR_TOKENS) -> list[PairRow]:
    """Each model's prefill of the first `tokens` of its tokens of `text`, its cache measured and billed.
    Raises WorkTooLarge (a ValueError) past one click's budget, and ValueError for a text too short."""
    device = next(lms[0].model.parameters()).device
    check_click(pair_work(lms, tokens), device, f"Two prefills of {tokens:,} tokens", "choose fewer tokens")
    rows = []
    for lm in lms:
        ids = lm.tokenizer(text)["input_ids"][:tokens]
        if len(ids) < tokens:
            raise ValueError(f"The text is {len(ids):,} tokens long for {lm.name}, short of {tokens:,}; "
                             "paste a longer one.")
        rows.append(_measure(lm, ids))
    return rows


def _measure(lm, ids: list[int]) -> PairRow:
    shape = ModelShape.of_model(lm.model, name=lm.name)
    dtype_bytes = next(lm.model.parameters()).element_size()
    tokens = len(ids)
    engine = Engine(lm, block_size=BLOCK_SIZE, max_num_seqs=1, num_blocks=blocks_needed(tokens + 2, BLOCK_SIZE))
    engine.add_request(ids[:-1], SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True))
    engine.step()  # the prefill of all but one position
    record = engine.step()  # one decode step: `tokens` positions cached, the sliding layers' older blocks given back
    kinds = shape.layer_kinds
    lines = {line.kind: line for line in bill_breakdown(shape, tokens, dtype_bytes=dtype_bytes,
                                                         block_size=BLOCK_SIZE)}
    measured = []
    for kind in (FULL, SLIDING):
        layers = [i for i, k in enumerate(kinds) if k == kind]
        if not layers:
            continue
        measured.append(KindBytes(kind, len(layers), shape.sliding_window if kind == SLIDING else None,
                                  lines[kind].formula, lines[kind].num_bytes,
                                  sum(record.memory.layer_used_bytes[i] for i in layers)))
    by_kind = bytes_per_token_by_kind(shape, dtype_bytes)
    return PairRow(lm.name, shape.num_heads or shape.num_kv_heads, shape.num_kv_heads, tokens,
                   sum(by_kind.values()), by_kind.get(FULL, 0), measured)
