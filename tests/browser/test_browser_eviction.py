"""The eviction lab tab in a real browser at a projector's 1280x720, with screenshots."""

import shutil
import time

import pytest
from test_browser import app_url, no_exceptions  # noqa: F401  (fixture)

from kvviz.ui.app_server import CHROMIUM, ROOT

from chromium import SCREENSHOTS, browser_page, screenshot, wait_drawn, wait_idle

pytestmark = pytest.mark.skipif(shutil.which(CHROMIUM) is None and not (ROOT / CHROMIUM).exists(),
                                reason="Debian's chromium is not installed (.ci/run installs it)")


def test_eviction_lab_tab(app_url):
    with browser_page(1280, 720) as page:
        page.goto(f"{app_url}/cache_strategies")
        wait_drawn(page, page.get_by_role("button", name="Run every strategy"), timeout=180)  # the model has loaded
        tokens = page.locator("[data-testid='stSlider']").filter(has_text="Tokens to generate").get_by_role("slider")
        tokens.focus()
        tokens.press("Home")  # 2 tokens, then up to 24: a shorter run keeps the test quick on a busy machine
        for _ in range(22):
            tokens.press("ArrowRight")
        wait_idle(page)
        page.get_by_role("tab", name="Eviction lab").click()
        wait_drawn(page, page.get_by_role("button", name="Run the eviction lab"))
        page.get_by_role("button", name="Run the eviction lab").click()
        wait_idle(page, settle=2.0, timeout=400)
        page.get_by_text("Which positions each policy keeps").first.wait_for()
        no_exceptions(page)
        assert page.get_by_text("same as the full cache").count() >= 1
        assert page.get_by_text("max KL (nats)").count() + page.locator("[data-testid='stDataFrame']").count() >= 1
        page.get_by_role("tab", name="Eviction lab").scroll_into_view_if_needed()
        time.sleep(0.8)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / "eviction_lab_1280x720.png"))  # what a projector shows
        screenshot(page, "eviction_lab")  # the whole tab
