"""The lecture taught to its last step in a real browser (issue 23): on every engine-driven page, at
the end, no two numbers on one screen contradict each other or the engine.

Prefill and decode is opened at its last step from a link (the link runs every step on the server);
Paged cache and batching, Speculative decoding and Batch generation are run to the end with their own buttons.
"""

import re
from urllib.parse import urlencode

from kvviz.lessons.prefill_decode.logic import PrefillLesson, LessonSettings
from kvviz.lessons.prefill_decode.state import EXAMPLE_PROMPTS, PAGE_SAMPLING
from kvviz.models import load_model
from kvviz.shapes import format_bytes

from app_reads import metric, metric_box, metric_shows, no_exceptions
from chromium import SLOW_S, browser_page, press, stage_caption, wait_drawn


def test_prefill_and_decode_at_its_last_step_bills_what_it_held(app_url):
    lesson = PrefillLesson.start(load_model("bundled"), LessonSettings(EXAMPLE_PROMPTS[0], PAGE_SAMPLING))
    lesson.prefill()
    while lesson.next_token() is not None:
        pass
    last = len(lesson.records) - 1
    bill = lesson.bill(last, lesson.model_info["dtype_bytes"])
    assert bill["token_bytes"] == bill["formula_bytes"] > 0  # what the page must show

    with browser_page(1280, 720) as page:
        link = urlencode({"prompt": EXAMPLE_PROMPTS[0], "step": last, "view": "Memory bill"})
        page.goto(f"{app_url}/prefill_decode?{link}")
        wait_drawn(page, page.get_by_text("Done.", exact=False).first, timeout=SLOW_S)
        no_exceptions(page)
        assert stage_caption(page).inner_text() == f"Step {last} of {last}"
        formula, measured = metric(page, "Formula"), metric(page, "Measured")
        assert formula == measured == format_bytes(bill["formula_bytes"])  # not "0 bytes" after the finish
        assert metric(page, "Blocks in use") == f"{bill['blocks']} blocks"
        stage_bill = page.locator("[data-testid='stage-bill']").inner_text()
        assert f"= {formula}" in stage_bill and f"measured {measured}" in stage_bill
        assert "went back to the pool" in page.locator("[data-testid='stage-under']").inner_text()  # the step's note
        done = page.locator("[data-testid='stAlertContentSuccess']").first.inner_text()
        assert f"prefill + {last} decode steps" in done.lower()


def test_speculative_decoding_at_its_end_adds_up(app_url):
    with browser_page(1280, 720) as page:
        page.goto(f"{app_url}/speculative")
        wait_drawn(page, page.get_by_role("button", name="Start", exact=True), timeout=SLOW_S)
        press(page, "Start", shows=metric_shows(page, "Forward passes", "1"))  # the prefill's pass
        press(page, "Run to the end", shows=page.get_by_text("Both finished:", exact=False))
        no_exceptions(page)
        passes, tokens = int(metric(page, "Forward passes")), int(metric(page, "Tokens generated"))
        per_pass = float(metric(page, "Tokens per pass"))
        assert passes > 0 and abs(per_pass - tokens / passes) < 0.006  # the three figures agree
        accepted, proposed = map(int, re.match(r"(\d+) of (\d+)", metric(page, "Drafts accepted")).groups())
        assert accepted <= proposed


def test_paged_batching_at_its_end_adds_up(app_url):
    with browser_page(1280, 720) as page:
        page.goto(f"{app_url}/paged_batching")
        wait_drawn(page, page.get_by_role("button", name="Start", exact=True), timeout=SLOW_S)
        press(page, "Start", shows=metric_box(page, "Running requests"))  # the run's figures, drawn once it runs
        # at the end every request has finished, none runs (the page draws its figures after the steps)
        press(page, "Run to the end", shows=metric_shows(page, "Running requests", "0"))
        no_exceptions(page)
        assert page.locator("[data-testid='stMetricValue']").filter(has_text="None").count() == 0
        assert page.get_by_text("0% wasted").count() == 0 or page.get_by_text("no request holds memory").count()


def test_batch_generation_at_its_end_adds_up(app_url):
    """The default batch run to its end: the tokens/s metric is the caption's division, the generated
    tokens are the caption's, and the peak of blocks in use is within the pool."""
    with browser_page(1280, 720) as page:
        page.goto(f"{app_url}/batch_generation")
        wait_drawn(page, page.get_by_role("button", name="Run the batch", exact=True), timeout=SLOW_S)
        press(page, "Run the batch", shows=page.get_by_text("requests in", exact=False))
        no_exceptions(page)
        caption = page.get_by_text(re.compile(r"^Tokens/s = ")).first.inner_text()
        tokens, seconds, rate = re.search(r"([\d,]+) output tokens ÷ ([\d.]+) s in engine steps = ([\d,]+) tokens/s",
                                          caption).groups()
        tokens, seconds, rate = int(tokens.replace(",", "")), float(seconds), int(rate.replace(",", ""))
        assert metric(page, "Output tokens/s") == f"{rate:,}"
        assert tokens / (seconds + 0.005) - 1 <= rate <= tokens / max(seconds - 0.005, 1e-9) + 1  # s shown to 0.01
        assert metric(page, "Generated tokens") == f"{tokens:,}"
        peak, pool = map(int, re.match(r"(\d+) of (\d+)", metric(page, "Peak blocks in use")).groups())
        assert 0 < peak <= pool
