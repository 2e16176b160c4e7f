"""Figures for the explanations inside "Prefill and decode": the causal triangle, Q/K/V, the roofline."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from kvviz.lessons.prefill_decode.roofline import Accelerator, StepCost
from kvviz.ui.colors import FONT, PHASE
from kvviz.ui.text import chart_text

MAX_TICKS = 48  # past this many tokens, label every n-th one so the labels stay readable


def token_label(text: str) -> str:
    """A token's text as an axis label: newline as ⏎, a leading space as ·, HTML-safe."""
    shown = chart_text(text.replace("\n", "⏎"))
    return ("·" + shown[1:] if shown.startswith(" ") else shown) or "∅"


def token_axis(texts: list[str]) -> dict:
    """Axis settings that put each position's token text on the axis (positions stay numeric,
    so repeated tokens keep their own rows)."""
    every = max(1, math.ceil(len(texts) / MAX_TICKS))
    positions = list(range(0, len(texts), every))
    return dict(tickmode="array", tickvals=positions, ticktext=[f"{token_label(texts[p])} {p}" for p in positions])


def _layout(fig: go.Figure, title: str, height: int) -> go.Figure:
    fig.update_layout(title=dict(text=title, font=dict(size=20)), font=FONT, height=height,
                      margin=dict(l=110, r=20, t=60, b=110), plot_bgcolor="white")
    return fig


def causal_attention(prompt_matrix: np.ndarray, decode_rows: list[np.ndarray], texts: list[str],
                     layer: int, head: int) -> go.Figure:
    """Prefill's whole causal matrix (the triangle) with each decode step's single row under it.

    prompt_matrix: (T, T), row i = query i's weights; decode_rows[s]: (T + s + 1,), decode step s + 1.
    """
    prompt = prompt_matrix.shape[0]
    size = prompt + len(decode_rows)
    z = np.full((size, size), np.nan)  # (queries, keys); NaN: a future position, never attended
    z[:prompt, :prompt] = np.where(np.tril(np.ones((prompt, prompt), dtype=bool)), prompt_matrix, np.nan)
    for step, row in enumerate(decode_rows):
        z[prompt + step, :row.shape[0]] = row
    fig = go.Figure(go.Heatmap(z=z, colorscale="Blues", zmin=0, zmax=float(np.nanmax(z)) or 1.0, hoverongaps=False,
                               colorbar=dict(title="weight", thickness=14),
                               hovertemplate="query %{y} → key %{x}<br>weight %{z:.3f}<extra></extra>"))
    if decode_rows:  # above the line: prefill, all queries at once; below: one query per decode step
        fig.add_hline(y=prompt - 0.5, line=dict(color=PHASE["decode"], width=3))
    labels = texts[:size]
    fig.update_yaxes(title="query (the token that attends)", autorange="reversed", **token_axis(labels))
    fig.update_xaxes(title="key (the token attended to)", tickangle=-60, **token_axis(labels))
    title = (f"Layer {layer}, head {head}: prefill's {prompt}×{prompt} triangle"
             + (f" + {len(decode_rows)} decode row{'s' if len(decode_rows) != 1 else ''} (below the orange line)"
                if decode_rows else ""))
    return _layout(fig, title, height=min(760, max(420, 14 * size + 200)))


def qkv_vectors(q: np.ndarray, k_before: np.ndarray, k_cached: np.ndarray, v: np.ndarray, kv_head: int,
                group: int) -> go.Figure:
    """The newest token's vectors for one KV head and its first query head, one line per vector."""
    dims = np.arange(q.shape[-1])
    fig = go.Figure()
    for name, vector, color, dash in (
            (f"q (head {kv_head * group}, after RoPE)", q[kv_head * group], PHASE["recompute"], "solid"),
            ("k before RoPE", k_before[kv_head], "#9CA3AF", "dot"),
            ("k as cached (after RoPE)", k_cached[kv_head], PHASE["prompt"], "solid"),
            ("v as cached", v[kv_head], PHASE["decode"], "solid")):
        fig.add_scatter(x=dims, y=vector, name=name, mode="lines+markers", line=dict(color=color, dash=dash))
    fig.update_xaxes(title="head dimension")
    fig.update_yaxes(title="value")
    fig.update_layout(legend=dict(orientation="h", y=-0.3))
    return _layout(fig, f"The newest token's q, k and v for KV head {kv_head}", height=420)


def roofline(device: Accelerator, costs: list[StepCost], prefill: StepCost | None = None) -> go.Figure:
    """Attainable FLOP/s against FLOPs per byte, log-log, with each step as a point under the roof."""
    points = costs + ([prefill] if prefill is not None else [])
    low = min([p.intensity for p in points] + [device.ridge]) / 4
    high = max([p.intensity for p in points] + [device.ridge]) * 4
    xs = np.logspace(math.log10(low), math.log10(high), 200)
    fig = go.Figure()
    fig.add_scatter(x=xs, y=np.minimum(device.peak_flops, device.bandwidth * xs), name=f"roof: {device.name}",
                    mode="lines", line=dict(color="black", width=3),
                    hovertemplate="%{x:.3g} FLOP/byte → at most %{y:.3g} FLOP/s<extra></extra>")
    fig.add_vline(x=device.ridge, line=dict(color="#9CA3AF", dash="dot"))
    fig.add_annotation(x=math.log10(device.ridge), y=math.log10(device.peak_flops),
                       text=f"ridge {device.ridge:.0f} FLOP/B", showarrow=False, yanchor="bottom", xanchor="left")
    symbols = ["circle", "diamond", "square", "triangle-up", "triangle-down", "cross"]
    for index, cost in enumerate(points):
        is_prefill = cost is prefill
        color = PHASE["prompt"] if is_prefill else (PHASE["new"] if index == 0 else PHASE["decode"])
        attained = cost.flops / cost.seconds(device)
        labelled = is_prefill or index == 0  # the variants sit close together: the legend names them
        fig.add_scatter(x=[cost.intensity], y=[attained], mode="markers+text" if labelled else "markers",
                        name=cost.label, text=[cost.label] if labelled else None,
                        textposition="top right" if cost.intensity < device.ridge else "top left",  # inward
                        marker=dict(size=15 if index == 0 else 11, color=color, symbol=symbols[index % 6],
                                    line=dict(color="black", width=1)),
                        hovertemplate=f"{cost.label}<br>%{{x:.3g}} FLOP/byte<br>%{{y:.3g}} FLOP/s<extra></extra>")
    # one label per power of ten, written one way: minor labels dropped their "0." (0.2 read "2")
    fig.update_xaxes(type="log", title="arithmetic intensity (FLOPs per byte read)", dtick=1, exponentformat="none")
    fig.update_yaxes(type="log", title="attainable FLOP/s", dtick=1, exponentformat="power")
    fig.update_layout(legend=dict(orientation="h", y=-0.3))
    return _layout(fig, f"Roofline of {device.name}: decode sits on the memory slope", height=520)


def step_time_vs_context(contexts: list[int], predicted_ms: list[float],
                         measured: list[tuple[int, float, float, float]], device_name: str) -> go.Figure:
    """The roofline's least decode step time beside measured medians.
    measured: (context, median ms, ms up to the slowest, ms down to the fastest)."""
    fig = go.Figure()
    fig.add_scatter(x=contexts, y=predicted_ms, name=f"roofline bound on {device_name}", mode="lines",
                    line=dict(color="black", dash="dash"))
    if measured:
        fig.add_scatter(x=[m[0] for m in measured], y=[m[1] for m in measured], name="measured median",
                        mode="markers+lines", marker=dict(color=PHASE["decode"], size=10),
                        error_y=dict(type="data", symmetric=False, array=[m[2] for m in measured],
                                     arrayminus=[m[3] for m in measured], visible=True))
    fig.update_xaxes(title="context length (tokens)")
    fig.update_yaxes(title="decode step time (ms)", type="log")
    fig.update_layout(legend=dict(orientation="h", y=-0.3))
    return _layout(fig, "Decode step time against context", height=420)
