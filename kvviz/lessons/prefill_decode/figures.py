"""Figures for the "Prefill and decode" lesson: pure functions from records to go.Figure."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from kvviz.lessons.prefill_decode.explain_figures import token_axis
from kvviz.ui.colors import FONT, PHASE, layer_color
from kvviz.ui.text import chart_text


def _layout(fig: go.Figure, title: str, height: int = 380, **kwargs) -> go.Figure:
    fig.update_layout(title=dict(text=title, font=dict(size=20)), font=FONT, height=height,
                      margin=dict(l=60, r=20, t=60, b=50), plot_bgcolor="white", **kwargs)
    return fig


def cache_growth(entered_step: list[int], num_layers: int, sliding: list[bool] | None = None,
                 given_back: int = 0) -> go.Figure:
    """Layers by positions: every cell is one token's K and V in one layer.

    entered_step[p]: the step at which position p entered the cache (0 = prefill); sliding[layer]: whether the
    layer slides, and given_back: how many of the oldest positions the sliding layers gave back (drawn empty).
    """
    positions = len(entered_step)
    latest = max(entered_step)
    # 0: prompt, 1: earlier decode, 2: this step's new column, 3: given back by a sliding layer
    codes = np.array([0 if s == 0 else (2 if s == latest and latest > 0 else 1) for s in entered_step])
    if latest == 0:
        codes[:] = 2  # right after prefill the whole prompt is new
    z = np.tile(codes, (num_layers, 1))  # (layers, positions)
    slides = np.array(sliding if sliding else [False] * num_layers)
    z[slides, :given_back] = 3
    colorscale = [[0, PHASE["prompt"]], [0.24, PHASE["prompt"]], [0.25, PHASE["decode"]], [0.49, PHASE["decode"]],
                  [0.50, PHASE["new"]], [0.74, PHASE["new"]], [0.75, "#E5E7EB"], [1, "#E5E7EB"]]
    hover = np.array([[f"layer {layer}<br>position {p}<br>" + (
                       "outside the window: given back" if z[layer, p] == 3 else
                       f"entered at {'prefill' if entered_step[p] == 0 else f'decode step {entered_step[p]}'}")
                       for p in range(positions)] for layer in range(num_layers)])
    fig = go.Figure(go.Heatmap(z=z, zmin=0, zmax=3, colorscale=colorscale, showscale=False,
                               xgap=2, ygap=4, hovertext=hover, hoverinfo="text"))
    fig.update_yaxes(title="layer", autorange="reversed", tickmode="linear", dtick=1)
    fig.update_xaxes(title="token position in the cache", range=[-0.5, max(positions, 8) - 0.5])
    title = (f"The cache: {num_layers} layers × {positions} positions "
             f"(<span style='color:{PHASE['prompt']}'>prompt</span>, "
             f"<span style='color:{PHASE['decode']}'>generated</span>, "
             f"<span style='color:{PHASE['new']}'>new this step</span>"
             + (", grey: given back by a sliding layer" if given_back and slides.any() else "") + ")")
    return _layout(fig, title, height=max(260, 40 * num_layers + 120))


def kv_heatmap(matrix: np.ndarray, which: str, layer: int, kv_head: int | None, new_rows: int,
               changed_rows: int = 0, texts: list[str] | None = None) -> go.Figure:
    """K or V of one layer and KV head. matrix: (positions, head_dim); the last `new_rows` are new.
    kv_head None: an MLA layer's cached rows, (positions, latent + rope), shared by every head.
    texts: each position's token text, written on the position axis."""
    positions = matrix.shape[0]
    limit = float(np.abs(matrix).max()) or 1.0
    fig = go.Figure(go.Heatmap(z=matrix, colorscale="RdBu", zmid=0, zmin=-limit, zmax=limit,
                               colorbar=dict(title=which, thickness=14),
                               hovertemplate="position %{y}<br>dim %{x}<br>value %{z:.3f}<extra></extra>"))
    fig.add_shape(type="rect", x0=-0.5, x1=matrix.shape[1] - 0.5, y0=positions - new_rows - 0.5,
                  y1=positions - 0.5, line=dict(color=PHASE["new"], width=4))
    fig.update_yaxes(title="token (position)", autorange="reversed", **(token_axis(texts) if texts else {}))
    fig.update_xaxes(title="head dimension" if kv_head is not None else "latent dimension, then RoPE key")
    unchanged = "" if changed_rows else "<br><sup>earlier rows unchanged</sup>"  # one line ran past a half-width chart
    head = f"KV head {kv_head}" if kv_head is not None else "all heads"
    fig = _layout(fig, f"{which}, layer {layer}, {head}{unchanged}",
                  height=min(700, max(320, 12 * positions + 160)))
    return fig.update_layout(margin=dict(l=120, t=80))


def attention_by_head(weights: np.ndarray, kv_heads: int, tokens: list[str], layer: int) -> go.Figure:
    """The newest token's attention. weights: (heads, positions), rows grouped by shared KV head."""
    heads, positions = weights.shape
    group = heads // kv_heads
    labels = [f"q{h} → kv{h // group}" for h in range(heads)]
    short = [chart_text(t.replace("\n", "⏎")[:8]) for t in tokens[:positions]]
    fig = go.Figure(go.Heatmap(
        z=weights, y=labels, colorscale="Blues", zmin=0, zmax=float(weights.max()) or 1.0,
        customdata=np.tile(np.array(short, dtype=object), (heads, 1)),
        colorbar=dict(title="weight", thickness=14),
        hovertemplate="%{y}<br>position %{x}: %{customdata}<br>weight %{z:.3f}<extra></extra>"))
    # a line between the heads that share one KV head, all set at once: add_hline one by one copies
    # every shape so far each time, which took minutes for a file claiming 1,024 KV heads
    fig.update_layout(shapes=[dict(type="line", xref="x domain", x0=0, x1=1, y0=g * group - 0.5, y1=g * group - 0.5,
                                   line=dict(color="black", width=3)) for g in range(1, kv_heads)])
    fig.update_yaxes(title=f"query head (groups of {group} share a KV head)", autorange="reversed")
    fig.update_xaxes(title="cached token (position)", tickangle=-60, **token_axis(tokens[:positions]))
    fig = _layout(fig, f"Newest token attends to the cache: layer {layer}, all {heads} heads",
                  height=max(320, 34 * heads + 200))
    return fig.update_layout(margin=dict(b=110))


def work_saved(rows: list[dict]) -> go.Figure:
    """Tokens run through the model per step (bars) and in total (lines), with and without the cache.

    Counts, not times: a single step's time on a shared machine says more about the machine than
    about the cache (the Model lab times steps as medians of warm runs)."""
    steps = [r["step"] for r in rows]
    fig = go.Figure()
    fig.add_bar(x=steps, y=[r["without_cache_tokens"] for r in rows], name="this step, no cache",
                marker_color=PHASE["recompute"])
    fig.add_bar(x=steps, y=[r["with_cache_tokens"] for r in rows], name="this step, with cache",
                marker_color=PHASE["decode"])
    fig.add_scatter(x=steps, y=[r["without_cache_total"] for r in rows], name="so far, no cache", yaxis="y2",
                    mode="lines", line=dict(color=PHASE["recompute"], dash="dot", width=3))
    fig.add_scatter(x=steps, y=[r["with_cache_total"] for r in rows], name="so far, with cache", yaxis="y2",
                    mode="lines", line=dict(color=PHASE["decode"], dash="dot", width=3))
    # both axes from 0 to past their largest count, set here: left to itself, the overlaid axis
    # drew ticks at 4.1, 47.7, ... and topped out below the last total
    most_step = max((r["without_cache_tokens"] for r in rows), default=1)
    most_total = max((r["without_cache_total"] for r in rows), default=1)
    fig.update_layout(barmode="group", legend=dict(orientation="h", y=-0.25),
                      yaxis=dict(title="tokens run this step", range=[0, 1.08 * most_step]),
                      yaxis2=dict(title="tokens run so far", overlaying="y", side="right",
                                  range=[0, 1.08 * most_total], tickmode="auto", showgrid=False))
    fig.update_xaxes(title="step (0 = prefill)", tickformat="d", dtick=1 if len(steps) <= 12 else None)  # whole steps
    return _layout(fig, "Tokens through the model: the work the cache saves", height=400)


def layer_bytes(layer_bytes: list[int]) -> go.Figure:
    """Bytes held per layer (all layers alike in a full-attention model)."""
    fig = go.Figure(go.Bar(x=[f"layer {i}" for i in range(len(layer_bytes))], y=layer_bytes,
                           marker_color=[layer_color(i) for i in range(len(layer_bytes))],
                           hovertemplate="%{x}: %{y:,} bytes<extra></extra>"))
    fig.update_yaxes(title="bytes in blocks")
    return _layout(fig, "Cache bytes per layer", height=300)
