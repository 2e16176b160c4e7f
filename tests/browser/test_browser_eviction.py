"""The eviction lab tab in a real browser at a projector's 1280x720, with screenshots."""

from playwright.sync_api import expect

from app_reads import no_exceptions
from chromium import SCREENSHOTS, browser_page, open_tab, screenshot, still, wait_drawn


def test_eviction_lab_tab(app_url):
    with browser_page(1280, 720) as page:
        page.goto(f"{app_url}/cache_strategies")
        wait_drawn(page, page.get_by_role("button", name="Run every strategy"), timeout=180)  # the model has loaded
        slider = page.locator("[data-testid='stSlider']").filter(has_text="Tokens to generate")
        tokens = slider.get_by_role("slider")
        tokens.focus()
        tokens.press("Home")  # 2 tokens, then up to 24: a shorter run keeps the test quick on a busy machine
        for _ in range(22):
            tokens.press("ArrowRight")
        # the slider shows 24. Its run draws nothing new (the number is read when a run is asked for), and it
        # need not end first: the slider hands its value over at each key, and the click below sends it along
        expect(slider.get_by_test_id("stSliderThumbValue")).to_have_text("24")
        open_tab(page, "Eviction lab")
        wait_drawn(page, page.get_by_role("button", name="Run the eviction lab"))
        page.get_by_role("button", name="Run the eviction lab").click()
        # the lab's table and its caption: drawn once the lab has run (before, the tab asks for the click)
        wait_drawn(page, page.get_by_text("KL: how far the next-token distribution is"), timeout=400)
        page.get_by_text("Which positions each policy keeps").first.wait_for()
        no_exceptions(page)
        assert page.get_by_text("same as the full cache").count() >= 1
        assert page.get_by_text("max KL (nats)").count() + page.locator("[data-testid='stDataFrame']").count() >= 1
        page.get_by_role("tab", name="Eviction lab").scroll_into_view_if_needed()
        still(page)  # what was still moving (a fade, a transition) has ended: then the screenshot
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / "eviction_lab_1280x720.png"))  # what a projector shows
        screenshot(page, "eviction_lab")  # the whole tab
