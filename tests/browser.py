"""Start the real app with `streamlit run` and drive it with Playwright in Debian's Chromium."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("KVVIZ_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREENSHOTS = ROOT / "artifacts" / "screenshots"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def running_app(timeout: float = 90.0):
    """Yield the base URL of a freshly started app; stop it afterwards."""
    port = free_port()
    log = open(ROOT / "artifacts" / f"streamlit-{port}.log", "w") if (ROOT / "artifacts").is_dir() \
        else subprocess.DEVNULL
    process = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.port", str(port),
         "--server.address", "127.0.0.1", "--server.headless", "true",
         "--server.fileWatcherType", "none"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.time() > deadline or process.poll() is not None:
                raise RuntimeError("the app did not start; see artifacts/streamlit-*.log")
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


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
