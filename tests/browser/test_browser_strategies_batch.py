"""The "Cache strategies" and "Batch generation" pages in a real browser, with screenshots."""

import shutil

import pytest
from test_browser import app_url, no_exceptions, page  # noqa: F401  (fixtures)

from kvviz.ui.app_server import CHROMIUM, ROOT

from chromium import screenshot, wait_idle

pytestmark = pytest.mark.skipif(shutil.which(CHROMIUM) is None and not (ROOT / CHROMIUM).exists(),
                                reason="Debian's chromium is not installed (.ci/run installs it)")


BUSY = ("() => [...document.querySelectorAll('[data-stale=\"true\"], [data-testid=\"stSkeleton\"], "
        "[data-testid=\"stStatusWidget\"]')].map(e => (e.dataset.testid || e.tagName) + ': ' + "
        "(e.innerText || '').slice(0, 80))")


def idle(page, **kwargs):
    """wait_idle, saying what kept the app busy when it times out."""
    try:
        wait_idle(page, **kwargs)
    except TimeoutError:
        raise TimeoutError(f"still busy: {page.evaluate(BUSY)}") from None


def open_tab(page, name, shot):
    page.get_by_role("tab", name=name).click()
    idle(page)
    no_exceptions(page)
    screenshot(page, shot)


def press(page, button, expect, shot):
    """Click a button, wait for the run to end and for `expect` to show; no exception; a screenshot."""
    page.get_by_role("button", name=button).click()
    idle(page)
    page.get_by_text(expect).first.wait_for()
    no_exceptions(page)
    screenshot(page, shot)


def test_cache_strategies_page(app_url, page):
    page.goto(f"{app_url}/cache_strategies")
    page.get_by_role("button", name="Run every strategy").wait_for()
    idle(page)
    slider = page.locator("[data-testid='stSlider']").filter(has_text="Tokens to generate")
    tokens = slider.get_by_role("slider")
    tokens.focus()
    tokens.press("Home")  # 2 tokens, then up to 12: a short run keeps the test quick
    for _ in range(10):
        tokens.press("ArrowRight")
    idle(page)
    assert slider.locator("[data-testid='stSliderThumbValue']").inner_text() == "12"
    press(page, "Run every strategy", "Memory held after each step", "strategies_memory")
    open_tab(page, "Time", "strategies_time")
    open_tab(page, "Texts", "strategies_texts")
    assert page.get_by_text("same as the full cache").count() >= 1
    open_tab(page, "Error and KL", "strategies_error")
    open_tab(page, "Measured vs formula", "strategies_bill")
    page.get_by_role("tab", name="GQA and MQA").click()
    idle(page)
    press(page, "Convert and measure", "Cache per token, after", "strategies_gqa")


def test_batch_generation_page(app_url, page, tmp_path):
    page.goto(f"{app_url}/batch_generation")
    page.get_by_role("button", name="Run the batch").wait_for()
    idle(page)
    press(page, "Run the batch", "requests in", "batch_over_time")
    open_tab(page, "Requests", "batch_requests")
    open_tab(page, "Results", "batch_results")
    assert page.get_by_role("button", name="Download the results (JSONL)").count() == 1
    page.get_by_role("tab", name="Against transformers generate").click()
    idle(page)
    press(page, "Run both and compare", "Outputs identical", "batch_compare")

    # a binary file named .txt: one sentence, the Run button off, the results still there
    page.get_by_test_id("stRadioGroup").get_by_text("Upload a file").click()
    idle(page)
    binary = tmp_path / "prompts.txt"
    binary.write_bytes(bytes(range(256)) * 8)
    page.locator("[data-testid='stFileUploaderDropzoneInput']").set_input_files(str(binary))
    idle(page, settle=1.5)
    page.get_by_text("prompts.txt is not UTF-8 text").wait_for()
    assert page.locator("[data-testid='stAlertContentError']").count() == 1
    assert page.get_by_role("button", name="Run the batch").is_disabled()
    assert page.get_by_text("requests in").count() >= 1
    no_exceptions(page)
    screenshot(page, "batch_binary_upload")
