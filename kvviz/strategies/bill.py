"""Measured against predicted: the bytes a strategy's tensors hold, beside the formula.

The formula is the article's, for the tokens in context:

    2 (K and V) × layers × KV heads × head_dim × tokens × bytes per value

A strategy's tensors hold something else, and every difference has a name: the empty part of a
static reservation, the tokens a window dropped, codes narrower than the model's values plus
their scales and zero points, a paged pool's free blocks and its last block's empty slots.
`ByteBill` lists them so that formula + differences = measured, to the byte. `predicted_bytes`
is kvviz.memory_bill's bill with the strategy's own options, which must equal the measurement.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvviz.memory_bill import bill_breakdown, kv_cache_bytes
from kvviz.shapes import ModelShape
from kvviz.strategies.base import StrategyCache


@dataclass(slots=True)
class ByteItem:
    name: str
    num_bytes: int  # negative when the strategy holds less than the formula


@dataclass(slots=True)
class ByteBill:
    measured_bytes: int  # sum of nbytes of the tensors the cache holds (a paged pool: all its blocks)
    layer_bytes: list[int]  # the same, per layer
    formula_bytes: int  # the article's formula for the tokens in context
    predicted_bytes: int  # kvviz.memory_bill.kv_cache_bytes with this strategy's options
    differences: list[ByteItem]  # formula_bytes + their sum == measured_bytes

    def check(self) -> None:
        explained = self.formula_bytes + sum(d.num_bytes for d in self.differences)
        assert explained == self.measured_bytes, f"unexplained bytes: {self.measured_bytes - explained}"
        assert sum(self.layer_bytes) == self.measured_bytes


def full_attention_shape(model) -> ModelShape:
    """The model's shape for the formula, every layer keeping every token (as our caches store them)."""
    shape = ModelShape.of_model(model)
    return replace(shape, sliding_window=None, layer_types=None)


def memory_options(name: str, options: dict, shape: ModelShape) -> tuple[ModelShape, dict]:
    """The strategy's options in kvviz.memory_bill's terms: (shape, keyword arguments of kv_cache_bytes)."""
    if name == "static":
        return shape, {"reserved_tokens": options["capacity"]}
    if name == "sliding_window":
        return replace(shape, sliding_window=options["window"]), {}
    if name == "quantized":
        return shape, {"quant_bits": options["bits"], "quant_group_size": options["group_size"],
                       "quant_residual_tokens": options["residual"]}
    return shape, {}


def formula_text(name: str, options: dict, shape: ModelShape, tokens: int, dtype_bytes: float) -> str:
    """kvviz.memory_bill's filled-in formula for this strategy (the paged pool: its allocated blocks)."""
    if name == "no_cache":
        return "no cache: 0 bytes kept; every step recomputes K and V for the whole sequence"
    if name == "paged":
        tokens = options["num_blocks"] * options["block_size"]
    shape, kwargs = memory_options(name, options, shape)
    return "; ".join(line.formula for line in bill_breakdown(shape, tokens, 1, dtype_bytes, **kwargs))


def cache_bill(name: str, options: dict, cache: StrategyCache, shape: ModelShape, tokens: int,
               dtype_bytes: float) -> ByteBill:
    """The bill of a transformers-run strategy after a step, `tokens` tokens in context."""
    per_token = kv_cache_bytes(shape, 1, 1, dtype_bytes)
    formula = kv_cache_bytes(shape, tokens, 1, dtype_bytes)
    memory_shape, kwargs = memory_options(name, options, shape)
    predicted = kv_cache_bytes(memory_shape, tokens, 1, dtype_bytes, **kwargs)
    held = cache.layers[0].num_held_tokens()
    differences = []
    if name == "static":
        empty = options["capacity"] - tokens
        differences.append(ByteItem(f"reserved but empty ({empty} of {options['capacity']} slots)",
                                    empty * per_token))
    elif name == "sliding_window" and held < tokens:
        differences.append(ByteItem(f"dropped: {tokens - held} tokens older than the window",
                                    -(tokens - held) * per_token))
    elif name == "quantized":
        named = cache.named_nbytes()
        quantized = cache.layers[0].num_quantized_tokens()
        if quantized:
            codes = named["key codes"] + named["value codes"]
            differences += [
                ByteItem(f"{quantized} older tokens stored as {options['bits']}-bit codes, "
                         f"not {round(dtype_bytes * 8)}-bit values", codes - quantized * per_token),
                ByteItem("quantization scales", named["key scales"] + named["value scales"]),
                ByteItem("quantization zero points", named["key zero points"] + named["value zero points"])]
    bill = ByteBill(cache.nbytes, cache.layer_nbytes(), formula, predicted, differences)
    bill.check()
    return bill


def engine_bill(name: str, options: dict, engine, shape: ModelShape, tokens: int,
                dtype_bytes: float) -> ByteBill:
    """The bill of the Engine after a step: its pool's tensors (paged), or nothing (no cache)."""
    formula = kv_cache_bytes(shape, tokens, 1, dtype_bytes)
    if name == "no_cache":
        bill = ByteBill(0, [0] * shape.num_layers, formula, 0, [ByteItem(
            f"nothing kept: each step recomputes K and V for all {tokens} tokens", -formula)])
    else:
        memory = engine.memory()  # used blocks and last-block slack, from the block tables
        pool_tokens = options["num_blocks"] * options["block_size"]
        predicted = kv_cache_bytes(shape, pool_tokens, 1, dtype_bytes)  # every block of the pool
        assert memory.used_block_bytes == kv_cache_bytes(shape, tokens, 1, dtype_bytes,
                                                         block_size=options["block_size"])
        bill = ByteBill(engine.cache.nbytes, engine.cache.layer_nbytes(), formula, predicted, [
            ByteItem("last-block slack (empty slots of the last block)", memory.slack_bytes),
            ByteItem("free blocks of the pool (allocated, held by no request)",
                     memory.allocated_bytes - memory.used_block_bytes)])
    bill.check()
    return bill
