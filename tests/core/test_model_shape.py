"""One model shape read once from a config, and one adapter from what a caller passes to what the engine needs."""

import torch

from kvviz import Engine
from kvviz.engine.kv_cache import CacheShape
from kvviz.engine.model_parts import model_parts
from kvviz.memory_bill import kv_bytes_per_token
from kvviz.shapes import FULL, SLIDING, ModelShape
from kvviz.strategies.options import ModelFacts

from tiny_models import tiny_model


def test_shape_of_a_loaded_model_has_its_windows_and_dtype():
    model = tiny_model("gemma2").to(torch.bfloat16)
    shape = ModelShape.of_model(model)
    assert (shape.num_layers, shape.num_heads, shape.num_kv_heads, shape.head_dim) == (2, 4, 2, 16)
    assert shape.layer_kinds == (SLIDING, FULL) and shape.sliding_window == 8
    assert shape.dtype == torch.bfloat16 and shape.dtype_bytes == 2 and shape.max_context == 256


def test_the_cache_the_bill_and_the_strategies_read_the_same_shape():
    model = tiny_model("qwen3")  # head_dim 16 given in the config, not hidden_size // heads
    shape = ModelShape.of_model(model)
    cache = CacheShape.from_model(model)
    assert cache == CacheShape.from_shape(shape) == CacheShape(2, 2, 16, torch.float32)
    assert cache.bytes_per_token == kv_bytes_per_token(shape, shape.dtype_bytes) == 2 * 2 * 2 * 16 * 4
    facts = ModelFacts.of(model)
    assert (facts.num_layers, facts.num_kv_heads, facts.head_dim, facts.max_context) == (2, 2, 16, 256)


def test_model_parts_of_a_loaded_model_and_of_a_bare_one(bundled):
    assert model_parts(bundled) == (bundled.model, bundled.tokenizer, bundled.max_context)
    gpt2 = tiny_model("gpt2")  # its context is n_positions, not max_position_embeddings
    model, tokenizer, max_context = model_parts(gpt2)
    assert model is gpt2 and tokenizer is None and max_context == 256
    assert Engine(gpt2, num_blocks=8).max_context == 256


def test_describe_reads_the_shape(bundled):
    info, shape = bundled.describe(), bundled.shape
    assert (info["layers"], info["heads"], info["kv_heads"], info["head_dim"], info["hidden_size"]) == \
        (shape.num_layers, shape.num_heads, shape.num_kv_heads, shape.head_dim, shape.hidden_size) == (6, 8, 2, 32, 256)
    assert info["dtype_bytes"] == shape.dtype_bytes == bundled.dtype.itemsize
