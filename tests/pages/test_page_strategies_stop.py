"""Cache strategies' two long clicks, *Run every strategy* and the Eviction lab, under AppTest: an
estimate before the work, a progress bar that says what runs, a Stop button, and after a Stop the
results measured so far kept with one sentence saying what was kept (issue 33 item 1, issue 35).

AppTest cannot press Stop while a script runs (tests/browser/test_browser_strategies_stop.py does,
in Chromium). Here the work is interrupted the way Streamlit interrupts it, by an exception raised
from its progress call; what it left in st.session_state is what the page's next run finds."""

import pytest
from streamlit.testing.v1 import AppTest

from kvviz.lessons import budget
from kvviz.lessons.budget import WorkTooLarge
from kvviz.lessons.cache_strategies.logic import (
    PRESENTER_COLUMNS,
    compare_strategies,
    comparison_runs,
    comparison_seconds,
    eviction_seconds,
    lesson_specs,
)
from kvviz.lessons.cache_strategies.state import EXAMPLE_PROMPT, TIMING_RUNS
from kvviz.strategies.eviction import eviction_lab

from app_tests import button, open_lesson


class Interrupted(Exception):
    """What Streamlit raises in a script run at its next message once Stop is pressed."""


def interrupt_after(steps: int, texts: list):
    """A progress callback that records what it is told and interrupts the work at its `steps`-th call."""
    def progress(done, total, text):
        texts.append((done, total, text))
        if len(texts) == steps:
            raise Interrupted
    return progress


def test_progress_names_the_strategy_the_run_and_the_token(bundled, monkeypatch):
    specs = lesson_specs(8, 16, 0)
    texts = []
    compare_strategies(bundled, EXAMPLE_PROMPT, 3, specs, 2, progress=interrupt_after(10**6, texts))
    runs = comparison_runs(specs, 2)
    assert len(runs) == 1 + 3 * len(specs)  # the reference, then forced + free per strategy, then 1 more timed
    assert [done for done, _, _ in texts] == list(range(1, 3 * len(runs) + 1))  # every step moves the bar
    assert {total for _, total, _ in texts} == {3 * len(runs)}
    assert texts[0][2] == "the full cache's reference run, token 1 of 3 · 0 of 7 strategies measured"
    assert texts[5][2] == "dynamic: teacher-forced run, token 3 of 3 · 0 of 7 strategies measured"
    assert texts[9][2] == "static: teacher-forced run, token 1 of 3 · 1 of 7 strategies measured"
    assert texts[-1][2] == "no cache: timed run 2 of 2, token 3 of 3 · 7 of 7 strategies measured"
    budget.forget_paces()  # a fresh server's estimates: under load, the clicks timed above slow them past 30 s
    assert 0 < comparison_seconds(bundled, EXAMPLE_PROMPT, 32, specs, TIMING_RUNS) < 30
    assert 0 < eviction_seconds(bundled, EXAMPLE_PROMPT, 32) < 30  # the page's defaults run
    monkeypatch.setenv("KVVIZ_CLICK_SECONDS", "1")
    with pytest.raises(WorkTooLarge, match="The eviction lab for 128 tokens after this"):
        eviction_seconds(bundled, EXAMPLE_PROMPT, 128)


def test_a_finished_run_leaves_no_bar_and_a_stopped_run_keeps_the_strategies_measured(bundled):
    at = open_lesson("lessons/cache_strategies.py")
    at.slider(key="strategies_max_tokens").set_value(3).run()
    button(at, "Run every strategy").click().run()
    assert not at.exception and not at.error and not any("Stopped" in w.value for w in at.warning)
    assert not at.get("progress") and not [b for b in at.button if b.label == "Stop"]  # the bar goes at the end
    finished = at.session_state["strategies_run"]
    assert len(finished["results"]) == 7 and "strategies_running" not in at.session_state

    # interrupted in the sliding window's teacher-forced run: dynamic and static are measured
    specs, results, texts = lesson_specs(24, 32, 0), [], []
    with pytest.raises(Interrupted):
        compare_strategies(bundled, EXAMPLE_PROMPT, 3, specs, TIMING_RUNS, results=results,
                           progress=interrupt_after(3 * 5 + 2, texts))
    assert texts[-1][2].startswith("sliding window (W=24): teacher-forced run, token 2 of 3")
    at.session_state["strategies_running"] = {"results": results, "prompt": EXAMPLE_PROMPT, "strategies": 7,
                                              "settings": {"max_tokens": 3, "window": 24, "group_size": 32,
                                                           "residual": 0}}
    at.run()
    assert not at.exception and not at.error and "strategies_running" not in at.session_state
    said = [w.value for w in at.warning if "Stopped" in w.value]
    assert said == ["Stopped after 2 of 7 strategies: the page keeps dynamic, static, each timed once; press "
                    "**Run every strategy** to measure them all."]
    kept = at.session_state["strategies_run"]
    assert [r.label for r in kept["results"]] == ["dynamic", "static"]
    assert kept["results"][1].token_ids == finished["results"][1].token_ids  # the same measurement, kept
    table = next(d for d in at.dataframe if "first divergence" in d.value.columns).value
    assert list(table["strategy"]) == ["dynamic", "static"] and list(table["first divergence"]) == ["never"] * 2
    assert (list(table["decode step (median)"])[0].endswith(" ms")
            and table["bytes held"][0] == kept["results"][0].held_bytes[-1])

    # stopped during the reference run: nothing new, the kept comparison stays
    at.session_state["strategies_running"] = {"results": [], "prompt": EXAMPLE_PROMPT, "strategies": 7,
                                              "settings": kept["settings"]}
    at.run()
    said = [w.value for w in at.warning if "Stopped" in w.value][0]
    assert said.startswith("Stopped during the full cache's reference run") and "nothing new is kept" in said
    assert [r.label for r in at.session_state["strategies_run"]["results"]] == ["dynamic", "static"]

    button(at, "Run every strategy").click().run()  # it runs again, whole, and the note goes
    assert not at.exception and not any("Stopped" in w.value for w in at.warning)
    assert len(at.session_state["strategies_run"]["results"]) == 7


def test_presenter_mode_shows_the_few_rounded_columns_a_projector_fits():
    at = open_lesson("lessons/cache_strategies.py")
    at.session_state["presenter"] = True
    at.slider(key="strategies_max_tokens").set_value(3).run()
    button(at, "Run every strategy").click().run()
    assert not at.exception
    table = next(d for d in at.dataframe if "first divergence" in d.value.columns)
    assert tuple(table.proto.column_order) == PRESENTER_COLUMNS
    assert "None" not in table.value.astype(str).to_numpy().ravel().tolist()


def test_a_stopped_eviction_lab_keeps_the_policies_measured(bundled):
    at = open_lesson("lessons/cache_strategies.py")
    at.slider(key="strategies_max_tokens").set_value(4).run()
    runs, texts = [], []
    with pytest.raises(Interrupted):  # in the third policy's free run: two policies are measured
        eviction_lab(bundled, EXAMPLE_PROMPT, 4, 16, 4, runs=runs, progress=interrupt_after(4 * 6 + 1, texts))
    assert texts[-1][2] == ("H2O: 8 heavy + 8 recent: free run, token 1 of 4 · 2 of 3 policies measured")
    assert {total for _, total, _ in texts} == {4 * 7}
    at.session_state["strategies_eviction_running"] = {"runs": runs, "prompt": EXAMPLE_PROMPT, "budget": 16, "sinks": 4}
    at.run()
    assert not at.exception and not at.error and "strategies_eviction_running" not in at.session_state
    said = [w.value for w in at.warning if "Stopped" in w.value]
    assert said == ["Stopped after 2 of 3 policies: the lab below keeps the full cache and sliding window (16 "
                    "tokens), 4 sinks + 12 recent; press **Run the eviction lab** to measure them all."]
    table = next(d for d in at.dataframe if "max KL (nats)" in d.value.columns and "policy" in d.value.columns)
    assert list(table.value["policy"]) == ["full cache", "sliding window (16 tokens)", "4 sinks + 12 recent"]

    at.session_state["strategies_eviction_running"] = {"runs": runs[:1], "prompt": EXAMPLE_PROMPT, "budget": 16,
                                                       "sinks": 4}
    at.run()  # stopped in the first policy's runs: nothing new, the kept lab stays
    said = [w.value for w in at.warning if "Stopped" in w.value][0]
    assert said.startswith("Stopped before any of the 3 policies was measured") and "last lab that finished" in said
    next(b for b in at.button if b.label == "Run the eviction lab").click().run()
    assert not at.exception and not at.error and not any("Stopped" in w.value for w in at.warning)
    assert len(at.session_state["strategies_eviction_run"]["lab"].runs) == 4
    assert not at.get("progress") and not [b for b in at.button if b.label == "Stop"]


def test_the_stop_bar_draws_a_bar_and_a_stop_button():
    def page():
        import streamlit as st

        from kvviz.ui.progress import StopBar

        bar = StopBar(st.empty(), "some_stop", "Estimated about 3 s on this server; starting", "Keep what ran.")
        bar.move(0.5, "half way", every_s=0.0)

    at = AppTest.from_function(page).run()
    assert not at.exception
    assert [b.label for b in at.button] == ["Stop"] and at.button[0].key == "some_stop"
    bar = at.get("progress")[0]
    assert bar.proto.value == 50 and bar.proto.text == "half way"
