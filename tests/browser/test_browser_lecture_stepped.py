"""The lecture taught step by step in a real browser (issue 23 Done when), the parts
test_browser_lecture.py does not cover: Prefill and decode stepped with Next token to its last step
(not opened from a link), the Paged fork tab stepped through, the Memory bill split over GPUs, and
Cache strategies run at its defaults with each of its tabs and the GQA conversion. On each screen no
two numbers may contradict each other or the engine. One screenshot per end state goes to
artifacts/screenshots/.
"""

import re
import time

from playwright.sync_api import expect

from kvviz.lessons.prefill_decode.logic import PrefillLesson, LessonSettings
from kvviz.lessons.prefill_decode.state import EXAMPLE_PROMPTS, PAGE_SAMPLING
from kvviz.models import load_model
from kvviz.shapes import format_bytes

from app_reads import metric, metric_box, metric_delta, no_exceptions, pick, view_shows
from chromium import SLOW_S, browser_page, click_to_next_step, open_tab, press, screenshot, stage_caption, wait_drawn

ROWS = """(root) => [...root.querySelectorAll('tr')].map(tr => [...tr.querySelectorAll('th, td')]
    .map(c => c.innerText.trim()))"""


def cut_metrics(page) -> list[str]:
    """The metric values drawn wider than their box: the browser cuts them with an ellipsis, which
    hides the unit ("320.00 …")."""
    return page.evaluate("""() => [...document.querySelectorAll('[data-testid="stMetricValue"]')]
        .filter(box => [box, ...box.querySelectorAll('*')].some(e => e.scrollWidth > e.clientWidth + 1))
        .map(box => box.innerText)""")


def test_prefill_and_decode_stepped_to_its_end_bills_what_it_holds_at_every_step(app_url):
    lesson = PrefillLesson.start(load_model("bundled"), LessonSettings(EXAMPLE_PROMPTS[0], PAGE_SAMPLING))
    lesson.prefill()
    while lesson.next_token() is not None:
        pass
    last = len(lesson.records) - 1
    bills = [lesson.bill(step, lesson.model_info["dtype_bytes"]) for step in range(last + 1)]

    with browser_page(1280, 720) as page:
        page.goto(f"{app_url}/prefill_decode")
        wait_drawn(page, page.get_by_role("button", name="Prefill", exact=True), timeout=SLOW_S)
        started = time.perf_counter()
        press(page, "Prefill", shows=stage_caption(page))  # the stage shows once it ran
        page.locator("[data-testid='stRadio']").get_by_text("Memory bill", exact=True).first.click()
        wait_drawn(page, view_shows(page, "Memory bill"))
        next_token = page.get_by_role("button", name=re.compile("^Next token")).first
        seen = []
        for step in range(last + 1):
            shown = stage_caption(page).inner_text()
            assert re.search(rf"\b[Ss]tep {step} of {last}\b", shown), (step, shown)
            formula, measured = metric(page, "Formula"), metric(page, "Measured")
            assert formula == measured == format_bytes(bills[step]["formula_bytes"]), step  # the engine's bytes
            seen.append(measured)
            if step < last:
                click_to_next_step(page, next_token, timeout=SLOW_S)
        page.get_by_text("Done.", exact=False).first.wait_for(timeout=SLOW_S * 1000)
        stepped = time.perf_counter() - started
        no_exceptions(page)
        assert metric(page, "Blocks in use") == f"{bills[last]['blocks']} blocks"
        stage_bill = page.locator("[data-testid='stage-bill']").inner_text()
        assert f"= {seen[-1]}" in stage_bill and f"measured {seen[-1]}" in stage_bill
        done = page.locator("[data-testid='stAlertContentSuccess']").first.inner_text()
        assert f"prefill + {last} decode steps" in done.lower()
        assert next_token.is_disabled()  # nothing past the last step
        print(f"Prefill and decode: {last} Next token presses in {stepped:.1f} s; Formula = Measured at every "
              f"step, {seen[0]} at the prefill, {seen[-1]} at step {last} ({bills[last]['blocks']} blocks)")
        screenshot(page, "lecture_prefill_decode_stepped_end")


def peaks(page) -> tuple[int, int]:
    caption = page.get_by_text(re.compile("^Peak so far")).first.inner_text()
    shared, separate = re.search(r": (\d+) \(.*?\) for the \d+ samples sharing the prompt, (\d+) \(", caption).groups()
    return int(shared), int(separate)


def test_the_fork_tab_stepped_to_its_end_never_lowers_a_peak(app_url):
    with browser_page(1280, 900) as page:
        page.goto(f"{app_url}/paged_batching")
        wait_drawn(page, page.get_by_role("button", name="Start", exact=True), timeout=SLOW_S)
        open_tab(page, re.compile("^Parallel sampling"))
        press(page, "Fork", shows=metric_box(page, "Blocks held now"))
        no_exceptions(page)
        slider = page.locator("input[type='range'][aria-label='Step']")
        last = int(slider.get_attribute("max"))
        assert last > 0 and slider.input_value() == "0"
        history = []
        for step in range(last + 1):
            if step:
                slider.focus()
                slider.press("ArrowRight")
                wait_drawn(page, stage_caption(page, step))  # the run for the slider's step moves the stage there
            assert slider.input_value() == str(step)
            held, separate = int(metric(page, "Blocks held now")), int(metric_delta(page, "Blocks held now").split()[0])
            saved_blocks = int(metric_delta(page, "Saved now").split()[0])
            shared_peak, separate_peak = peaks(page)
            assert saved_blocks == separate - held, step  # "Saved now" is the two held-now figures' difference
            assert held <= shared_peak and separate <= separate_peak, step  # a peak is at least what is held
            history.append((held, separate, shared_peak, separate_peak, metric(page, "Saved now")))
        for before, after in zip(history, history[1:]):
            assert after[2] >= before[2] and after[3] >= before[3], history  # peaks never fall
        assert history[-1][2] == max(h[0] for h in history) and history[-1][3] == max(h[1] for h in history)
        no_exceptions(page)
        print(f"Fork: {last + 1} steps; (held, independent, peak, independent peak, saved now) = {history}")
        screenshot(page, "lecture_fork_end")


def test_the_memory_bill_split_over_eight_gpus_gives_its_verdict_on_the_per_gpu_figure(app_url):
    from kvviz import memory_bill
    from kvviz.shapes import PRESETS

    share = memory_bill.tensor_parallel_share(PRESETS["llama-3.1-70b"], 8, 8192)
    weights, cache = format_bytes(share.weights_bytes_per_gpu), format_bytes(share.cache_bytes_per_gpu)
    total = format_bytes(share.weights_bytes_per_gpu + share.cache_bytes_per_gpu)
    with browser_page(1280, 900) as page:
        page.goto(f"{app_url}/memory_bill")
        wait_drawn(page, page.get_by_role("combobox", name="Start from a model"))
        too_big = page.get_by_text(re.compile("^Does not fit: the weights alone"))  # on one GPU
        pick(page, "Start from a model", "llama-3.1-70b", shows=too_big)
        pick(page, "Accelerator", "H100 80GB", shows=too_big)  # the page's first accelerator: chosen already
        assert too_big.count() >= 1  # one GPU
        gpus = page.locator("input[type='range'][aria-label='GPUs (tensor parallel)']")
        for count in (2, 4, 8):  # 1 -> 2 -> 4 -> 8
            gpus.focus()
            gpus.press("ArrowRight")
            wait_drawn(page, page.get_by_text(f"Split over {count} GPUs (tensor parallel)", exact=False))
        assert gpus.get_attribute("aria-valuetext") == "8"
        no_exceptions(page)
        verdict = page.locator("[data-testid='stAlertContentSuccess']").first.inner_text()
        assert verdict.startswith("Fits on each of 8 GPUs"), verdict
        assert f"weights {weights} + cache {cache} per GPU" in verdict, verdict  # the verdict's figures ...
        assert metric(page, "Weights per GPU") == weights and metric(page, "Cache per GPU") == cache  # ... = shown
        caption = page.get_by_text(re.compile("^Per GPU: ")).first.inner_text()
        assert caption.startswith(f"Per GPU: {weights} + {cache} = {total}, which fits"), caption
        assert page.get_by_text(re.compile("^Does not fit")).count() == 0
        print(f"Memory bill, llama-3.1-70b on 8 x H100 80GB: verdict '{verdict[:140]}'; metrics {weights} + {cache}; "
              f"caption total {total}")
        assert not cut_metrics(page), cut_metrics(page)  # at 1280 px every figure shows its unit
        screenshot(page, "lecture_memory_bill_tp8")


def test_cache_strategies_at_its_defaults_agree_between_table_chart_and_bill(app_url):
    with browser_page(1400, 1000) as page:
        page.goto(f"{app_url}/cache_strategies")
        wait_drawn(page, page.get_by_role("button", name="Run every strategy", exact=True), timeout=SLOW_S)
        started = time.perf_counter()
        press(page, "Run every strategy", shows=page.get_by_text(re.compile("^After the last step the full")))
        ran = time.perf_counter() - started
        no_exceptions(page)
        # the memory chart: each strategy's bytes after the last step
        chart = page.locator("[data-testid='stPlotlyChart'] .js-plotly-plot").first
        traces = chart.evaluate("(g) => g.data.map(t => [t.name, t.y[t.y.length - 1]])")
        in_chart = {name: int(y) for name, y in traces}
        caption = page.get_by_text(re.compile("^After the last step the full")).first.inner_text()
        table = open_tab(page, "Table", exact=True).locator("[data-testid='stDataFrame']").first
        expect(table.locator("th").filter(has_text="bytes held")).not_to_have_count(0)  # the grid's rows are drawn
        rows = table.evaluate(ROWS)
        header = next(r for r in rows if "bytes held" in r)
        held_at, predicted_at, name_at = header.index("bytes held"), header.index("bytes predicted"), 0
        in_table = {r[name_at]: int(r[held_at].replace(",", "")) for r in rows
                    if len(r) > held_at and r[held_at].replace(",", "").isdigit()}
        predicted = {r[name_at]: int(r[predicted_at].replace(",", "")) for r in rows
                     if len(r) > predicted_at and r[predicted_at].replace(",", "").isdigit()}
        assert len(in_table) >= 5, rows
        for name, held in in_table.items():
            if held:  # a strategy holding nothing is left off the logarithmic axis
                assert in_chart[name] == held, (name, in_chart, in_table)
            assert predicted[name] == held, name  # kvviz.memory_bill predicts the measured bytes
        dynamic = in_table["dynamic"]
        assert f"full (dynamic) cache holds {format_bytes(dynamic)}" in caption
        # Measured vs formula: the metric, the predicted figure and the table row agree
        bill_tab = open_tab(page, "Measured vs formula", exact=True)
        expect(bill_tab.locator("[data-testid='stMetric']").first).to_be_visible()
        measured, predicts = metric(page, "Measured (tensors' bytes)"), metric(page, "kvviz.memory_bill predicts")
        assert measured == predicts, (measured, predicts)
        quantized = next(name for name in in_table if name.startswith("int"))  # the tab opens on the first one
        assert measured == format_bytes(in_table[quantized]), (measured, quantized, in_table)
        bill_table = bill_tab.locator("[data-testid='stDataFrame']").first
        expect(bill_table.locator("th").filter(has_text="measured")).not_to_have_count(0)  # the grid's rows are drawn
        bill_rows = bill_table.evaluate(ROWS)
        bill_header = next(r for r in bill_rows if "measured" in r)
        in_bill = {r[0]: r[bill_header.index("measured")] for r in bill_rows
                   if len(r) > bill_header.index("measured") and r[0] in in_table}
        assert in_bill == {name: format_bytes(held) for name, held in in_table.items()}, (in_bill, in_table)
        no_exceptions(page)
        print(f"Cache strategies at defaults: ran in {ran:.1f} s; bytes held (table = chart): {in_table}; "
              f"the bill tab's table: {in_bill}; its Measured {measured} = predicts {predicts}")
        screenshot(page, "lecture_cache_strategies_end")
        # the run's other tabs draw without an exception, and GQA converts and measures
        for tab, shot in (("Time", "strategies_time"), ("Texts", "strategies_texts"),
                          ("Error and KL", "strategies_error")):
            open_tab(page, tab, exact=True)
            no_exceptions(page)
            screenshot(page, shot)
            if tab == "Texts":  # static and paged compute what the full cache does
                assert page.get_by_text("same as the full cache").count() >= 1
        open_tab(page, "GQA and MQA")
        press(page, "Convert and measure", shows=page.get_by_text("Cache per token, after"))
        no_exceptions(page)
        screenshot(page, "strategies_gqa")
