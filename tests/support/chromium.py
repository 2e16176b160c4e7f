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
import re
from pathlib import Path

from playwright.sync_api import expect

from kvviz.ui.app_server import CHROMIUM, CHROMIUM_ARGS, ROOT, running_app

SCREENSHOTS = ROOT / "artifacts" / "screenshots"
SLOW_S = 400  # the longest a page may take: a loaded 2-core machine, a step or a model load can take minutes


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


# The browser tests start long clicks on purpose (to stop them mid-run), on a server whose pace
# (kvviz.lessons.budget.Pace) follows the tests beside it: a batch timed while another worker ran its
# browser made the 256-prompt batch that the Stop test runs past the default 30 s budget in CI. The
# budget's refusals are tested in AppTest (tests/pages/test_page_click_budgets.py) and on the hardening
# test's own server.
SHARED_APP_ENV = {"KVVIZ_CLICK_SECONDS": "150"}


def shared_app_url() -> str:
    """The session's one app server (kvviz.ui.app_server.running_app), started on first use."""
    if "url" not in _shared:
        (ROOT / "artifacts").mkdir(exist_ok=True)
        stack = contextlib.ExitStack()
        _shared["url"] = stack.enter_context(running_app(env=SHARED_APP_ENV))
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


def press(page, name: str, shows, exact: bool = True, timeout: float = SLOW_S) -> None:
    """Click the page's first button named `name` (exactly, or containing it) and wait for what
    its run draws: `shows`, a locator only that run can match (wait_drawn)."""
    button = page.get_by_role("button", name=name, exact=exact).first
    button.click()
    wait_drawn(page, shows, timeout=timeout)


def changed(page, shown, action, timeout: float = SLOW_S) -> str:
    """Do `action` (a callable: a slider's key presses, a click) whose run redraws `shown` (a locator) with other
    text, and wait until it has: expect the text to differ from before, then the run finished. Where the new
    text is not known beforehand. The new text."""
    before = shown.first.inner_text()
    action()
    expect(shown.first).not_to_have_text(before, timeout=timeout * 1000)
    run_finished(page, timeout)
    return shown.first.inner_text()


# what Streamlit shows while a script run has not drawn the whole page: an element left from the run before
# (data-stale), a skeleton, its status widget; and the stage about to report the step in view (its
# data-reporting: Playwright's CSS locators enter the component's shadow root)
UNFINISHED = ("[data-stale='true'], [data-testid='stSkeleton'], [data-testid='stStatusWidget'], "
              ".kvviz-stage[data-reporting]")


def run_finished(page, timeout: float = 120.0) -> None:
    """Expect the app's script run to have finished drawing: stApp's script state is notRunning and nothing
    on the page is unfinished. Only after an expect on something the run draws (wait_drawn): before its
    run has started, the page before it is finished too."""
    expect(page.get_by_test_id("stApp")).to_have_attribute(
        "data-test-script-state", re.compile("^(notRunning|compilationError)$"), timeout=timeout * 1000)
    expect(page.locator(UNFINISHED)).to_have_count(0, timeout=timeout * 1000)


def open_tab(page, name, exact: bool = False):
    """Click the page's tab called `name` (a string or a pattern), expect it selected and its panel shown. A tab
    switch runs no script (st.tabs' on_change is "ignore"): the browser mounts the chosen panel only (the
    others are not in the page), so what the tab holds is drawn once its panel shows. The panel."""
    tab = page.get_by_role("tab", name=name, exact=exact).first
    tab.click()
    expect(tab).to_have_attribute("aria-selected", "true")
    panel = page.locator(f"[role='tabpanel'][aria-labelledby='{tab.get_attribute('id')}']")
    expect(panel).to_be_visible()
    return panel


def wait_drawn(page, shown, timeout: float = 120.0) -> None:
    """After an action whose run draws `shown` (a locator only that run can match, such as the stage's
    "Step 5 of 47"): expect it on the page, then the run finished (run_finished). Where the result is known
    this is the wait: no settle or quiet spent on a send that has not left yet."""
    expect(shown.first).to_be_visible(timeout=timeout * 1000)
    run_finished(page, timeout)


def stage_caption(page, step: int | None = None):
    """The stage's caption ("Step 3 of 8", "Pass 2 of 6", "Step 18 of 18, ended early"),
    which a stepped lesson's first step (Prefill, Start, a replay) draws and a refused press does not; with `step`,
    only while it shows that step (a locator, empty while it shows another)."""
    caption = page.locator("[data-testid='stage-step']")
    return caption if step is None else caption.filter(
        has_text=re.compile(rf"^(Step|Pass) {step} of \d+(, ended early)?$"))


def click_to_next_step(page, control, timeout: float = 120.0) -> None:
    """Click `control` (a Step or Next token button) and wait until the stage's caption shows the next
    step ("Step 4 of 8" after "Step 3 of 8", "Pass 2 of 6" after "Pass 1 of 6") and the run finished."""
    caption = stage_caption(page)
    step = int(re.search(r"(\d+) of \d+", caption.first.inner_text()).group(1))
    control.click()
    wait_drawn(page, stage_caption(page, step + 1), timeout=timeout)


# Whether a finite animation still runs: the stage's slide-ins, give-backs, splits and roll-backs
# (kvviz/ui/stage/stage.css, 0.42-1.6 s), inside the stage component's shadow root, which the document's own
# getAnimations() does not see. Streamlit's spinners and skeletons loop forever and do not count.
MOVING_JS = """() => [document, ...[...document.querySelectorAll('*')].filter(e => e.shadowRoot).map(e => e.shadowRoot)]
    .some(root => root.getAnimations().some(a => a.playState === 'running'
        && a.effect && isFinite(a.effect.getComputedTiming().endTime)))"""
NEXT_FRAMES_JS = "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"


def still(page, timeout: float = 10.0) -> None:
    """Wait until the page's animations that end have ended (before a screenshot, or reading what a
    moving part shows); the two frames first let a render just made start its own."""
    page.evaluate(NEXT_FRAMES_JS)
    page.wait_for_function(f"() => !({MOVING_JS})()", timeout=timeout * 1000)


def screenshot(page, name: str) -> Path:
    """A screenshot of the whole app, taller than the window, for people to look at."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    height = page.evaluate(
        "() => Math.max(...[...document.querySelectorAll('[data-testid=\"stMain\"], section.main, "
        "[data-testid=\"stAppViewContainer\"] *')].map(e => e.scrollHeight || 0), 900)")
    page.set_viewport_size({"width": page.viewport_size["width"], "height": min(int(height) + 40, 6000)})
    still(page)  # the resize's relayout: two frames, and whatever it set moving
    page.screenshot(path=str(path))
    return path
