"""The real app in a real browser: open each page, run a short lesson, keep screenshots."""

import re
import shutil

import pytest
from playwright.sync_api import expect

from kvviz.ui.app_server import CHROMIUM, ROOT

from app_reads import metric_box
from chromium import (browser_page, click_to_next_step, run_finished, screenshot, shared_app_url, shared_browser,
                      wait_drawn, stage_caption)

pytestmark = pytest.mark.skipif(shutil.which(CHROMIUM) is None and not (ROOT / CHROMIUM).exists(),
                                reason="Debian's chromium is not installed (.ci/run installs it)")


@pytest.fixture(scope="module")  # the session's one app server (tests/support/chromium.py)
def app_url():
    return shared_app_url()


@pytest.fixture(scope="module")  # the session's one Chromium; each test opens its own context in it
def browser():
    chromium = shared_browser()
    yield chromium
    for context in chromium.contexts:  # what a failed test left open goes with its module
        context.close()


@pytest.fixture()
def page():
    with browser_page() as page:
        yield page


def no_exceptions(page):
    assert page.locator("[data-testid='stException']").count() == 0
    assert page.locator("text=Traceback").count() == 0


def view_shows(page, view: str):
    """What only the Prefill and decode page's run for `view` draws (one of its View radio's options,
    kvviz.lessons.prefill_decode.state.VIEWS): the locator to wait on after choosing it."""
    return {"Cache per layer": page.get_by_text(re.compile(r"^Every position costs")),
            "Keys and values": page.get_by_role("combobox", name="KV head"),
            # its caption, GQA's or MLA's (the stage has a label "9 query heads share 3 KV heads:" too)
            "Attention": page.get_by_test_id("stCaptionContainer").filter(has_text=re.compile(r"^\d+ query heads")),
            "Inside attention": page.get_by_role("heading", name=re.compile("Where q, k and v come from")),
            "Work saved": metric_box(page, "Tokens run, with cache"),
            "Memory bill": metric_box(page, "Blocks in use"),
            "Why decode is memory-bound": page.get_by_role("combobox", name="Accelerator")}[view]


def prefill_lesson(page, app_url):
    """Open the first lesson by its own address and press Prefill."""
    page.goto(f"{app_url}/prefill_decode")
    wait_drawn(page, page.get_by_role("button", name="Prefill"))
    page.get_by_role("button", name="Prefill").click()
    wait_drawn(page, stage_caption(page))  # the stage shows once the prefill ran


def test_home_page(app_url, page):
    page.goto(app_url)
    wait_drawn(page, page.get_by_text("the KV cache, live").first)
    no_exceptions(page)
    assert page.get_by_text("Prefill and decode").count() >= 1
    screenshot(page, "home")


def test_prefill_and_decode_lesson(app_url, page):
    prefill_lesson(page, app_url)
    page.get_by_text("Prefill.", exact=False).first.wait_for()
    for _ in range(3):
        click_to_next_step(page, page.get_by_role("button", name="Next token"))
    page.get_by_text("Decode step 3").first.wait_for()
    no_exceptions(page)
    screenshot(page, "prefill_decode")
    code = page.locator("[data-testid='stCode']")
    assert code.count() == 0  # "Show the code" is drawn only while open, not at every step
    page.get_by_text("Show the code", exact=True).click()  # opening it runs the page, which draws the code
    wait_drawn(page, code.filter(has_text="def step("))
    assert code.filter(has_text="def _sample(").count() == 1  # the engine's own source
    for tab in ("Keys and values", "Attention", "Work saved", "Memory bill"):
        # the View radio's option: the page's first "Memory bill" is the sidebar's link to that lesson
        page.locator("[data-testid='stRadio']").get_by_text(tab, exact=True).first.click()
        wait_drawn(page, view_shows(page, tab))
        no_exceptions(page)
        screenshot(page, f"prefill_decode_{tab.lower().replace(' ', '_')}")


def test_empty_prompt_shows_one_sentence_and_keeps_the_lesson(app_url, page):
    prefill_lesson(page, app_url)
    page.get_by_role("button", name="Prompt and settings").click()  # folded into a popover after Prefill
    prompt = page.get_by_label("Prompt", exact=True)
    prompt.fill("")
    prompt.press("Control+Enter")
    # the run that takes the empty prompt names no example prompt any more: the box shows its placeholder
    expect(page.get_by_role("combobox", name="Example prompts")).to_have_value("")
    run_finished(page)
    page.get_by_role("button", name="Prefill", exact=True).click()
    wait_drawn(page, page.get_by_text("The prompt is empty"))
    assert page.get_by_text("Prefill.", exact=False).count() >= 1  # the earlier lesson is still there
    no_exceptions(page)
    screenshot(page, "prefill_decode_empty_prompt")
