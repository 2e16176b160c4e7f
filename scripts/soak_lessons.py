"""Soak: N browser sessions each run a full default lesson, then close; watch the server's memory.

    python scripts/soak_lessons.py --sessions 10

Each session opens the "Prefill and decode" lesson through a link that asks for its last step
(?prompt=...&step=47), so the server runs the whole default 48-token lesson for it, exactly as
pressing Next token 47 times would. The script prints the server's resident memory before any
session, at its peak while the sessions are open, and 60 s after the last one closed (the time
kvviz's sweeper needs to free the lessons of ended sessions). Not part of CI: it takes minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
import urllib.parse

from load_test import server_rss_bytes, wait_idle  # scripts/ is on the path: this script's own folder

from kvviz.ui.app_server import CHROMIUM, CHROMIUM_ARGS, running_app

PROMPT = "ROMEO:\nBut soft, what light through yonder window breaks?"  # the lesson's default prompt
DEFAULT_TOKENS = 48


async def student(browser, url: str) -> None:
    context = await browser.new_context(viewport={"width": 1300, "height": 900})
    page = await context.new_page()
    page.set_default_timeout(600_000)
    link = urllib.parse.urlencode({"prompt": PROMPT, "step": DEFAULT_TOKENS - 1})
    await page.goto(f"{url}/prefill_decode?{link}")
    # the link's steps run before the page draws anything, so the buttons appear once the lesson is done
    await page.get_by_role("button", name="Prefill").wait_for()
    await wait_idle(page)
    await context.close()


async def soak(url: str, sessions: int, after_s: float) -> dict:
    from playwright.async_api import async_playwright

    port = int(url.rsplit(":", 1)[1])
    peak = [server_rss_bytes(port)]
    stop = threading.Event()

    def watch():
        while not stop.wait(0.5):
            peak[0] = max(peak[0], server_rss_bytes(port))

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        warm = await browser.new_context()  # load the model once, so "before" includes it
        page = await warm.new_page()
        page.set_default_timeout(600_000)
        await page.goto(f"{url}/prefill_decode")
        await page.get_by_role("button", name="Prefill").wait_for()
        await wait_idle(page)
        await warm.close()
        await asyncio.sleep(2)
        before = server_rss_bytes(port)
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        start = time.perf_counter()
        await asyncio.gather(*(student(browser, url) for _ in range(sessions)))
        elapsed = time.perf_counter() - start
        await browser.close()
    await asyncio.sleep(after_s)
    stop.set()
    return {"sessions": sessions, "seconds": elapsed, "before": before, "peak": peak[0],
            "after": server_rss_bytes(port)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--after", type=float, default=60.0, help="seconds to wait after the last session closed")
    args = parser.parse_args()
    if not 1 <= args.sessions <= 60:
        parser.error("--sessions must be 1 to 60")
    with running_app() as url:
        result = asyncio.run(soak(url, args.sessions, args.after))
    mib = 2**20
    print(f"{result['sessions']} sessions, each a full {DEFAULT_TOKENS}-token lesson, in {result['seconds']:.0f} s")
    print(f"server memory before: {result['before'] / mib:.0f} MiB")
    print(f"server memory at peak: {result['peak'] / mib:.0f} MiB "
          f"(+{(result['peak'] - result['before']) / mib / result['sessions']:.1f} MiB a session)")
    print(f"server memory {args.after:.0f} s after the last session closed: {result['after'] / mib:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
