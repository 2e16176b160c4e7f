"""Drive the real app with Playwright in Debian's Chromium: open a page, wait for a run to end, take a
screenshot. Starting the app, and which browser, is kvviz.ui.app_server's (scripts/ use it too); import
those names from there."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from kvviz.ui.app_server import CHROMIUM, CHROMIUM_ARGS, ROOT

SCREENSHOTS = ROOT / "artifacts" / "screenshots"


@contextlib.contextmanager
def browser_page(width: int = 1400, height: int = 1000):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.set_default_timeout(60_000)
            yield page
        finally:
            browser.close()


def wait_idle(page, settle: float = 0.5, quiet: float = 1.0, timeout: float = 120.0) -> None:
    """Wait until Streamlit has finished the script run: nothing stale, no skeletons, for `quiet` s."""
    busy_js = ("() => document.querySelectorAll('[data-stale=\"true\"], [data-testid=\"stSkeleton\"], "
               "[data-testid=\"stStatusWidget\"]').length")
    time.sleep(settle)
    deadline, quiet_since = time.time() + timeout, None
    while time.time() < deadline:
        if page.evaluate(busy_js) == 0:
            quiet_since = quiet_since or time.time()
            if time.time() - quiet_since >= quiet:
                return
        else:
            quiet_since = None
        time.sleep(0.2)
    raise TimeoutError("the app kept running for two minutes")


def screenshot(page, name: str) -> Path:
    """A screenshot of the whole app, taller than the window, for people to look at."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    height = page.evaluate(
        "() => Math.max(...[...document.querySelectorAll('[data-testid=\"stMain\"], section.main, "
        "[data-testid=\"stAppViewContainer\"] *')].map(e => e.scrollHeight || 0), 900)")
    page.set_viewport_size({"width": page.viewport_size["width"], "height": min(int(height) + 40, 6000)})
    time.sleep(0.8)
    page.screenshot(path=str(path))
    return path
