"""Figures for the "Memory bill" lesson: pure functions from shapes and byte counts to go.Figure.

Every number is kvviz.memory_bill's; these functions only draw. Your model is the thick black line on
every plot, each compared model keeps one colour on both plots, and a dtype keeps one line style.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from kvviz.memory_bill import AttentionVariant, GiB, kv_cache_bytes
from kvviz.shapes import FULL, KIND_LABELS, MLA, SLIDING, ModelShape, format_bytes
from kvviz.ui.colors import BLOCK_STATE, FONT, PHASE, request_color

INK = "#1F2937"  # text dark enough to read from the back of a room
CACHE = PHASE["prompt"]  # the cache is blue, as the tokens filling it are in the first lesson
WEIGHTS = "#6B7280"  # grey: paid once, whatever the traffic
OVERFLOW = PHASE["new"]  # red: the part of the bill that does not fit
FREE = BLOCK_STATE["free"]
HELD_BACK = "#F9FAFB"  # drawn hatched: memory the server leaves for activations and the runtime
KIND_COLOR = {FULL: CACHE, SLIDING: "#72B7B2", MLA: "#54A24B"}  # teal and green: not phases
DTYPE_DASH = {"fp32": "dot", "bf16": "solid", "fp16": "solid", "fp8": "dash", "int8": "dash", "int4": "dashdot"}


def layout(fig: go.Figure, title: str, height: int = 420, **kwargs) -> go.Figure:
    """The lessons' figure style (title 20, text 16, white), with dark text and large ticks."""
    kwargs.setdefault("margin", dict(l=70, r=30, t=70, b=60))
    fig.update_layout(title=dict(text=title, font=dict(size=20)), font=dict(FONT, color=INK), height=height,
                      plot_bgcolor="white", **kwargs)
    axes = dict(showgrid=True, gridcolor="#E5E7EB", linecolor="#9CA3AF", tickfont=dict(size=16, color=INK),
                title_font=dict(size=18, color=INK))
    fig.update_xaxes(**axes)
    fig.update_yaxes(**axes)
    return fig


YOURS = "black"
# Compared models, in the order picked: six of the request palette's darkest, most distinct colours
_COMPARED = [request_color(i) for i in (2, 4, 1, 0, 6, 7)]


def compared_color(index: int) -> str:
    return _COMPARED[index % len(_COMPARED)]


def _short_bytes(num_bytes: float) -> str:
    """1073741824 -> '1 GiB', for axis ticks."""
    for unit, size in (("TiB", 2**40), ("GiB", GiB), ("MiB", 2**20), ("KiB", 2**10)):
        if num_bytes >= size:
            return f"{num_bytes / size:g} {unit}"
    return f"{num_bytes:g} B"


def _byte_ticks(low: float, high: float) -> dict:
    """Ticks at powers of 16 bytes (1 MiB, 16 MiB, 256 MiB, 4 GiB, ...) between low and high, in GiB."""
    exponent = max(0, math.floor(math.log2(max(low, 1)) / 4) * 4)
    values = []
    while 2**exponent <= high * 16:
        values.append(2**exponent)
        exponent += 4
    return dict(tickvals=[_gib(v) for v in values], ticktext=[_short_bytes(v) for v in values])


def _gib(num_bytes: float) -> float:
    return num_bytes / GiB


def _power_ticks(values: list[int]) -> dict:
    """Tick labels like 1K, 32K, 1M for token counts on a log axis."""
    def label(v):
        return f"{v // 2**20}M" if v >= 2**20 else f"{v // 2**10}K" if v >= 2**10 else str(v)
    return dict(tickvals=values, ticktext=[label(v) for v in values])


def _bytes_curve(fig, xs, shape, tokens_of, batch_of, dtype_name, cache_format, label, color, width):
    ys = [kv_cache_bytes(shape, tokens_of(x), batch_of(x), **cache_format) for x in xs]
    fig.add_scatter(
        x=xs, y=[_gib(y) for y in ys], name=label, mode="lines",
        line=dict(color=color, width=width, dash=DTYPE_DASH.get(dtype_name, "solid")),
        customdata=[format_bytes(y) for y in ys],
        hovertemplate=f"{label}<br>%{{x:,}}: %{{customdata}}<extra></extra>")
    return ys


def _curves(fig, lines, current, xs, tokens_of, batch_of):
    """One line per (shape, dtype): your model black (thick in your dtype), the others in the order picked."""
    low, high, others = math.inf, 0, 0
    for shape, dtype_name, cache_format in lines:
        if (shape, dtype_name) == current[:2]:
            color, width, label = YOURS, 6, f"yours: {shape.name} · {dtype_name}"
        elif shape == current[0]:  # your model in another dtype
            color, width, label = YOURS, 3, f"{shape.name} · {dtype_name}"
        else:
            color, width, label = compared_color(others), 3, f"{shape.name} · {dtype_name}"
            others += 1
        ys = _bytes_curve(fig, xs, shape, tokens_of, batch_of, dtype_name, cache_format, label, color, width)
        low, high = min(low, min(ys)), max(high, max(ys))
    return low, high


def _budget_line(fig, budget_bytes, budget_label):
    """The room the accelerator leaves for the cache, as a dashed line (both axes are log)."""
    if budget_bytes:
        fig.add_hline(y=_gib(budget_bytes), line=dict(color=OVERFLOW, width=3, dash="dash"))
        # annotations on a log axis take log10 of the value; shapes take the value itself
        fig.add_annotation(x=0.01, xref="paper", xanchor="left", y=math.log10(_gib(budget_bytes)),
                           yanchor="bottom", text=budget_label, showarrow=False,
                           font=dict(size=16, color=OVERFLOW), bgcolor="rgba(255,255,255,0.8)")


def _here(fig, x, num_bytes):
    """Ring the chosen point and label it with its bytes."""
    fig.add_scatter(x=[x], y=[_gib(num_bytes)], mode="markers", showlegend=False, hoverinfo="skip",
                    marker=dict(size=20, color="rgba(0,0,0,0)", line=dict(width=4, color="black")))
    fig.add_annotation(x=math.log10(x), y=math.log10(_gib(num_bytes)),  # log axes: positions in log10
                       text=f"<b>{format_bytes(num_bytes)}</b>", showarrow=True, arrowhead=2, arrowwidth=2,
                       ax=-70, ay=-50, font=dict(size=18, color="black"), bgcolor="white", bordercolor="black")


def cache_vs_context(lines: list[tuple[ModelShape, str, dict]], contexts: list[int], batch: int,
                     current: tuple[ModelShape, str, dict], context: int,
                     budget_bytes: int | None = None, budget_label: str = "") -> go.Figure:
    """KV cache bytes against tokens per request, for `batch` requests; log axes.

    lines: (shape, dtype name, kvviz.memory_bill.cache_format of it) per curve; those of `current`'s shape are drawn
    black and thick, and `current` is ringed at `context`; budget_bytes, if given, is the room the
    chosen accelerator leaves for the cache.
    """
    fig = go.Figure()
    low, high = _curves(fig, lines, current, contexts, lambda x: x, lambda x: batch)
    _budget_line(fig, budget_bytes, budget_label)
    shape, _name, cache_format = current
    _here(fig, context, kv_cache_bytes(shape, context, batch, **cache_format))
    fig.update_xaxes(title="tokens per request (context)", type="log", **_power_ticks(contexts[::2]))
    fig.update_yaxes(title="KV cache", type="log", **_byte_ticks(low, max(high, budget_bytes or 0)))
    requests = f"{batch:,} request" + ("s" if batch != 1 else "")
    return layout(fig, f"The cache grows with the context ({requests})", height=500,
                   legend=dict(font=dict(size=16)))


def cache_vs_batch(lines: list[tuple[ModelShape, str, dict]], batches: list[int], context: int,
                   current: tuple[ModelShape, str, dict], batch: int,
                   budget_bytes: int | None = None, budget_label: str = "") -> go.Figure:
    """KV cache bytes against requests at once, each of `context` tokens; log axes."""
    fig = go.Figure()
    low, high = _curves(fig, lines, current, batches, lambda x: context, lambda x: x)
    _budget_line(fig, budget_bytes, budget_label)
    shape, _name, cache_format = current
    _here(fig, batch, kv_cache_bytes(shape, context, batch, **cache_format))
    fig.update_xaxes(title="requests at once (batch)", type="log", tickvals=batches[::2])
    fig.update_yaxes(title="KV cache", type="log", **_byte_ticks(low, max(high, budget_bytes or 0)))
    return layout(fig, f"…and with the batch ({context:,} tokens each)", height=500,
                   legend=dict(font=dict(size=16)))


def memory_stack(device_name: str, total_bytes: int, usable_bytes: int, weights_bytes: int,
                 cache_bytes: int) -> go.Figure:
    """One bar: weights, then the cache, then what is free, on the device's memory."""
    room = max(0, usable_bytes - weights_bytes)  # what the usable share leaves after the weights
    fits = min(cache_bytes, room)
    parts = [("weights", weights_bytes, WEIGHTS),
             ("KV cache", fits, CACHE), ("free", room - fits, FREE),
             ("held back", total_bytes - usable_bytes, HELD_BACK),
             ("does not fit", cache_bytes - fits, OVERFLOW)]  # drawn past the device's edge
    fig = go.Figure()
    for name, num_bytes, color in parts:
        if num_bytes <= 0:
            continue
        fig.add_bar(y=[""], x=[_gib(num_bytes)], name=name, orientation="h", marker_color=color,
                    marker_line=dict(color="white", width=2),
                    marker_pattern=dict(shape="/" if color == HELD_BACK else "", fgcolor="#9CA3AF"),
                    text=[f"{name}<br>{format_bytes(num_bytes)}"], textposition="inside", textangle=0,
                    insidetextanchor="middle", textfont=dict(size=16),
                    hovertemplate=f"{name}: {format_bytes(num_bytes)}<extra></extra>")
    widest = max(total_bytes, weights_bytes + cache_bytes)
    fig.add_vline(x=_gib(total_bytes), line=dict(color="black", width=3))
    fig.add_annotation(x=_gib(total_bytes), y=1, yref="paper", yanchor="bottom", showarrow=False,
                       xanchor="right" if total_bytes > 0.5 * widest else "left",
                       text=f"{device_name}: {format_bytes(total_bytes)}", font=dict(size=16, color="black"))
    fig.add_vline(x=_gib(usable_bytes), line=dict(color="black", width=2, dash="dot"))
    layout(fig, "Weights + cache on the accelerator", height=300, barmode="stack", bargap=0.3,
            uniformtext=dict(minsize=14, mode="hide"),  # a sliver keeps its label in the legend
            legend=dict(orientation="h", y=-0.3, traceorder="normal", font=dict(size=16)),
            margin=dict(l=20, r=30, t=90, b=40))
    fig.update_xaxes(ticksuffix=" GiB", rangemode="tozero")
    fig.update_yaxes(showticklabels=False, showgrid=False)
    return fig


def attention_variants(variants: list[AttentionVariant], tokens: int, batch: int) -> go.Figure:
    """Cache bytes for the same model size under MHA, GQA, MQA and MLA, each against the first (MHA).

    The model's own way is dark; a hypothetical bar (sizes the model does not have) is hatched."""
    totals = [v.bytes_per_token * tokens * batch for v in variants]
    baseline = variants[0]
    colors = [CACHE if v.this_model else "#A5B8D0" for v in variants]
    text = [f"{format_bytes(total)} · {format_bytes(v.bytes_per_token)} per token"
            + ("" if v is baseline else f" · {baseline.bytes_per_token / v.bytes_per_token:.0f}× less than MHA")
            for v, total in zip(variants, totals)]
    fig = go.Figure(go.Bar(y=[v.name for v in variants], x=[_gib(t) for t in totals], orientation="h",
                           marker_color=colors, marker_line_color=INK, marker_line_width=1,
                           marker_pattern_shape=["/" if v.hypothetical else "" for v in variants],
                           marker_pattern_fgcolor=INK,
                           text=text, textposition="outside", textfont=dict(size=16, color=INK),
                           cliponaxis=False,
                           hovertemplate="%{y}: %{text}<extra></extra>"))
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title=f"KV cache (GiB) for {batch:,} × {tokens:,} tokens",
                     range=[0, _gib(max(totals)) * 1.9])
    return layout(fig, "Same model size, four ways to attend", height=360, margin=dict(l=330, r=30, t=70, b=60))


def layer_breakdown(per_layer_bytes: list[int], kinds: tuple[str, ...]) -> go.Figure:
    """Bytes each layer holds, coloured by what it caches (full attention, sliding window, MLA)."""
    unit, size = ("GiB", GiB) if max(per_layer_bytes) >= GiB else ("MiB", 2**20)
    fig = go.Figure()
    for kind in (FULL, SLIDING, MLA):
        layers = [i for i, k in enumerate(kinds) if k == kind]
        if layers:
            fig.add_bar(x=layers, y=[per_layer_bytes[i] / size for i in layers], name=KIND_LABELS[kind],
                        marker_color=KIND_COLOR[kind],
                        customdata=[format_bytes(per_layer_bytes[i]) for i in layers],
                        hovertemplate="layer %{x}: %{customdata}<extra></extra>")
    fig.update_xaxes(title="layer")
    fig.update_yaxes(title=f"KV cache ({unit})")
    return layout(fig, "What each layer keeps", height=420, bargap=0.1,
                   legend=dict(orientation="h", y=1.02, yanchor="bottom", x=1, xanchor="right",
                               font=dict(size=16)))
