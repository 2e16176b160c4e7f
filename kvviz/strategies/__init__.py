"""The cache policies: dynamic, static, sliding window, quantized, paged, no cache, and the eviction lab's.

    from kvviz.strategies import run_strategy
    run = run_strategy(lm, "ROMEO:", "quantized", max_tokens=32, bits=4, residual=16)

The "Cache strategies" lesson compares them all in kvviz.lessons.cache_strategies.logic (compare_strategies).

dynamic, static, sliding_window and quantized are kvviz's own small cache classes, plugged into
the model through transformers' Cache API (`model(..., cache=...)`); paged is kvviz's Engine, and
no_cache is the Engine recomputing everything. The eviction lab (eviction.py) holds a fixed budget of
tokens: sliding window, attention sinks + window (SinkWindowKV), heavy hitters (HeavyHitterKV).
"""

from kvviz.strategies.base import KVLayer, StrategyCache
from kvviz.strategies.bill import ByteBill, ByteItem
from kvviz.strategies.compare import kl_divergence
from kvviz.strategies.dynamic import DynamicKV
from kvviz.strategies.eviction import EvictionLab, eviction_lab
from kvviz.strategies.heavy_hitters import HeavyHitterKV
from kvviz.strategies.options import STRATEGIES, StrategySpec, make_cache, resolve_options
from kvviz.strategies.quantized import QuantizedKV, dequantize, quantize
from kvviz.strategies.run import StrategyRun, StrategyStep, run_strategy
from kvviz.strategies.sinks import SinkWindowKV
from kvviz.strategies.sliding import SlidingWindowKV
from kvviz.strategies.static import StaticKV

__all__ = ["KVLayer", "StrategyCache", "DynamicKV", "StaticKV", "SlidingWindowKV", "QuantizedKV",
           "quantize", "dequantize", "ByteBill", "ByteItem", "STRATEGIES", "StrategySpec", "make_cache",
           "resolve_options", "StrategyRun", "StrategyStep", "run_strategy", "kl_divergence",
           "SinkWindowKV", "HeavyHitterKV", "EvictionLab", "eviction_lab"]
