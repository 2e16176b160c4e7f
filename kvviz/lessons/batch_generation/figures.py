"""Figures for the "Batch generation" page: pure functions from a batch job's step series."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from kvviz.ui.colors import FONT, PHASE, request_color

SERIES = {
    "tokens": PHASE["decode"],  # orange: generated tokens, as on every page
    "running": "#3969AC",  # blue
    "waiting": "#9CA3AF",  # grey: queued, holding nothing
    "blocks": "#7C3AED",  # purple: blocks in use
    "preempt": PHASE["new"],  # red: a request lost its blocks
    "prefix_hit": "#11A579",  # green: prompt blocks found in the prefix cache
}
SYSTEMS = {"kvviz": "#3969AC", "transformers": "#9CA3AF"}
MAX_GANTT_REQUESTS = 64  # more rows than this cannot be read from the back of a room


def _layout(fig: go.Figure, title: str, height: int, **kwargs) -> go.Figure:
    fig.update_layout(title=dict(text=title, font=dict(size=20)), font=FONT, height=height,
                      margin=dict(l=80, r=20, t=70, b=50), plot_bgcolor="white", **kwargs)
    fig.update_xaxes(showgrid=True, gridcolor="#E5E7EB", zeroline=False)
    fig.update_yaxes(showgrid=True, gridcolor="#E5E7EB", zeroline=False)
    return fig


def rolling(values: list[float], times: list[float], width_s: float = 0.5) -> list[float]:
    """Tokens per second over the last `width_s` seconds (values: tokens per step)."""
    out, first = [], 0
    for i, now in enumerate(times):
        while times[first] < now - width_s:
            first += 1
        start = times[first - 1] if first > 0 else 0.0
        span = now - start
        out.append(sum(values[first:i + 1]) / span if span > 0 else 0.0)
    return out


def timeline(series, num_blocks: int, num_requests: int) -> go.Figure:
    """Over time: tokens/s; running and waiting requests; blocks in use with preemptions and prefix hits.

    series: kvviz.lessons.batch_generation.logic.StepPoint list (possibly of a run still going).
    """
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.09, subplot_titles=(
        "Generated tokens per second", "Requests: running (blue) and waiting (grey), stacked",
        f"Pool: blocks in use of {num_blocks}"))
    times = [p.time_s for p in series]
    speed = rolling([p.tokens_sampled for p in series], times)
    fig.add_trace(go.Scatter(x=times, y=speed, name="tokens/s (last 0.5 s)", mode="lines",
                             line=dict(color=SERIES["tokens"], width=4), fill="tozeroy",
                             hovertemplate="%{y:.0f} tokens/s"), row=1, col=1)
    for key in ("running", "waiting"):  # stacked: the top edge is every request not yet finished
        counts = [getattr(p, key) for p in series]
        fig.add_trace(go.Scatter(x=times, y=counts, name=key, mode="lines", stackgroup="requests",
                                 line=dict(color=SERIES[key], width=2, shape="hv"), fillcolor=SERIES[key],
                                 customdata=counts, hovertemplate=f"%{{customdata}} {key}"), row=2, col=1)
    fig.add_trace(go.Scatter(x=times, y=[p.blocks_used for p in series], name="blocks in use", mode="lines",
                             line=dict(color=SERIES["blocks"], width=3, shape="hv"), fill="tozeroy",
                             hovertemplate="%{y} blocks"), row=3, col=1)
    fig.add_hline(y=num_blocks, line=dict(color="black", width=2, dash="dash"), row=3, col=1)
    for key, label, symbol in (("preemptions", "preemption", "x"), ("prefix_hit_tokens", "prefix hit", "star")):
        hits = [p for p in series if getattr(p, key)]
        color = SERIES["preempt" if key == "preemptions" else "prefix_hit"]
        fig.add_trace(go.Scatter(
            x=[p.time_s for p in hits], y=[p.blocks_used for p in hits], name=label, mode="markers",
            marker=dict(symbol=symbol, size=16, color=color, line=dict(color="white", width=1)),
            customdata=[getattr(p, key) for p in hits],
            hovertemplate=f"{label}: %{{customdata}}" + (" tokens" if key != "preemptions" else "")),
            row=3, col=1)
    fig.update_yaxes(rangemode="tozero", row=1, col=1)
    fig.update_yaxes(range=[0, max(num_requests, 1) * 1.08], row=2, col=1)
    fig.update_yaxes(range=[0, max(num_blocks, 1) * 1.1], row=3, col=1)
    fig.update_xaxes(title="seconds since the start", row=3, col=1)
    fig.update_annotations(font=dict(size=17), x=0, xanchor="left")
    finished = series[-1].finished if series else 0
    return _layout(fig, f"{finished} of {num_requests} requests finished", height=760,
                   legend=dict(orientation="h", y=-0.1, font=dict(size=15), traceorder="normal"),
                   hovermode="x unified")


def request_spans(series, num_requests: int) -> list[list[tuple[float, float]]]:
    """Per request, the (start, end) seconds of each stretch of consecutive steps it ran in."""
    spans: list[list[tuple[float, float]]] = [[] for _ in range(num_requests)]
    previous_end, previous_ids = 0.0, set()
    for point in series:
        for request_id in point.ran_ids:
            if request_id >= num_requests:
                continue
            if request_id in previous_ids and spans[request_id]:
                spans[request_id][-1] = (spans[request_id][-1][0], point.time_s)
            else:
                spans[request_id].append((previous_end, point.time_s))
        previous_end, previous_ids = point.time_s, set(point.ran_ids)
    return spans


def request_lanes(series, num_requests: int) -> go.Figure:
    """One lane per request, in its colour while it ran. Before its first bar it waited; a gap
    after a bar is a preemption: it gave its blocks back and waited to be recomputed."""
    shown = min(num_requests, MAX_GANTT_REQUESTS)
    starts, lengths, lanes, colors, hovers = [], [], [], [], []
    for request_id, spans in enumerate(request_spans(series, shown)):
        for start, end in spans:
            starts.append(start)
            lengths.append(end - start)
            lanes.append(request_id)
            colors.append(request_color(request_id))
            hovers.append(f"request {request_id}: ran {start:.2f} s to {end:.2f} s")
    fig = go.Figure(go.Bar(x=lengths, base=starts, y=lanes, orientation="h", width=0.75,
                           marker=dict(color=colors, line=dict(width=0)), hovertext=hovers, hoverinfo="text"))
    fig.update_yaxes(title="request", autorange="reversed", tickmode="linear", dtick=1 if shown <= 24 else 4,
                     range=[shown - 0.5, -0.5], showgrid=False)
    fig.update_xaxes(title="seconds since the start", rangemode="tozero")
    more = f" (the first {shown} of {num_requests})" if shown < num_requests else ""
    return _layout(fig, f"When each request ran{more}: a gap is a wait or a preemption",
                   height=min(900, 160 + 24 * shown), showlegend=False)


def speed_comparison(rows: list[dict]) -> go.Figure:
    """Output tokens per second of kvviz and of transformers generate."""
    names = ["kvviz engine" if r["system"] == "kvviz" else f"transformers {r['system'].removeprefix('hf ')}"
             for r in rows]
    speeds = [r["output tokens/s"] for r in rows]
    colors = [SYSTEMS["kvviz"] if r["system"] == "kvviz" else SYSTEMS["transformers"] for r in rows]
    error = dict(type="data", symmetric=False, thickness=2, width=8, color="#111827",
                 array=[r["fastest run tokens/s"] - r["output tokens/s"] for r in rows],
                 arrayminus=[r["output tokens/s"] - r["slowest run tokens/s"] for r in rows])
    fig = go.Figure(go.Bar(y=names, x=speeds, orientation="h", marker_color=colors, error_x=error,
                           hoverinfo="skip"))
    # each label sits right of its bar's fastest run, so the error bar never crosses it
    fastest = [r["fastest run tokens/s"] for r in rows]
    fig.add_scatter(y=names, x=fastest, mode="text", text=[f"  {s:,.0f} tokens/s" for s in speeds],
                    textposition="middle right", textfont=dict(size=18), hoverinfo="skip", cliponaxis=False)
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title="output tokens/s, median run (whiskers: slowest to fastest)",
                     range=[0, 1.45 * max(fastest + [1.0])])
    return _layout(fig, "Same prompts, same model, greedy", height=260, showlegend=False)
