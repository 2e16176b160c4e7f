"""Figures for the "Model lab": pure functions from kvviz.lessons.model_lab.logic's measurements to go.Figure.

With the cache is orange and without it purple, as in the first lesson's "Work saved" plot.
"""

from __future__ import annotations

import plotly.graph_objects as go

from kvviz.lessons.memory_bill.figures import layout
from kvviz.lessons.model_lab.logic import DecodeTiming
from kvviz.shapes import format_bytes
from kvviz.ui.colors import PHASE


def decode_time(timings: list[DecodeTiming]) -> go.Figure:
    """Forward time of one decode step against the context, with and without the cache."""
    contexts = [t.context for t in timings]
    fig = go.Figure()
    for cached, name, color in ((False, "without cache: all tokens again", PHASE["recompute"]),
                                (True, "with cache: the newest token", PHASE["decode"])):
        medians = [(t.cached_s if cached else t.uncached_s) * 1e3 for t in timings]
        spreads = [t.cached_spread_s if cached else t.uncached_spread_s for t in timings]
        fig.add_scatter(x=contexts, y=medians, name=name, mode="lines+markers",
                        line=dict(color=color, width=5), marker=dict(size=12),
                        error_y=dict(type="data", symmetric=False, array=[hi * 1e3 - m for m, (_, hi) in
                                                                          zip(medians, spreads)],
                                     arrayminus=[m - lo * 1e3 for m, (lo, _) in zip(medians, spreads)]),
                        hovertemplate=f"%{{x}} tokens: %{{y:.2f}} ms median<extra>{name.split(':')[0]}</extra>")
    fig.update_xaxes(title="tokens in context", rangemode="tozero")
    fig.update_yaxes(title=f"one step's forward pass (ms, median of {timings[-1].repeats})", rangemode="tozero")
    last = timings[-1]
    return layout(fig, f"One decode step<br><sup>at {last.context} tokens, the median is {last.speedup:.1f}× "
                       "faster with the cache</sup>", height=440,
                  legend=dict(x=0.02, y=0.98, bgcolor="rgba(255,255,255,0.85)", font=dict(size=16)))


def cache_bytes(timings: list[DecodeTiming]) -> go.Figure:
    """Bytes the engine's cache holds after the step (measured) beside the formula."""
    contexts = [t.context for t in timings]
    fig = go.Figure()
    fig.add_scatter(x=contexts, y=[t.formula_bytes / 2**20 for t in timings], name="formula",
                    mode="lines", line=dict(color="black", width=3, dash="dash"),
                    customdata=[format_bytes(t.formula_bytes) for t in timings],
                    hovertemplate="%{x} tokens: %{customdata}<extra>formula</extra>")
    fig.add_scatter(x=contexts, y=[t.cache_bytes / 2**20 for t in timings], name="measured in the engine",
                    mode="markers", marker=dict(color=PHASE["prompt"], size=16),
                    customdata=[format_bytes(t.cache_bytes) for t in timings],
                    hovertemplate="%{x} tokens: %{customdata}<extra>measured</extra>")
    fig.update_xaxes(title="tokens in context", rangemode="tozero")
    fig.update_yaxes(title="KV cache (MiB)", rangemode="tozero")
    return layout(fig, "Cache bytes: measured = formula", height=440,
                  legend=dict(x=0.02, y=0.98, bgcolor="rgba(255,255,255,0.85)", font=dict(size=16)))
