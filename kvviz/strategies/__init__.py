"""The cache policies: dynamic, static, sliding window, quantized, paged, no cache, and the eviction lab's.

    from kvviz.strategies.run import run_strategy
    run = run_strategy(lm, "ROMEO:", "quantized", max_tokens=32, bits=4, residual=16)

The "Cache strategies" lesson compares them all in kvviz.lessons.cache_strategies.logic (compare_strategies).

dynamic, static, sliding_window and quantized are kvviz's own small cache classes, plugged into
the model through transformers' Cache API (`model(..., cache=...)`); paged is kvviz's Engine, and
no_cache is the Engine recomputing everything. The eviction lab (eviction.py) holds a fixed budget of
tokens: sliding window, attention sinks + window (SinkWindowKV), heavy hitters (HeavyHitterKV).
Each name is imported from the module that defines it; this package file re-exports nothing.
"""
