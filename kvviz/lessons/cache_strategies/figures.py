"""Figures for the "Cache strategies" lesson: pure functions from comparison results to figures.

Every strategy keeps one colour on every chart (STRATEGY); no cache holds nothing, so on a
logarithmic memory axis it has no line and is named in the title instead.
"""

from __future__ import annotations

import html
import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from kvviz.shapes import format_bytes
from kvviz.ui.colors import FONT, PHASE
from kvviz.ui.text import chart_text

STRATEGY = {
    "dynamic": "#3969AC",  # blue: the full cache, the reference
    "static": "#7F3C8D",  # purple: a reservation
    "sliding_window": "#11A579",  # green
    "int8": "#E68310",  # orange
    "int4": "#E73F74",  # pink-red
    "paged": "#008695",  # teal
    "no_cache": "#4B4B4B",  # dark grey: nothing kept
}
GQA = {"before": "#3969AC", "after": "#E68310"}
_DASHES = ["solid", "dash", "dot", "dashdot"]
_FLOOR = 1e-10  # log axes cannot show 0; values below this are drawn at it


def strategy_key(strategy: str, options: dict) -> str:
    return f"int{options.get('bits', 8)}" if strategy == "quantized" else strategy


def strategy_color(strategy: str, options: dict) -> str:
    return STRATEGY.get(strategy_key(strategy, options), "#7F7F7F")


def _styles(results) -> list[tuple[str, str]]:
    """(colour, dash) per result: a strategy's colour, dashed when it repeats (int4 twice)."""
    seen: dict[str, int] = {}
    styles = []
    for r in results:
        key = strategy_key(r.strategy, r.options)
        styles.append((strategy_color(r.strategy, r.options), _DASHES[seen.get(key, 0) % len(_DASHES)]))
        seen[key] = seen.get(key, 0) + 1
    return styles


def _layout(fig: go.Figure, title: str, height: int = 460, **kwargs) -> go.Figure:
    fig.update_layout(title=dict(text=title, font=dict(size=20)), font=FONT, height=height,
                      margin=dict(l=70, r=20, t=70, b=50), plot_bgcolor="white",
                      legend=dict(font=dict(size=15)), hovermode="x unified", **kwargs)
    fig.update_xaxes(showgrid=True, gridcolor="#E5E7EB", zeroline=False)
    fig.update_yaxes(showgrid=True, gridcolor="#E5E7EB", zeroline=False)
    return fig


def memory_per_step(results, log_scale: bool = True) -> go.Figure:
    """Measured bytes each strategy's cache held after every step (step 0: prefill)."""
    fig = go.Figure()
    for r, (color, dash) in zip(results, _styles(results)):
        held = r.held_bytes
        if log_scale and max(held) == 0:
            continue  # no cache: nothing to draw on a log axis
        reference = r.strategy == "dynamic"  # a wide pale band, so lines that follow it stay visible
        fig.add_trace(go.Scatter(
            x=list(range(len(held))), y=held, name=chart_text(r.label), mode="lines",
            opacity=0.45 if reference else 1.0,
            line=dict(color=color, width=12 if reference else 4, dash=dash),
            customdata=[format_bytes(b) for b in held], hovertemplate="%{customdata}"))
    nothing = [chart_text(r.label) for r in results if max(r.held_bytes) == 0]
    note = f" · {', '.join(nothing)}: 0 bytes" if nothing and log_scale else ""
    fig.update_xaxes(title="step (0 = prefill, then one token each)")
    held = [b for r in results for b in r.held_bytes if b > 0]
    if log_scale and held:
        ticks = binary_ticks(min(held), max(held))
        fig.update_yaxes(type="log", tickvals=ticks, ticktext=[_short_bytes(t) for t in ticks],
                         title="bytes held (log scale)")
    else:
        fig.update_yaxes(title="bytes held", rangemode="tozero", tickformat=".2s")
    return _layout(fig, f"Memory held after each step{note}")


def binary_ticks(low: float, high: float) -> list[int]:
    """Powers of two from just below `low` to just above `high`: 8 KiB, 16 KiB, … on a log axis."""
    first, last = max(int(low).bit_length() - 1, 0), int(high - 1).bit_length()
    return [2**k for k in range(first, last + 1)]


def one_two_five(low: float, high: float) -> list[float]:
    """Ticks 1, 2, 5 × 10^k from the last at or below `low` to the first at or above `high`
    (give the axis that range, so that both ends carry a label)."""
    decades = range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1)
    ticks = [float(f"{m * 10.0**k:.3g}") for k in decades for m in (1, 2, 5)]
    first = max(i for i, t in enumerate(ticks) if t <= low)
    last = min(i for i, t in enumerate(ticks) if t >= high)
    if first == last:  # one value, on a tick: show its neighbours too
        first, last = first - 1, last + 1
    return ticks[first:last + 1]


def _short_bytes(num_bytes: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if num_bytes >= size:
            return f"{num_bytes / size:g} {unit}"
    return f"{num_bytes} B"


def time_per_step(results) -> go.Figure:
    """Left: tokens through the model per step (counts, the same on every run). Right: the mean
    decode step of each strategy, median of its timed runs, with their spread as error bars."""
    runs = len(results[0].decode_ms)
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.22, column_widths=[0.55, 0.45],
                        subplot_titles=("Tokens through the model, per step",
                                        f"One decode step (ms): median of {runs} run{'s' * (runs > 1)}"))
    for r, (color, dash) in zip(results, _styles(results)):
        label = chart_text(r.label)  # a replayed file's label: text, never markup
        fig.add_trace(go.Scatter(
            x=list(range(len(r.tokens_run))), y=r.tokens_run, name=label, legendgroup=label, mode="lines",
            line=dict(color=color, width=3, dash=dash), hovertemplate="%{y} tokens"), row=1, col=1)
        median = r.decode_ms_median
        fig.add_trace(go.Bar(  # sideways, one row per strategy: upright labels cannot collide
            y=[label.replace(" (", "<br>(").replace(" + ", "<br>+ ")], x=[median], orientation="h",
            name=label, legendgroup=label, showlegend=False, marker_color=color,
            error_x=dict(type="data", symmetric=False, array=[max(r.decode_ms) - median],
                         arrayminus=[median - min(r.decode_ms)], color="black"),
            hovertemplate=f"median %{{x:.2f}} ms, spread {min(r.decode_ms):.2f}-{max(r.decode_ms):.2f}<extra></extra>"),
            row=1, col=2)
    fig.update_xaxes(title="step (0 = prefill)", row=1, col=1)
    fig.update_yaxes(title="tokens run", rangemode="tozero", row=1, col=1)
    fig.update_xaxes(title="milliseconds", rangemode="tozero", row=1, col=2)
    fig.update_yaxes(autorange="reversed", row=1, col=2)  # in the legend's order, top to bottom
    fig.update_annotations(font=dict(size=17))
    return _layout(fig, "Work per step, then the time it took on this machine")


EXACT = ("dynamic", "static", "paged", "no_cache")  # keep every token exactly: only float rounding differs


def kl_per_step(results) -> go.Figure:
    """KL(full cache || strategy) of the next-token distribution, teacher-forced, per step.

    The strategies that keep every token exactly are left out and named in the title with
    their largest KL: float rounding, not an approximation."""
    fig = go.Figure()
    for r, (color, dash) in zip(results, _styles(results)):
        if r.strategy in EXACT:
            continue
        fig.add_trace(go.Scatter(
            x=list(range(len(r.kl))), y=[max(k, _FLOOR) for k in r.kl], name=chart_text(r.label), mode="lines",
            line=dict(color=color, width=3, dash=dash), customdata=r.kl, hovertemplate="%{customdata:.2e}"))
    exact = [r for r in results if r.strategy in EXACT and r.strategy != "dynamic"]
    note = ""
    if exact:
        note = (f"<br><sup>{', '.join(chart_text(r.label) for r in exact)}: at most "
                f"{max(max(r.kl) for r in exact):.0e} nats (float rounding only), not drawn</sup>")
    fig.update_xaxes(title="step")
    fig.update_yaxes(title="KL (nats, log scale)", type="log", dtick=1, exponentformat="power")
    return _layout(fig, "Next-token KL divergence from the full cache" + note, height=480)


def quantization_error(results) -> go.Figure:
    """Largest |K - K_full| (solid) and |V - V_full| (dotted) over the kept tokens, per step."""
    fig = go.Figure()
    for r, (color, _dash) in zip(results, _styles(results)):
        if r.strategy != "quantized":
            continue
        for which, errors, dash in (("K", r.max_key_error, "solid"), ("V", r.max_value_error, "dot")):
            fig.add_trace(go.Scatter(
                x=list(range(len(errors))), y=[None if e is None else max(e, _FLOOR) for e in errors],
                name=f"{chart_text(r.label)} · {which}", mode="lines", line=dict(color=color, width=3, dash=dash),
                hovertemplate="%{y:.3f}"))
    fig.update_xaxes(title="step")
    errors = [e for r in results if r.strategy == "quantized" for e in r.max_key_error + r.max_value_error
              if e is not None and e > 0]
    ticks = one_two_five(min(errors), max(errors)) if errors else []
    fig.update_yaxes(title="largest |error| (log scale)", type="log", tickvals=ticks,
                     ticktext=[f"{t:g}" for t in ticks],
                     range=[math.log10(ticks[0]), math.log10(ticks[-1])] if ticks else None)
    return _layout(fig, "Quantization error: largest |cached − full| of keys (solid) and values (dotted)",
                   height=480)


def bill_waterfall(bill, label: str, color: str) -> go.Figure:
    """The article's formula, each named difference, and what the tensors measure, as a waterfall."""
    names = ["formula: 2 × layers × KV heads × head size × tokens × bytes"] + \
        [chart_text(d.name) for d in bill.differences] + ["measured: the cache tensors' bytes"]
    values = [bill.formula_bytes] + [d.num_bytes for d in bill.differences] + [bill.measured_bytes]
    measures = ["absolute"] + ["relative"] * len(bill.differences) + ["total"]
    text = [format_bytes(bill.formula_bytes)] + \
        [("+" if d.num_bytes >= 0 else "−") + format_bytes(abs(d.num_bytes)) for d in bill.differences] + \
        [format_bytes(bill.measured_bytes)]
    fig = go.Figure(go.Waterfall(
        orientation="h", y=names, x=values, measure=measures, text=text, textposition="auto",
        textfont=dict(size=16), hoverinfo="text+y", connector=dict(line=dict(color="#9CA3AF")),
        increasing=dict(marker=dict(color=PHASE["new"])), decreasing=dict(marker=dict(color="#11A579")),
        totals=dict(marker=dict(color=color))))
    fig.update_yaxes(autorange="reversed", automargin=True)
    fig.update_xaxes(title="bytes", tickformat=".2s")
    fig = _layout(fig, f"{chart_text(label)}: formula → measured, every difference named",
                  height=170 + 62 * len(names), showlegend=False)
    fig.update_layout(hovermode="closest")
    return fig


def gqa_comparison(report) -> go.Figure:
    """Cache bytes per token and held-out loss, before and after merging KV heads."""
    before = f"{report.kv_heads_before} KV heads"
    after = f"{report.kv_heads_after} KV head{'s' if report.kv_heads_after > 1 else ''}"
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.16, subplot_titles=(
        f"KV cache per token: −{report.cache_saved_fraction:.0%}",
        f"Held-out loss: {report.loss_change:+.3f} nats"))
    for col, (values, texts) in enumerate((
            ([report.bytes_per_token_before, report.bytes_per_token_after],
             [format_bytes(report.bytes_per_token_before), format_bytes(report.bytes_per_token_after)]),
            ([report.loss_before, report.loss_after], [f"{report.loss_before:.3f}", f"{report.loss_after:.3f}"])),
            start=1):
        fig.add_trace(go.Bar(x=[before, after], y=values, text=texts, textposition="outside",
                             textfont=dict(size=18), marker_color=[GQA["before"], GQA["after"]],
                             hoverinfo="x+text", cliponaxis=False), row=1, col=col)
    fig.update_yaxes(title_text="bytes per token", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="nats per token", rangemode="tozero", row=1, col=2)
    fig.update_annotations(font=dict(size=18))
    fig = _layout(fig, f"{report.num_heads} query heads: {before} → {after} (mean-pooled, no uptraining)",
                  height=440, showlegend=False)
    fig.update_layout(hovermode="closest", margin=dict(t=110))
    return fig


def divergence_html(rows: list[dict]) -> str:
    """The strategies' texts one under another; where a text leaves the full cache's, it turns red.

    rows: {"label", "color", "pieces" (one string per generated token), "divergence" (index or None)}.
    """
    lines = []
    for row in rows:
        split = len(row["pieces"]) if row["divergence"] is None else row["divergence"]
        same = html.escape("".join(row["pieces"][:split])).replace("\n", "⏎ ")
        rest = html.escape("".join(row["pieces"][split:])).replace("\n", "⏎ ")
        marker = "" if row["divergence"] is None else (
            f"<span style='color:white;background:{PHASE['new']};border-radius:4px;padding:0 4px;"
            f"font-family:sans-serif;font-size:0.9rem'>▶ step {row['divergence']}</span>"
            f"<span style='background:#FDE2E1;color:#9B1C1C'>{rest}</span>")
        verdict = "same as the full cache" if row["divergence"] is None else "differs"
        lines.append(
            f"<tr><td style='padding:8px 12px;vertical-align:top;white-space:nowrap;font-weight:600;"
            f"border-left:8px solid {row['color']}'>{html.escape(row['label'])}<br>"
            f"<span style='font-weight:400;font-size:0.9rem;color:#6B7280'>{verdict}</span></td>"
            f"<td style='padding:8px 12px;font-family:monospace;font-size:1.1rem;line-height:1.6'>"
            f"{same}{marker}</td></tr>")
    return ("<table style='border-collapse:separate;border-spacing:0 6px;width:100%'>"
            + "".join(lines) + "</table>")
