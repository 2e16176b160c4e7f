"""The built-in tiny Gemma-3 in the app (Streamlit's AppTest): picked in the sidebar, its sliding
layers' block table drawn beside the full layers' one in the Paged lesson, holding fewer blocks."""

from app_tests import button, open_lesson


def test_the_paged_lesson_draws_both_groups_of_tiny_gemma3():
    at = open_lesson("lessons/paged_batching.py")
    at.text_input(key="model_request").set_value("tiny-gemma3")
    button(at, "Load model").click().run()
    assert at.session_state["model_source"] == "tiny-gemma3" and not at.exception
    button(at, "Start").click().run()
    button(at, "Run to the end").click().run()
    assert not at.exception
    lesson = at.session_state["paged_run"]
    record = lesson.records[-1]
    assert [group.name for group in record.layer_groups] == ["full", "sliding"]
    # the step where the most blocks were held: the sliding group holds fewer than the full one
    peak = max(lesson.records, key=lambda r: sum(g.num_blocks - g.num_free_blocks for g in r.layer_groups))
    full, sliding = (g.num_blocks - g.num_free_blocks for g in peak.layer_groups)
    assert sliding < full, (full, sliding)
    slides = [e for r in lesson.records for e in r.events if e.kind == "slide"]
    assert slides and all(e.group == 1 for e in slides)
    titles = [chart.proto.spec for chart in at.get("plotly_chart")]
    assert any("sliding" in spec for spec in titles)  # the groups' tables are drawn

