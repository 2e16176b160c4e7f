"""Figures for the paged cache lesson: block tables, the physical pool, the schedule."""

from __future__ import annotations

import plotly.graph_objects as go

from kvviz.engine.records import BlockRecord, StepRecord
from kvviz.ui.colors import BLOCK_STATE, FONT, request_color
from kvviz.ui.text import chart_text


def _layout(fig: go.Figure, title: str, height: int) -> go.Figure:
    fig.update_layout(title=dict(text=title, font=dict(size=20)), font=FONT, height=height,
                      margin=dict(l=70, r=20, t=60, b=40), plot_bgcolor="white", showlegend=False)
    return fig


def pool_grid(blocks: list[BlockRecord], labels: dict[int, str], columns: int = 16) -> go.Figure:
    """Every physical block as a square: coloured by owner, shared ones with their reference count."""
    xs, ys, colors, texts, hovers = [], [], [], [], []
    for block in blocks:
        xs.append(block.block_id % columns)
        ys.append(block.block_id // columns)
        if block.free:
            colors.append(BLOCK_STATE["cached_free"] if block.cached else BLOCK_STATE["free"])
            texts.append("")
            state = "free, still cached (reusable until evicted)" if block.cached else "free"
        elif block.ref_cnt > 1:
            colors.append(BLOCK_STATE["shared"])
            texts.append(f"×{block.ref_cnt}")
            state = "shared by " + ", ".join(labels.get(o, f"#{o}") for o in block.owners)
        else:
            owner = block.owners[0]
            colors.append(request_color(owner))
            texts.append(labels.get(owner, ""))
            state = f"held by {labels.get(owner, owner)}" + (" (cached)" if block.cached else "")
        hovers.append(f"block {block.block_id}: {state}")
    rows = max(ys) + 1 if ys else 1
    fig = go.Figure(go.Scatter(
        x=xs, y=ys, mode="markers+text", text=texts, hovertext=hovers, hoverinfo="text",
        textfont=dict(color="white", size=13),
        marker=dict(symbol="square", size=34, color=colors, line=dict(color="#6B7280", width=1))))
    fig.update_xaxes(visible=False, range=[-0.7, columns - 0.3])
    # the range runs top to bottom by itself; autorange would pad it with rows that do not exist
    fig.update_yaxes(title="block id ÷ 16", tickmode="linear", dtick=1, range=[rows - 0.4, -0.6],
                     showgrid=False, zeroline=False)
    used = sum(1 for b in blocks if not b.free)
    title = (f"Physical pool: {used} of {len(blocks)} blocks in use<br>"
             f"<sup><span style='color:{BLOCK_STATE['shared']}'>■ shared (×refs)</span> · "
             f"<span style='color:#10B981'>■ free but cached</span> · ■ colour = owner</sup>")
    return _layout(fig, title, height=110 + 44 * max(rows, 2))  # one row still fits the axis title


def block_tables(record: StepRecord, labels: dict[int, str], block_size: int) -> go.Figure:
    """Each running request's block table: logical block i -> physical block id, last block's fill."""
    fig = go.Figure()
    states = [r for r in record.requests if r.block_table]
    for row, state in enumerate(states):
        for logical, physical in enumerate(state.block_table):
            filled = min(block_size, state.num_computed_tokens - logical * block_size)
            fig.add_trace(go.Scatter(
                x=[logical], y=[row], mode="markers+text", text=[str(physical)],
                textfont=dict(color="white", size=14),
                hovertext=f"{labels.get(state.request_id)}: logical block {logical} → physical block "
                          f"{physical}<br>{max(filled, 0)}/{block_size} slots filled",
                hoverinfo="text",
                marker=dict(symbol="square", size=38, color=request_color(state.request_id),
                            opacity=0.35 + 0.65 * max(filled, 0) / block_size,
                            line=dict(color="#111827", width=1))))
    fig.update_yaxes(tickvals=list(range(len(states))),
                     ticktext=[f"{labels.get(s.request_id)} · {s.num_computed_tokens} tok" for s in states],
                     autorange="reversed", showgrid=False, zeroline=False)
    fig.update_xaxes(title="logical block (the number inside: physical block id)", dtick=1,
                     showgrid=False, zeroline=False)
    if not states:  # every request finished (or none arrived yet): say so instead of empty axes
        fig.add_annotation(text="No request holds blocks at this step", showarrow=False,
                           xref="paper", yref="paper", x=0.5, y=0.5, font=dict(size=15, color="#374151"))
        fig.update_xaxes(visible=False)
        fig.update_yaxes(visible=False)
    return _layout(fig, "Block tables (faded = partly filled)", height=120 + 50 * max(len(states), 1))


def group_block_tables(record: StepRecord, labels: dict[int, str], block_size: int) -> go.Figure:
    """A model with sliding-window layers: each running request's table in every layer group, one row
    per group. A block the sliding window gave back (None in the record) is a grey square marked ×."""
    fig = go.Figure()
    rows = [(state, g, group) for state in record.requests if state.group_block_tables
            for g, group in enumerate(record.layer_groups) if state.group_block_tables[g]]
    for row, (state, g, group) in enumerate(rows):
        for logical, physical in enumerate(state.group_block_tables[g]):
            filled = max(0, min(block_size, state.num_computed_tokens - logical * block_size))
            given_back = physical is None
            where = "given back: outside the window of every query to come" if given_back else \
                f"physical block {physical} of the {group.name} pool<br>{filled}/{block_size} slots filled"
            fig.add_trace(go.Scatter(
                x=[logical], y=[row], mode="markers+text", text=["×" if given_back else str(physical)],
                textfont=dict(color="#6B7280" if given_back else "white", size=14),
                hovertext=f"{labels.get(state.request_id)}, {group.name} layers: logical block {logical} → {where}",
                hoverinfo="text",
                marker=dict(symbol="square", size=38, line=dict(color="#111827", width=1),
                            color=BLOCK_STATE["free"] if given_back else request_color(state.request_id),
                            opacity=1.0 if given_back else 0.35 + 0.65 * filled / block_size)))
    fig.update_yaxes(tickvals=list(range(len(rows))), autorange="reversed", showgrid=False, zeroline=False,
                     ticktext=[f"{labels.get(s.request_id)} · {group.name}"
                               + (f" ({group.window}-token window)" if group.window else "") for s, _, group in rows])
    # the axis title stays short: the long row labels leave this half-width chart a narrow plot area
    fig.update_xaxes(title="logical block", dtick=1, showgrid=False, zeroline=False)
    held = ", ".join(f"{group.name} {group.num_blocks - group.num_free_blocks} of {group.num_blocks}"
                     for group in record.layer_groups)
    return _layout(fig, "Block tables per layer group (× = given back)<br><sup>inside: physical block id · "
                        f"blocks in use: {held}</sup>", height=140 + 50 * max(len(rows), 1))


def schedule_timeline(records: list[StepRecord], labels: dict[int, str]) -> go.Figure:
    """Which request ran what at each step: prefill chunks, decodes, preemptions."""
    fig = go.Figure()
    for record in records:
        for chunk in record.chunks:
            kind = chart_text(chunk.kind)  # a replayed file's text: never markup
            fig.add_trace(go.Bar(
                x=[chunk.num_tokens], y=[f"step {record.step}"], orientation="h",
                marker=dict(color=request_color(chunk.request_id),
                            pattern_shape="" if chunk.kind == "decode" else "/"),
                text=f"{labels.get(chunk.request_id)} {kind}", textposition="inside",
                # a hatched bar is mostly white between its stripes: the text white on a plain bar would vanish
                insidetextfont=dict(color="white" if chunk.kind == "decode" else "#111827"),
                hovertext=f"{labels.get(chunk.request_id)}: {kind} of {chunk.num_tokens} tokens "
                          f"from position {chunk.start}", hoverinfo="text"))
    most = max((r.num_tokens_run for r in records), default=0)
    fig.update_layout(barmode="stack", uniformtext=dict(minsize=10, mode="hide"))  # no unreadable slivers
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title="tokens run in the step", dtick=1 if most <= 10 else None)  # whole tokens
    return _layout(fig, "Scheduler decisions per step<br><sup>hatched: a prefill chunk; plain: one decode</sup>",
                   height=140 + 28 * max(len(records), 1))
