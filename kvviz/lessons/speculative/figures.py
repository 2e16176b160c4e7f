"""Figures for the speculative decoding lesson, from the lesson's per-pass rows and records."""

from __future__ import annotations

import math

import plotly.graph_objects as go

from kvviz.ui.colors import FONT, PHASE

ACCEPTED, REJECTED, MODEL = "#10B981", "#E45756", PHASE["prompt"]


def _layout(fig: go.Figure, title: str, height: int = 360) -> go.Figure:
    # the legend sits below the axis title, with room for two rows when the chart is narrow
    fig.update_layout(title=dict(text=title, font=dict(size=20)), font=FONT, height=height,
                      margin=dict(l=70, r=20, t=70, b=100), plot_bgcolor="white",
                      legend=dict(orientation="h", y=-0.3, yanchor="top"))
    return fig


def _whole_ticks(largest: int) -> dict:
    """Axis settings for counts: whole-number ticks only, at most about eight of them."""
    return dict(tick0=0, dtick=max(1, math.ceil(largest / 8)), range=[-0.5 if largest < 1 else 0, largest + 0.5])


def tokens_per_pass(rows) -> go.Figure:
    """Per forward pass: accepted drafts and the model's own token (kept), rejected drafts (rolled back).

    rows: DraftStep-like objects with number, num_accepted, num_rejected, added_token_ids."""
    passes = [r.number for r in rows]  # counted from 1, as the page counts them
    own = [len(r.added_token_ids) - r.num_accepted for r in rows]  # 1, or 0 past a stop
    fig = go.Figure([
        go.Bar(x=passes, y=own, name="model's own", marker_color=MODEL),
        go.Bar(x=passes, y=[r.num_accepted for r in rows], name="accepted", marker_color=ACCEPTED),
        go.Bar(x=passes, y=[r.num_rejected for r in rows], name="rejected (rolled back)",
               marker=dict(color=REJECTED, opacity=0.45, pattern_shape="x")),
    ])
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title="forward pass", dtick=max(1, math.ceil(len(rows) / 12)))
    tallest = max((len(r.added_token_ids) + r.num_rejected for r in rows), default=1)
    fig.update_yaxes(title="tokens", **_whole_ticks(tallest))
    kept = sum(len(r.added_token_ids) for r in rows)
    average = kept / len(rows) if rows else 0.0
    return _layout(fig, f"Tokens per forward pass<br><sup>{average:.2f} tokens kept per pass on average</sup>")


def race(tokens_by_pass: list[int], plain_tokens_by_pass: list[int]) -> go.Figure:
    """Tokens generated against forward passes, speculative beside plain decoding."""
    fig = go.Figure([
        go.Scatter(x=list(range(1, len(plain_tokens_by_pass) + 1)), y=plain_tokens_by_pass, name="plain decoding",
                   mode="lines+markers", line=dict(color="#6B7280", dash="dot")),
        go.Scatter(x=list(range(1, len(tokens_by_pass) + 1)), y=tokens_by_pass, name="with drafts",
                   mode="lines+markers", line=dict(color=ACCEPTED, width=3)),
    ])
    fig.update_xaxes(title="forward passes", **_whole_ticks(max(len(tokens_by_pass), len(plain_tokens_by_pass))))
    fig.update_yaxes(title="tokens generated", **_whole_ticks(max(tokens_by_pass + plain_tokens_by_pass, default=1)))
    return _layout(fig, "Same tokens, fewer passes")
