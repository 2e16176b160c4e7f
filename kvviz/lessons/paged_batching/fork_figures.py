"""Figures for parallel sampling and preemption: blocks held by a fork, swap vs recompute."""

from __future__ import annotations

import plotly.graph_objects as go

from kvviz.ui.colors import BLOCK_STATE, FONT, PHASE


def fork_memory(held: list[tuple[int, int]], bytes_per_block: int) -> go.Figure:
    """Blocks held per step by the forked samples against n independent requests.

    held: [(fork blocks, independent blocks)] per step, from fork_lesson.blocks_held.
    """
    steps = list(range(len(held)))
    fig = go.Figure()
    for index, (name, color) in enumerate((("n samples sharing the prompt", BLOCK_STATE["shared"]),
                                           ("n independent requests", PHASE["recompute"]))):
        counts = [pair[index] for pair in held]
        fig.add_trace(go.Scatter(
            x=steps, y=counts, name=name, mode="lines+markers", line=dict(color=color, width=3,
                                                                         dash="solid" if index == 0 else "dot"),
            hovertext=[f"step {s}: {c} blocks ({c * bytes_per_block / 1024:.0f} KiB)" for s, c in zip(steps, counts)],
            hoverinfo="text"))
    fig.update_layout(title=dict(text="Blocks held<br><sup>shared prompt vs a copy per request</sup>",
                                 font=dict(size=20)),
                      font=FONT, height=380, margin=dict(l=70, r=20, t=80, b=110), plot_bgcolor="white",
                      legend=dict(orientation="h", y=-0.3, yanchor="top"))  # below the axis title
    fig.update_xaxes(title="step", dtick=max(1, -(-len(steps) // 12)))
    fig.update_yaxes(title="blocks", rangemode="tozero")
    return fig
