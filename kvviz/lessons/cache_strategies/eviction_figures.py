"""Figures for the eviction lab: pure functions from an EvictionLab to figures.

The lab is a tab of the "Cache strategies" page (lessons/cache_strategies.py), with its own
state (kvviz/lessons/cache_strategies/eviction_view.py) and logic (kvviz/strategies/eviction.py).

Each policy keeps one colour; the sliding window keeps the colour it has on the other charts of
the Cache strategies lesson.
"""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from kvviz.lessons.cache_strategies.figures import STRATEGY
from kvviz.ui.colors import FONT, PHASE

POLICY = {"full": STRATEGY["dynamic"], "sliding_window": STRATEGY["sliding_window"], "sinks": "#E68310",
          "heavy_hitters": "#CF1C90"}
KEPT, DROPPED = "#3969AC", PHASE["new"]
_FLOOR = 1e-8  # a log axis cannot show 0 nats; smaller values are drawn at this floor


def _layout(fig: go.Figure, title: str, height: int) -> go.Figure:
    fig.update_layout(title=dict(text=title, font=dict(size=20)), font=FONT, height=height,
                      margin=dict(l=70, r=20, t=80, b=50), plot_bgcolor="white", legend=dict(font=dict(size=15)))
    fig.update_xaxes(showgrid=True, gridcolor="#E5E7EB", zeroline=False)
    fig.update_yaxes(showgrid=True, gridcolor="#E5E7EB", zeroline=False)
    return fig


def kl_per_step(lab) -> go.Figure:
    """KL(full || policy) of the next-token distribution per step, teacher-forced, log scale."""
    fig = go.Figure()
    for run in lab.runs[1:]:
        fig.add_trace(go.Scatter(
            x=list(range(len(run.kl))), y=[max(k, _FLOOR) for k in run.kl], name=run.label, mode="lines+markers",
            line=dict(color=POLICY[run.policy], width=3), customdata=run.kl,
            hovertemplate="step %{x}: %{customdata:.2e} nats<extra>%{fullData.name}</extra>"))
    first = lab.first_evicted_step
    if first is not None:
        fig.add_vline(x=first - 0.5, line=dict(color="#6B7280", dash="dot"),
                      annotation_text="first step without every token", annotation_position="top right")
    fig.update_xaxes(title="step (0 = the prompt)")
    fig.update_yaxes(title="KL (nats, log scale)", type="log", exponentformat="power")
    note = f"budget {lab.budget} tokens per layer and KV head; 0 nats drawn at {_FLOOR:.0e}"
    return _layout(fig, f"How far each policy's next-token distribution is from the full cache's<br><sup>{note}</sup>",
                   440)


def retention_maps(lab, token_labels: list[str]) -> go.Figure:
    """Per policy, steps down and positions across: the share of (layer, KV head) pairs that keep each
    position after the step. 1 = kept everywhere (blue), 0 = dropped everywhere (red), blank: not yet seen."""
    runs = lab.runs[1:]
    fig = make_subplots(rows=len(runs), cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=[r.label for r in runs])
    positions = np.arange(runs[0].retention.shape[1])
    hover_tokens = np.array([html.escape(label.replace("\n", "⏎")) for label in token_labels], dtype=object)
    for row, run in enumerate(runs, start=1):
        steps = np.arange(run.retention.shape[0])
        fig.add_trace(go.Heatmap(
            z=run.retention, x=positions, y=steps, zmin=0, zmax=1, showscale=row == 1,
            colorscale=[[0, DROPPED], [0.5, "#F3F4F6"], [1, KEPT]],
            colorbar=dict(title="kept by", tickvals=[0, 0.5, 1], ticktext=["none", "half", "all"], len=0.5, y=0.8),
            customdata=np.broadcast_to(hover_tokens[None, :], run.retention.shape),
            hovertemplate="after step %{y}, position %{x} %{customdata}: "
                          "kept by %{z:.0%} of layer×head<extra></extra>"),
            row=row, col=1)
        fig.update_yaxes(title="step", autorange="reversed", row=row, col=1)
    fig.update_xaxes(title="position in the sequence (tokens)", row=len(runs), col=1)
    return _layout(fig, "Which positions each policy keeps, step by step", 200 + 220 * len(runs))
