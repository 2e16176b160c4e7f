"""The lecture path, the explanations inside Prefill and decode, and presenter mode, under AppTest."""

import json
from pathlib import Path

import numpy as np
import pytest

from kvviz import SamplingParams
from kvviz.engine.engine import Engine
from kvviz.memory_bill import kv_cache_bytes
from kvviz.shapes import format_bytes

from app_tests import ROOT, button, open_lesson


def registered_pages(at) -> list[dict]:
    """The pages app.py hands to st.navigation, in order, as Streamlit registered them."""
    return list(at._registered_pages.values())


def relative(script_path: str) -> str:
    return str(Path(script_path).relative_to(ROOT))


def links(at) -> dict[str, str]:
    """Page links on the page: label -> the registered script they open."""
    pages = at._registered_pages
    return {link.proto.label: relative(pages[link.proto.page_script_hash]["script_path"])
            for link in at.get("page_link")}


def test_home_lists_every_registered_page_in_order():
    at = open_lesson("lessons/home.py")
    pages = registered_pages(at)
    assert len(pages) >= 8 and relative(pages[-1]["script_path"]) == "lessons/sources.py"
    text = "\n".join(m.value for m in at.markdown)
    places = [text.find(f"**{page['page_name']}** (about ") for page in pages[1:]]
    assert all(p >= 0 for p in places), [page["page_name"] for page, p in zip(pages[1:], places) if p < 0]
    assert places == sorted(places)  # lecture order
    assert "min)" in text


def test_every_page_has_working_previous_and_next_links():
    at = open_lesson("lessons/home.py")
    pages = [relative(p["script_path"]) for p in registered_pages(at)]
    titles = [p["page_name"] for p in registered_pages(at)]
    for index, path in enumerate(pages):
        at.switch_page(path).run()
        assert not at.exception, path
        found = links(at)
        if index > 0:
            assert found[f"Previous: {titles[index - 1]}"] == pages[index - 1]
        if index + 1 < len(pages):
            assert found[f"Next: {titles[index + 1]}"] == pages[index + 1]
        else:
            assert not any(label.startswith("Next:") for label in found)
    # following Next from home reaches the last page, one lesson at a time
    at.switch_page(pages[0]).run()
    for expected in pages[1:]:
        target = next(v for k, v in links(at).items() if k.startswith("Next:"))
        assert target == expected
        at.switch_page(target).run()
        assert not at.exception


@pytest.fixture(scope="module")
def lesson_app():
    at = open_lesson("lessons/prefill_decode.py")
    button(at, "Prefill").click().run()
    for _ in range(3):
        button(at, "Next token").click().run()
    assert not at.exception
    return at


def chart_specs(at) -> list[dict]:
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def test_prefill_attention_is_the_causal_triangle_and_matches_decode_rows(lesson_app, bundled):
    at = lesson_app
    lesson = at.session_state["lesson_run"]
    prompt = len(lesson.prompt_token_ids)
    triangle = lesson.traces[0].prompt_attention  # (layers, heads, T, T)
    assert triangle.shape[-2:] == (prompt, prompt)
    assert np.allclose(triangle.sum(-1), 1.0, atol=1e-5)
    assert np.all(np.triu(triangle, k=1) == 0)  # nothing above the diagonal: causal
    # its last row is the newest-token row the engine records at prefill
    assert np.allclose(triangle[:, :, -1], lesson.traces[0].attention, atol=1e-6)
    # a prefill of the whole text so far gives, at the generated positions, the decode steps' rows
    text_ids = lesson.prompt_token_ids + [t for r in lesson.records[:3] for _, t in r.sampled]
    engine = Engine(bundled, max_num_seqs=1)
    engine.add_request(text_ids, SamplingParams(max_tokens=1, ignore_eos=True), trace=True)
    full = engine.step().trace.prompt_attention
    for step in (1, 2, 3):
        position = prompt + step - 1  # decode step s runs the token at this position
        decode_row = lesson.traces[step].attention  # (layers, heads, position + 1)
        assert np.allclose(full[:, :, position, :position + 1], decode_row, atol=1e-4)


def test_inside_attention_draws_token_text_on_the_axes(lesson_app, bundled):
    at = lesson_app
    at.radio(key="lesson_view").set_value("Inside attention").run()
    assert not at.exception
    lesson = at.session_state["lesson_run"]
    ids = lesson.prompt_token_ids + [t for r in lesson.records[:3] for _, t in r.sampled]
    from kvviz.lessons.prefill_decode.explain_figures import token_label
    pieces = [token_label(bundled.tokenizer.decode([i])) for i in ids]
    triangle = next(s for s in chart_specs(at) if "triangle" in s["layout"]["title"]["text"])
    ticks = triangle["layout"]["yaxis"]["ticktext"]
    assert ticks == [f"{piece} {position}" for position, piece in enumerate(pieces)][:len(ticks)]
    assert len(ticks) == len(ids)
    text = " ".join(m.value for m in at.markdown)
    assert "causal" in text and "used once" in text
    assert "**22** token computations" in text and "**7**" in text  # the article's 4 + 3 example
    recomputed = next(m.value for m in at.markdown if m.value.startswith("Recomputed here"))
    assert "W_K 64×256" in recomputed
    # K and V heatmaps carry the tokens too
    at.radio(key="lesson_view").set_value("Keys and values").run()
    for spec in chart_specs(at):
        assert spec["layout"]["yaxis"]["ticktext"][:3] == [f"{p} {i}" for i, p in enumerate(pieces[:3])]


def test_bytes_read_is_weights_plus_the_bill_for_the_context(lesson_app, bundled):
    at = lesson_app
    at.radio(key="lesson_view").set_value("Why decode is memory-bound").run()
    assert not at.exception
    lesson = at.session_state["lesson_run"]
    info = lesson.model_info
    from kvviz.lessons.prefill_decode.explain_views import lesson_shape
    context = lesson.num_tokens_at(3)
    expected = info["parameters"] * info["dtype_bytes"] + kv_cache_bytes(lesson_shape(info), context, 1,
                                                                          info["dtype_bytes"])
    metric = next(m for m in at.metric if m.label == "Bytes read")
    assert metric.value == format_bytes(expected)
    assert next(m for m in at.metric if m.label == "Bound by").value == "memory"
    # the engine's own bytes agree with the bill it uses
    assert lesson.records[3].memory.token_bytes == kv_cache_bytes(lesson_shape(info), context, 1, info["dtype_bytes"])


def test_largest_logit_difference_is_explained(lesson_app):
    at = lesson_app
    at.radio(key="lesson_view").set_value("Work saved").run()
    note = next(c.value for c in at.caption if "order" in c.value)
    assert "counts as equal" in note and "is equal" in note


def test_presenter_mode_from_the_link_on_every_page():
    at = open_lesson("lessons/home.py")
    pages = [relative(p["script_path"]) for p in registered_pages(at)]
    at.query_params["presenter"] = "1"
    for path in pages:
        at.switch_page(path).run()
        assert not at.exception
        assert at.session_state["presenter"] is True
        assert any(b.label == "Leave presenter mode" for b in at.button), path
    button(at, "Leave presenter mode").click().run()
    assert at.session_state["presenter"] is False
    assert "presenter" not in at.query_params
    assert not any(b.label == "Leave presenter mode" for b in at.button)
    at.toggle(key="presenter").set_value(True).run()  # the sidebar switch turns it on again
    assert any(b.label == "Leave presenter mode" for b in at.button)
    assert at.query_params["presenter"] == "1"


def test_presenter_scales_chart_fonts():
    import plotly.graph_objects as go

    from kvviz.ui.presenter import scaled_figure
    figure = go.Figure(go.Bar(y=[1, 2]))
    figure.update_layout(font=dict(size=16), title=dict(text="t", font=dict(size=20)), height=400)
    bigger = scaled_figure(figure, 1.5)
    assert bigger.layout.font.size == 24 and bigger.layout.title.font.size == 30
    assert figure.layout.font.size == 16  # the original is untouched


def test_presenter_scales_the_notes_drawn_on_charts(tiny_lm):
    """The Paged page's 'No request holds blocks' note has a size of its own: on a projector it
    grows with the rest of the chart."""
    from kvviz.lessons.paged_batching.figures import block_tables
    from kvviz.lessons.paged_batching.logic import PagedLesson, RequestSpec
    from kvviz.ui.presenter import scaled_figure

    run = PagedLesson.start(tiny_lm, [RequestSpec("ab", 0, 2)], block_size=4, num_blocks=8, enable_prefix_caching=True)
    while run.step() is not None:
        pass
    empty = block_tables(run.records[-1], {}, 4)
    bigger = scaled_figure(empty, 1.5)
    assert [note.font.size for note in empty.layout.annotations] == [15]
    assert [note.font.size for note in bigger.layout.annotations] == [22]


def test_sources_page_credits_each_idea_and_names_real_lessons():
    from kvviz.lessons.sources.logic import SOURCES
    at = open_lesson("lessons/sources.py")
    titles = {p["page_name"] for p in registered_pages(at)}
    text = "\n".join(m.value for m in at.markdown)
    for needed in ("PagedAttention", "GQA", "MQA", "MLA", "StreamingLLM", "H2O", "KIVI", "transformers"):
        assert needed in text, needed
    for source in SOURCES:
        assert f"]({source.url})" in text
        assert set(source.lessons) <= titles, source.title


def test_paged_page_explains_paging():
    at = open_lesson("lessons/paged_batching.py")
    assert any(e.label.startswith("Paging, explained") for e in at.expander)
    text = "\n".join(m.value for m in at.markdown)
    assert "page table" in text and "Paging is not caching" in text and "Prefix caching builds on it" in text
