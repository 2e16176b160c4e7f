"""The eviction lab on the "Cache strategies" page, under AppTest: it shows what kvviz measures."""

import html
import re

from kvviz.lessons.cache_strategies.state import EXAMPLE_PROMPT
from kvviz.strategies.eviction import eviction_lab, eviction_table

from app_tests import open_lesson


def run_lab(at):
    next(b for b in at.button if b.label == "Run the eviction lab").click().run()
    assert not at.exception


def test_eviction_lab_shows_kl_first_difference_and_texts(bundled):
    at = open_lesson("lessons/cache_strategies.py")
    assert "strategies_eviction_run" not in at.session_state
    at.slider(key="strategies_max_tokens").set_value(10)
    at.slider(key="strategies_eviction_budget").set_value(8)
    at.slider(key="strategies_eviction_sinks").set_value(2).run()
    assert "strategies_eviction_run" not in at.session_state  # nothing runs on a slider change
    run_lab(at)
    assert not at.error
    lab = eviction_lab(bundled, EXAMPLE_PROMPT, max_tokens=10, budget=8, sinks=2)
    expected = eviction_table(lab, lambda t: bundled.tokenizer.decode([t]))
    shown = next(d for d in at.dataframe if "max KL (nats)" in d.value.columns).value
    assert list(shown["policy"]) == ["full cache", "sliding window (8 tokens)", "2 sinks + 6 recent",
                                     "H2O: 4 heavy + 4 recent"]
    differs = "first different token"
    assert list(shown[differs]) == [row[differs] for row in expected]
    assert list(shown["max KL (nats)"]) == [row["max KL (nats)"] for row in expected]
    assert list(shown["bytes kept"]) == [row["bytes kept"] for row in expected]
    assert max(shown["max KL (nats)"][1:]) > 0
    shown_html = next(m.value for m in at.markdown if "same as the full cache" in m.value)
    texts = html.unescape(re.sub(r"<[^>]+>|▶ step \d+", "", shown_html)).replace("⏎ ", "\n")
    decode = bundled.tokenizer.decode
    for run in lab.runs:  # each text, split where it leaves the full cache's
        split = len(run.token_ids) if run.first_difference is None else run.first_difference
        assert decode(run.token_ids[:split]) in texts and decode(run.token_ids[split:]) in texts
    assert f"▶ step {lab.runs[1].first_difference}" in shown_html
    assert len(at.get("plotly_chart")) == 2  # KL per step, retention maps (the other tabs wait for their button)

    at.slider(key="strategies_eviction_budget").set_value(4)
    at.slider(key="strategies_eviction_sinks").set_value(6).run()
    run_lab(at)
    assert [e.value for e in at.error] == ["The 6 sink tokens fill the whole 4-token budget; keep fewer sinks than "
                                           "the budget so that the recent window has room."]
    assert at.session_state["strategies_eviction_run"]["lab"].budget == 8  # the last good result stays
