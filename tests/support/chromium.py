"""Drive the real app (kvviz.ui.app_server starts it) with Playwright in Debian's Chromium.

One Chromium and one app server serve the whole test session (shared_browser, shared_app_url), or
under pytest-xdist (scripts/test.sh) each worker's: each test opens its own browser context, so tests
keep apart cookies and sessions while the browser's and the server's start-up (and the server's model
loads) are paid once a process. The server listens on a free port, so workers never meet.
close_shared() (tests/conftest.py, at the session's end) stops both. Starting the app, and which
browser, is kvviz.ui.app_server's (scripts/ use it too); import those names from there.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from kvviz.ui.app_server import BUSY_JS, CHROMIUM, CHROMIUM_ARGS, ROOT, SENDS_JS, running_app

SCREENSHOTS = ROOT / "artifacts" / "screenshots"


_shared: dict = {}  # "playwright", "browser", "app" (the running_app block's exit stack), "url"


def shared_browser():
    """The session's one Chromium, launched on first use (again if it went away)."""
    browser = _shared.get("browser")
    if browser is None or not browser.is_connected():
        if "playwright" not in _shared:
            from playwright.sync_api import sync_playwright

            _shared["playwright"] = sync_playwright().start()
        browser = _shared["browser"] = _shared["playwright"].chromium.launch(executable_path=CHROMIUM,
                                                                             args=CHROMIUM_ARGS)
    return browser


def shared_app_url() -> str:
    """The session's one app server (kvviz.ui.app_server.running_app), started on first use."""
    if "url" not in _shared:
        (ROOT / "artifacts").mkdir(exist_ok=True)
        stack = contextlib.ExitStack()
        _shared["url"] = stack.enter_context(running_app())
        _shared["app"] = stack
    return _shared["url"]


def close_shared() -> None:
    """Stop the session's app server and Chromium, if they were started."""
    if "app" in _shared:
        _shared.pop("app").close()
        _shared.pop("url")
    if "browser" in _shared:
        _shared.pop("browser").close()
    if "playwright" in _shared:
        _shared.pop("playwright").stop()


@contextlib.contextmanager
def browser_page(width: int = 1400, height: int = 1000):
    """A page in a fresh context of the session's Chromium, closed on leaving the block."""
    context = shared_browser().new_context(viewport={"width": width, "height": height})
    try:
        page = context.new_page()
        page.set_default_timeout(60_000)
        yield page
    finally:
        context.close()


def wait_idle(page, settle: float = 0.1, quiet: float = 0.3, timeout: float = 120.0) -> None:
    """Wait `settle` s, then until Streamlit has finished the script run: no script running, no message
    to the server unanswered, no request open, nothing stale, no skeletons, for `quiet` s (BUSY_JS).
    A send is seen from the moment it leaves (SENDS_JS), so the settle only covers a widget's own delay
    before it sends; the quiet covers the gap between a run and the one it asks for."""
    page.evaluate(SENDS_JS)
    time.sleep(settle)
    deadline, quiet_since = time.time() + timeout, None
    while time.time() < deadline:
        if not page.evaluate(BUSY_JS):
            quiet_since = quiet_since or time.time()
            if time.time() - quiet_since >= quiet:
                return
        else:
            quiet_since = None
        time.sleep(0.1)
    raise TimeoutError(f"the app kept running for {timeout:.0f} s")


def screenshot(page, name: str) -> Path:
    """A screenshot of the whole app, taller than the window, for people to look at."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    height = page.evaluate(
        "() => Math.max(...[...document.querySelectorAll('[data-testid=\"stMain\"], section.main, "
        "[data-testid=\"stAppViewContainer\"] *')].map(e => e.scrollHeight || 0), 900)")
    page.set_viewport_size({"width": page.viewport_size["width"], "height": min(int(height) + 40, 6000)})
    time.sleep(0.3)  # the resize's relayout
    page.screenshot(path=str(path))
    return path
