"""The real app in a real browser: open each page, run a short lesson, keep screenshots."""

from playwright.sync_api import expect

from app_reads import no_exceptions, view_shows
from chromium import click_to_next_step, run_finished, screenshot, wait_drawn
from lesson_steps import prefill_lesson


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
