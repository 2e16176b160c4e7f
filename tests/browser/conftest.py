"""What every test under tests/browser/ shares: the skip where Debian's Chromium is not installed, and the
session's one app server and Chromium (tests/support/chromium.py) as the fixtures app_url, browser and page.
The helpers the tests call by name are modules of tests/support/ (chromium.py, app_reads.py, lesson_steps.py,
page_texts.py, axe_audit.py, stop_bars.py)."""

import shutil
from pathlib import Path

import pytest

from kvviz.ui.app_server import CHROMIUM, ROOT

from chromium import browser_page, shared_app_url, shared_browser

HERE = Path(__file__).parent
NEEDS_CHROMIUM = pytest.mark.skipif(shutil.which(CHROMIUM) is None and not (ROOT / CHROMIUM).exists(),
                                    reason="Debian's chromium is not installed (.ci/run installs it)")


def pytest_collection_modifyitems(items):
    """Every test under tests/browser/ is skipped where Debian's Chromium is not installed (pytest passes this
    hook the whole session's tests, not only this folder's)."""
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(NEEDS_CHROMIUM)


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
