"""Legible on a projector (issue 24, item 4), without a browser: every chart's text reaches its mode's
least size (16 px presenter, 12 px normal), fonts a figure leaves to Streamlit's theme included; and
the Paged lesson's events and the small example's columns read as words. tests/browser/test_browser_fonts.py
measures the same in a real browser."""

import re

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from kvviz.ui.presenter import NORMAL_LEAST_PX, PRESENTER_LEAST_PX, scaled_figure

IDENTIFIER = re.compile(r"[a-z]+_[a-z_]+")


def chart_with_small_text() -> go.Figure:
    """Tick labels, legend and colour bar left unset (Streamlit's theme would draw them at 0.8 of the page's
    type); a note, block ids in markers and bar labels set small; a log axis in powers of ten."""
    figure = make_subplots(rows=1, cols=2)
    figure.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="markers+text", text=["7", "8"],
                                textfont=dict(size=10), marker=dict(symbol="square", size=34)), row=1, col=1)
    figure.add_trace(go.Bar(x=[1, 2], y=[3, 4], text=["R1 decode", "R2 prefill"], textposition="inside"), row=1, col=2)
    figure.add_trace(go.Heatmap(z=[[0, 1], [1, 0]], colorbar=dict(title="weight")), row=1, col=2)
    figure.add_annotation(text="a note", x=0, y=0, font=dict(size=9), showarrow=False)
    figure.update_yaxes(type="log", exponentformat="power", row=1, col=2)
    figure.update_layout(font=dict(size=16), legend=dict(font=dict(size=11)), uniformtext=dict(minsize=10))
    return figure


def fonts(figure: go.Figure) -> dict[str, float]:
    layout = figure.layout
    return {"xaxis tick": layout.xaxis.tickfont.size, "xaxis2 tick": layout.xaxis2.tickfont.size,
            "yaxis tick": layout.yaxis.tickfont.size, "legend": layout.legend.font.size,
            "legend title": layout.legend.title.font.size, "note": layout.annotations[0].font.size,
            "in-marker text": figure.data[0].textfont.size, "bar labels' least": layout.uniformtext.minsize,
            "colour bar ticks": figure.data[2].colorbar.tickfont.size,
            "colour bar title": figure.data[2].colorbar.title.font.size}


def test_every_chart_font_reaches_the_least_size_of_its_mode():
    figure = chart_with_small_text()
    for scale, least in ((1.45, PRESENTER_LEAST_PX), (1.0, NORMAL_LEAST_PX)):
        legible = scaled_figure(figure, scale, least)
        small = {name: size for name, size in fonts(legible).items() if size is None or size < least}
        assert not small, (least, small)
        assert legible.layout.uniformtext.mode == "hide"  # a bar label that would shrink under it is hidden
        # a power of ten's exponent is drawn at 70 % of its tick label: the label grows until it is not small
        assert 0.7 * legible.layout.yaxis2.tickfont.size >= least
        assert legible.data[0].marker.size == 34  # block ids stay inside their squares: markers keep their size
    assert fonts(figure)["xaxis tick"] is None  # the figure itself is left as it was
    presenter = scaled_figure(figure)
    assert presenter.layout.font.size == round(16 * 1.45) and presenter.layout.xaxis.tickfont.size == 18
    assert presenter.data[0].textfont.size == PRESENTER_LEAST_PX  # raised to the least size, not scaled past it


def test_the_paged_events_read_as_words(tiny_lm):
    from kvviz.lessons.paged_batching.events import EVENT_WORDS, event_rows, event_words
    from kvviz.lessons.paged_batching.logic import PagedLesson, RequestSpec

    shared = "The same long system prompt opens both requests. "
    run = PagedLesson.start(tiny_lm, [RequestSpec(shared + "one", 0, 6), RequestSpec(shared + "two", 2, 6)],
                            block_size=4, num_blocks=24, enable_prefix_caching=True)
    while run.step() is not None:
        pass
    labels = {rid: run.label(rid) for rid in run.request_ids.values()}
    kinds = {e.kind for r in run.records for e in r.events}
    assert {"allocate", "prefix_hit", "cache", "finish"} <= kinds  # identifiers in the records, as files keep them
    shown = [row["event"] for record in run.records for row in event_rows(record, labels)]
    assert "found in the prefix cache" in shown
    assert not [words for words in shown if IDENTIFIER.search(words)]
    assert not [words for words in EVENT_WORDS.values() if IDENTIFIER.search(words)]
    assert event_words("swap_in") == "swapped in" and event_words("a_new_kind") == "a new kind"


def test_the_small_examples_columns_are_words():
    from kvviz.lessons.prefill_decode.explain import small_example, small_example_table

    rows = small_example(prompt_tokens=4, generated=4)
    table = small_example_table(rows)
    assert not [name for name in table[0] if IDENTIFIER.search(name)]
    assert [row["total with cache"] for row in table] == [row["with_cache_total"] for row in rows] == [4, 5, 6, 7]
