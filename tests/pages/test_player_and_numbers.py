"""Numbers and controls a teacher found wrong by driving the pages (issue 12), under AppTest."""

from app_tests import click, metric, open_lesson


def test_paged_waste_counts_a_shared_prefix_block_once():
    at = open_lesson("lessons/paged_batching.py")
    click(at, "Start")
    click(at, "Step")
    click(at, "Step")
    lesson = at.session_state["paged_run"]
    record, block_size = lesson.records[-1], lesson.engine.block_size
    running = [r for r in record.requests if r.status == "running" and r.num_computed_tokens]
    tables = [r.block_table for r in running]
    shared = set(tables[0]).intersection(*tables[1:])
    assert len(running) >= 2 and shared  # R2 reuses R1's system-prompt blocks
    filled = {}
    for r in running:
        for i, block in enumerate(r.block_table):
            filled[block] = max(filled.get(block, 0), min(block_size, r.num_computed_tokens - i * block_size))
    slots = len(filled) * block_size
    expected = 1 - sum(filled.values()) / slots
    assert expected > 0  # the pool has empty slots, so the page must not say 0%
    assert metric(at, "Paged blocks").delta == f"{expected:.0%} wasted"
    assert f"{len(filled)} blocks hold {slots} slots" in metric(at, "Paged blocks").help


def test_paged_predict_panel_offers_a_request_after_a_new_start():
    at = open_lesson("lessons/paged_batching.py")
    click(at, "Start")
    at.selectbox(key="paged_question_request").select_index(0).run()
    click(at, "Run to the end")
    assert any("Every request has finished" in c.value for c in at.caption)
    click(at, "Start")
    box = at.selectbox(key="paged_question_request")
    assert box.value is not None and box.options
    commit = next(b for b in at.button if b.label == "Commit")
    assert not commit.disabled
    commit.click().run()
    assert len(at.session_state["paged_questions"]) == 1 and not at.exception


def figure(at, index=0) -> dict:
    import json

    return json.loads(at.get("plotly_chart")[index].proto.spec)


def test_work_saved_plots_token_counts_on_titled_nonnegative_axes():
    at = open_lesson("lessons/prefill_decode.py")
    click(at, "Prefill")
    click(at, "Next token")
    click(at, "Next token")
    at.radio(key="lesson_view").set_value("Work saved").run()
    rows = at.session_state["lesson_run"].work()
    spec = figure(at)
    layout = spec["layout"]
    assert "tokens" in layout["yaxis"]["title"]["text"] and "tokens" in layout["yaxis2"]["title"]["text"]
    # both axes start at 0 and reach past the largest count (the overlaid axis once stopped short)
    assert layout["yaxis"]["range"][0] == layout["yaxis2"]["range"][0] == 0
    assert layout["yaxis"]["range"][1] >= max(r["without_cache_tokens"] for r in rows)
    assert layout["yaxis2"]["range"][1] >= max(r["without_cache_total"] for r in rows)
    # no single cold timing is drawn: every trace is a count of tokens from the lesson's records
    by_axis = {}
    for trace in spec["data"]:
        assert "ms" not in trace["name"]
        by_axis.setdefault(trace.get("yaxis", "y"), []).append(list(trace["y"]))
    assert [r["without_cache_tokens"] for r in rows] in by_axis["y"]
    assert [r["with_cache_total"] for r in rows] in by_axis["y2"]
    assert all("ms" not in key for key in rows[0])
    assert not any("table below" in s.value for s in at.success)


def test_model_lab_times_are_medians_with_spread_and_stale_results_are_marked():
    at = open_lesson("lessons/model_lab.py")
    at.slider(key="lab_layers").set_value(2).run()
    click(at, "Measure")
    result = at.session_state["lab_result"]
    longest = result.timings[-1]
    assert all(t.repeats == 5 for t in result.timings)  # the longest context too, not one cold step
    assert longest.cached_spread_s[0] <= longest.cached_s <= longest.cached_spread_s[1]
    assert metric(at, "With the cache").value == longest.median_text(cached=True)
    assert metric(at, "Tokens run").value == f"1 vs {longest.context:,}"
    assert any(f"With the cache: {longest.median_text(cached=True)} median of 5, spread " in c.value
               for c in at.caption)
    # only the page's note about random weights, and the busy-machine sentence when the timings call for it
    note = result.spread_note() or result.busy_note()
    assert [w.value for w in at.warning[1:]] == ([note] if note else [])
    at.slider(key="lab_layers").set_value(3).run()
    assert any("previous shape" in w.value for w in at.warning)


def test_strategies_time_tab_leads_with_tokens_and_shows_medians_of_runs():
    at = open_lesson("lessons/cache_strategies.py")
    at.slider(key="strategies_max_tokens").set_value(4).run()
    click(at, "Run every strategy")
    results = at.session_state["strategies_run"]["results"]
    assert all(len(r.decode_ms) == 3 for r in results)
    no_cache = next(r for r in results if r.strategy == "no_cache")
    dynamic = results[0]
    assert no_cache.tokens_run[1:] == [dynamic.tokens_run[0] + i for i in range(1, len(no_cache.tokens_run))]
    assert dynamic.tokens_run[1:] == [1] * (len(dynamic.tokens_run) - 1)
    spec = figure(at, 1)  # memory, then time
    lines = {t["name"]: t["y"] for t in spec["data"] if t["type"] == "scatter"}
    bars = {t["name"]: t for t in spec["data"] if t["type"] == "bar"}
    assert lines["no cache"] == no_cache.tokens_run
    assert bars["no cache"]["x"][0] == no_cache.decode_ms_median and bars["no cache"]["orientation"] == "h"
    assert "median of 3 runs" in spec["layout"]["annotations"][1]["text"]
    table = at.session_state["strategies_run"]["table"]
    assert table[0]["spread (ms)"].endswith("over 3 runs")


def test_batch_tokens_per_second_names_what_it_divides_by():
    from kvviz.throughput import output_tokens_per_s

    at = open_lesson("lessons/batch_generation.py")
    at.slider(key="batch_count").set_value(4).run()
    click(at, "Run the batch")
    done = at.session_state["batch_run"]
    assert metric(at, "Output tokens/s").value == f"{output_tokens_per_s(done.output_tokens, done.engine_seconds):,.0f}"
    assert any(f"{done.output_tokens:,} output tokens ÷ {done.engine_seconds:.2f} s in engine steps" in c.value
               for c in at.caption)
    click(at, "Run both and compare")
    compared = at.session_state["batch_compare_run"]
    words = f"{compared.kvviz.output_tokens:,} output tokens ÷ {compared.kvviz.seconds:.2f} s of generate"
    assert any(words in c.value for c in at.caption) and not at.exception


def test_a_link_to_another_prompt_clears_the_example_box():
    from streamlit.testing.v1 import AppTest

    from app_tests import ROOT

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.query_params["prompt"] = "KING:\nWho goes there?"
    at.query_params["step"] = "1"
    at.run()
    at.switch_page("lessons/prefill_decode.py").run()
    assert at.text_area(key="lesson_prompt").value == "KING:\nWho goes there?"
    assert at.selectbox(key="lesson_example").value is None  # not ROMEO
    at.selectbox(key="lesson_example").select_index(1).run()
    assert at.text_area(key="lesson_prompt").value == at.selectbox(key="lesson_example").value
    assert at.select_slider(key="lesson_speed").label == "Play speed"
    assert at.select_slider(key="lesson_speed").proto.label_visibility.value == 0  # visible


def test_a_prompt_that_fills_the_context_says_why_it_stopped(bundled):
    at = open_lesson("lessons/prefill_decode.py")
    words = "the king "
    prompt = words * 300
    ids = bundled.tokenizer(prompt)["input_ids"]
    room = 6
    prompt = bundled.tokenizer.decode(ids[:bundled.max_context - room])
    at.text_area(key="lesson_prompt").set_value(prompt).run()
    click(at, "Prefill")
    lesson = at.session_state["lesson_run"]
    while not lesson.finished:
        click(at, "Next token")
    generated = len(lesson.token_texts) - len(lesson.prompt_token_ids)
    assert generated < 48
    done = at.success[0].value
    assert f"stopped after {generated} of the 48 tokens" in done and f"context of {bundled.max_context}" in done


def test_memory_bill_speaks_of_one_request_in_the_singular():
    at = open_lesson("lessons/memory_bill.py")
    caption = next(c.value for c in at.caption if "reverse questions" in c.value)
    assert "one request can hold up to" in caption and "1 request can each" not in caption


def test_play_shows_the_newest_step_and_pause_keeps_it():
    at = open_lesson("lessons/prefill_decode.py")
    click(at, "Prefill")
    for _ in range(5):
        click(at, "Next token")
    at.slider(key="lesson_view_step").set_value(2).run()
    assert at.success[0].value.startswith("**Decode step 2.**")
    click(at, "Play")  # the ticker steps in the browser; here the press alone must show the newest step
    lesson = at.session_state["lesson_run"]
    newest = len(lesson.records) - 1
    assert at.slider(key="lesson_view_step").value == newest and at.slider(key="lesson_view_step").disabled
    assert at.success[0].value.startswith(f"**Decode step {newest}.**")
    click(at, "Pause")
    assert at.slider(key="lesson_view_step").value == newest and not at.slider(key="lesson_view_step").disabled
    assert at.success[0].value.startswith(f"**Decode step {newest}.**")


def test_pause_pressed_while_a_played_step_is_undrawn_shows_the_newest_step():
    """The ticker can step the lesson in a run the browser never drew; the slider the browser sends
    back with the Pause press still holds the step before. Pause must show the newest step, the one
    the slider's maximum says exists, not the stale one."""
    at = open_lesson("lessons/prefill_decode.py")
    click(at, "Prefill")
    for _ in range(3):
        click(at, "Next token")
    click(at, "Play")
    lesson = at.session_state["lesson_run"]
    shown = at.slider(key="lesson_view_step").value
    lesson.next_token()  # the ticker's step, whose page run the Pause press cut short
    newest = len(lesson.visible_records) - 1
    assert newest == shown + 1
    click(at, "Pause")
    assert at.slider(key="lesson_view_step").value == newest == at.slider(key="lesson_view_step").max
    assert at.success[0].value.startswith(f"**Decode step {newest}.**")


def test_a_sampled_lesson_reopens_from_its_link_with_the_same_tokens_step_and_view():
    """The URL carries tokens to generate, the sampling and the view, not only the prompt and step."""
    from streamlit.testing.v1 import AppTest

    from app_tests import ROOT

    at = open_lesson("lessons/prefill_decode.py")
    at.slider(key="lesson_max_tokens").set_value(9).run()
    at.toggle(key="lesson_greedy").set_value(False).run()
    at.slider(key="lesson_temperature").set_value(1.5).run()
    at.number_input(key="lesson_seed").set_value(7).run()
    click(at, "Prefill")
    for _ in range(4):
        click(at, "Next token")
    at.radio(key="lesson_view").set_value("Work saved").run()
    link = dict(at.query_params)
    assert link["greedy"] == "0" and link["seed"] == "7" and link["tokens"] == "9" and link["step"] == "4"
    texts = at.session_state["lesson_run"].token_texts

    again = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    again.query_params.update(link)
    again.run()
    again.switch_page("lessons/prefill_decode.py").run()
    lesson = again.session_state["lesson_run"]
    assert again.session_state["lesson_view_step"] == 4
    assert lesson.token_texts == texts  # same sampled text, not a greedy one
    assert lesson.settings.sampling.temperature == 1.5 and lesson.settings.sampling.max_tokens == 9
    assert again.radio(key="lesson_view").value == "Work saved"
    assert not again.error


def test_a_link_with_bad_settings_says_which_and_keeps_the_defaults():
    from streamlit.testing.v1 import AppTest

    from app_tests import ROOT

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.query_params.update({"prompt": "KING:\n", "tokens": "lots", "temperature": "nan", "view": "<b>x</b>",
                            "greedy": "0", "step": "2"})
    at.run()
    at.switch_page("lessons/prefill_decode.py").run()
    message = at.error[0].value
    assert "tokens 'lots' is not a number" in message and "temperature nan is outside" in message
    assert "view" in message
    assert at.session_state["lesson_temperature"] == 0.8 and at.radio(key="lesson_view").value == "Cache per layer"
    assert at.session_state["lesson_view_step"] == 2


def test_play_that_ends_the_lesson_shows_done_though_the_browser_sends_the_slider_a_step_behind():
    """Issue 33 item 2: Play at "fast" stopped at "Step 46 of 47", greyed, and never said "Done.". The
    last tick (a fragment run) steps, writes the newest step and ends Play; the browser's piled-up
    tick requests then carry the slider it drew a step before, which overwrote that step, and with
    Play off the page trusted it. Here: the tick's writes (as kvviz.lessons.stepped.step makes them), then a
    run that sends the stale slider."""
    at = open_lesson("lessons/prefill_decode.py")
    at.slider(key="lesson_max_tokens").set_value(4).run()
    click(at, "Prefill")
    for _ in range(2):
        click(at, "Next token")
    click(at, "Play")
    lesson = at.session_state["lesson_run"]
    shown = at.slider(key="lesson_view_step").value
    lesson.next_token()  # the last tick, in the ticker fragment
    assert lesson.finished and len(lesson.records) - 1 == shown + 1
    at.session_state["lesson_view_step"] = shown + 1
    at.session_state["lesson_stepped"] = True
    at.session_state["lesson_playing"] = False
    at.run()  # carries the slider the browser drew at `shown`
    assert at.success[0].value.startswith("**Done.**")
    assert at.slider(key="lesson_view_step").value == shown + 1 == at.slider(key="lesson_view_step").max
    at.slider(key="lesson_view_step").set_value(shown).run()  # looking back afterwards still works
    assert at.success[0].value.startswith(f"**Decode step {shown}.**")
