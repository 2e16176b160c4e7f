"""The Paged lesson's fork and swap views under AppTest, checked against the engine's records."""

import itertools

import pytest

from kvviz.lessons.paged_batching import fork as fork_lesson
from kvviz.shapes import format_bytes
from kvviz.ui.text import plain

from app_tests import click, metric, open_lesson


@pytest.fixture()
def app():
    return open_lesson("lessons/paged_batching.py")


def test_the_fork_view_shows_shared_blocks_copies_and_memory_saved(app):
    click(app, "Fork")
    assert not app.exception and not app.error
    run = app.session_state["paged_fork_run"]
    n = len(run.sample_ids)
    assert n == 4 and len(run.texts) == n
    assert run.num_prompt_tokens % run.block_size, "the default prompt ends in a partly filled block"
    first = fork_lesson.summary(run, 0)  # the fork happens at the prefill step: nothing copied yet
    assert metric(app, "Shared blocks").value == str(first["shared_blocks"]) == str(-(-run.num_prompt_tokens // 4))
    assert first["max_ref_cnt"] == n and metric(app, "Copies (copy-on-write)").value == "0"
    app.slider(key="paged_fork_view_step").set_value(1).run()
    after = fork_lesson.summary(run, 1)
    assert metric(app, "Copies (copy-on-write)").value == str(after["copies"]) == str(n - 1)
    assert after["shared_blocks"] == run.num_prompt_tokens // 4  # only full prompt blocks stay shared
    saved = (n - 1) * (run.num_prompt_tokens // 4)
    assert after["blocks_saved_now"] == saved
    assert metric(app, "Saved now").value == format_bytes(saved * run.bytes_per_block)
    texts = next(t.value for t in app.table if "text" in t.value.columns)
    assert list(texts["text"]) == [plain(t) for t in run.texts] and len(texts) == n  # one text per sample, as text
    assert not app.exception


def test_the_fork_views_peaks_never_fall_over_the_steps(app):
    """A peak is the most held at any step so far; the saving now may fall (the first decode step copies
    the partly filled prompt block), and the page names it so."""
    click(app, "Fork")
    run = app.session_state["paged_fork_run"]
    shown_peaks, saved_now = [], []
    for step in range(len(run.records)):
        app.slider(key="paged_fork_view_step").set_value(step).run()
        facts = fork_lesson.summary(run, step)
        assert not [m.label for m in app.metric if "peak" in m.label.lower()], "no metric is named a peak"
        caption = next(c.value for c in app.caption if c.value.startswith("Peak so far"))
        peaks = (facts["peak_blocks"], facts["separate_peak_blocks"])
        assert f": {peaks[0]} (" in caption and f"sharing the prompt, {peaks[1]} (" in caption
        shown_peaks.append(peaks)
        saved_now.append(facts["blocks_saved_now"])
        assert metric(app, "Saved now").value == format_bytes(facts["bytes_saved_now"])
        assert facts["blocks_saved_now"] == facts["separate_blocks_now"] - facts["blocks_now"]
    for kind in range(2):
        assert all(a[kind] <= b[kind] for a, b in itertools.pairwise(shown_peaks)), shown_peaks
    assert saved_now[1] < saved_now[0], "the copies at the first decode step take some of the saving back"


def test_the_fork_view_refuses_an_empty_prompt_in_one_sentence(app):
    app.text_area(key="paged_fork_prompt").set_value(" ").run()
    click(app, "Fork")
    assert "prompt is empty" in app.error[0].value and not app.exception


def test_the_swap_view_compares_both_modes_on_one_tight_pool(app):
    app.number_input(key="paged_swap_timed_runs").set_value(0).run()
    click(app, "Compare swap and recompute")
    assert not app.exception
    result = app.session_state["paged_swap_run"]
    recompute, swap = result["recompute"], result["swap"]
    assert recompute.preemptions > 0 and swap.preemptions > 0
    assert recompute.recomputed_tokens > 0 and swap.recomputed_tokens == 0
    assert swap.bytes_out == swap.bytes_in > 0 and recompute.bytes_out == 0
    assert swap.outputs == recompute.outputs
    assert any("Outputs identical" in s.value for s in app.success)
    table = next(t.value for t in app.table if "bytes swapped out" in t.value.columns)
    assert table.loc["swap", "bytes swapped out"] == format_bytes(swap.bytes_out)
    assert table.loc["recompute", "tokens recomputed"] == recompute.recomputed_tokens
    assert table.loc["swap", "time (median, min–max)"] == "not timed"
