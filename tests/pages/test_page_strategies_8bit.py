"""Cache strategies, "Measured vs formula": the 8-bit quantized strategy beside kvviz's engine with an 8-bit
paged cache (issue 26), every bytes-per-token figure measured, and the same figures after export and replay."""

import torch

from kvviz.engine.cache_dtype import measured_bytes_per_token
from kvviz.lessons.cache_strategies.file import export_strategies, import_strategies
from kvviz.lessons.cache_strategies.state import replayed
from kvviz.strategies.quantized import QuantizedKV

from app_tests import button, open_lesson


def eight_bit_table(at) -> dict[str, int]:
    """The page's 8-bit table: cache -> bytes per token."""
    frame = next(d.value for d in at.dataframe if "bytes per token" in d.value.columns)
    return dict(zip(frame["cache"], frame["bytes per token"]))


def strategy_bytes_per_token(shape, group_size: int) -> int:
    """The int8 strategy's bytes for one token, counted here from a QuantizedKV layer per model layer."""
    total = 0
    for _ in range(shape.num_layers):
        layer = QuantizedKV(8, group_size)
        token = torch.randn(1, shape.num_kv_heads, 1, shape.head_dim)  # (B, kv_heads, 1, head_dim)
        layer.update(token, token)
        total += sum(t.nbytes for t in layer.held_tensors().values())
    return total


def test_the_8bit_rows_are_the_engines_measured_bytes_and_replay_unchanged(bundled):
    at = open_lesson("lessons/cache_strategies.py")
    at.slider(key="strategies_max_tokens").set_value(3)
    at.selectbox(key="strategies_group_size").set_value(16).run()
    button(at, "Run every strategy").click().run()
    assert not at.exception and not at.error
    shape = bundled.shape
    expected = {"int8, group 16: this page's quantized strategy": strategy_bytes_per_token(shape, 16),
                'kvviz engine, kv_cache_dtype="int8"': measured_bytes_per_token(shape, "int8"),
                'kvviz engine, kv_cache_dtype="fp8"': measured_bytes_per_token(shape, "fp8"),
                'kvviz engine, kv_cache_dtype="auto" (float32)': measured_bytes_per_token(shape, "auto")}
    assert eight_bit_table(at) == expected
    # the bundled model: 6 layers x 2 KV heads x K and V x (32 one-byte values + a 4-byte scale), and the
    # strategy's two float32 numbers (scale, zero point) per group of 16
    assert expected['kvviz engine, kv_cache_dtype="int8"'] == 6 * 2 * 2 * (32 + 4) == 864
    assert expected["int8, group 16: this page's quantized strategy"] == 6 * 2 * 2 * (32 + 2 * 2 * 4) == 1152
    assert any("measured once by scripts/bench_kv_dtype.py on 2026-12-01" in c.value and "int8 mean KL 2.3e-05"
               in c.value for c in at.caption)

    lesson = at.session_state["strategies_run"]
    file = import_strategies(export_strategies(lesson))
    assert file["eight_bit"] == lesson["eight_bit"]
    played = open_lesson("lessons/cache_strategies.py")
    played.session_state["strategies_run"] = replayed(file)
    played.run()
    assert not played.exception
    assert eight_bit_table(played) == expected
