"""A room full of students: start the app, drive N real browser sessions at once, measure.

    python scripts/load_test.py --sessions 30 --steps 5

Each session opens the "Prefill and decode" lesson in its own browser context (its own
Streamlit session), types a prompt with its own marker word, presses Prefill and then Next
token several times. The script reports the median and 95th percentile of the time from a
click to the page being idle again, the server's resident memory before and after, and checks
that every session's tokens carry its own marker and no other session's.
Loopback only; bounded in sessions, steps and time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

from kvviz.ui.app_server import CHROMIUM, CHROMIUM_ARGS, running_app

BUSY_JS = ("() => document.querySelectorAll('[data-stale=\"true\"], [data-testid=\"stSkeleton\"], "
           "[data-testid=\"stStatusWidget\"]').length")
MARKERS = ["Romeo", "Juliet", "Hamlet", "Ophelia", "Macbeth", "Banquo", "Portia", "Shylock", "Viola",
           "Orsino", "Prospero", "Miranda", "Ariel", "Caliban", "Lear", "Cordelia", "Goneril", "Regan",
           "Othello", "Iago", "Desdemona", "Cassio", "Puck", "Oberon", "Titania", "Bottom", "Rosalind",
           "Orlando", "Beatrice", "Benedick", "Brutus", "Cassius", "Antony", "Cleopatra", "Falstaff"]


def server_rss_bytes(port: int) -> int:
    """Resident memory of the streamlit process listening on `port` (Linux /proc)."""
    for status in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            cmdline = status.read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "streamlit" in cmdline and f"--server.port {port}" in cmdline:
            for line in (status.parent / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    return 0


async def wait_idle(page, timeout: float = 300.0) -> None:
    await asyncio.sleep(0.3)
    deadline, quiet_since = time.time() + timeout, None
    while time.time() < deadline:
        if await page.evaluate(BUSY_JS) == 0:
            quiet_since = quiet_since or time.time()
            if time.time() - quiet_since >= 0.5:
                return
        else:
            quiet_since = None
        await asyncio.sleep(0.15)
    raise TimeoutError("a session stayed busy for five minutes")


async def student(browser, url: str, marker: str, steps: int, timings: list[float]) -> dict:
    context = await browser.new_context(viewport={"width": 1300, "height": 900})
    page = await context.new_page()
    page.set_default_timeout(300_000)
    await page.goto(f"{url}/prefill_decode")
    await page.get_by_role("button", name="Prefill").wait_for()
    await wait_idle(page)
    prompt = page.get_by_label("Prompt", exact=True)
    own_prompt = f"{marker.upper()}:\n{marker}, {marker}, wherefore art thou"
    await prompt.fill(own_prompt)
    await prompt.press("Control+Enter")
    await wait_idle(page)
    for step in range(steps + 1):
        start = time.perf_counter()
        await page.get_by_role("button", name="Prefill" if step == 0 else "Next token").click()
        # the step is drawn once its guided text appears; a busy server may start the rerun late
        await page.get_by_text("Prefill." if step == 0 else f"Decode step {step}.").first.wait_for()
        await wait_idle(page)
        timings.append(time.perf_counter() - start)
    # the blue chips are the prompt this session's engine cached; they must be its own prompt
    chips = await page.locator("span[title='prompt (prefill)']").all_inner_texts()
    shown = "".join(chips).replace("\xa0", " ").replace("⏎", "\n")
    generated = await page.locator("span[title^='decode step']").count()
    errors = await page.locator("[data-testid='stException']").count()
    await context.close()
    return {"marker": marker, "own": shown == own_prompt, "shown": shown, "generated": generated,
            "exceptions": errors}


async def main_async(args) -> dict:
    from playwright.async_api import async_playwright

    markers = (MARKERS * ((args.sessions // len(MARKERS)) + 1))[:args.sessions]
    markers = [f"{m}{i}" if args.sessions > len(MARKERS) else m for i, m in enumerate(markers)]
    with running_app() as url:
        port = int(url.rsplit(":", 1)[1])
        rss_before = server_rss_bytes(port)
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            timings: list[float] = []
            started = time.perf_counter()
            results = await asyncio.wait_for(asyncio.gather(
                *[student(browser, url, m, args.steps, timings) for m in markers]), args.timeout)
            wall = time.perf_counter() - started
            await browser.close()
        rss_after = server_rss_bytes(port)
    leaks = [{"session": r["marker"], "saw": r["shown"][:60]} for r in results if not r["own"]]
    short = [r["marker"] for r in results if r["generated"] != args.steps + 1]
    timings.sort()
    report = {
        "sessions": args.sessions, "steps_per_session": args.steps + 1, "clicks": len(timings),
        "step_time_median_s": round(statistics.median(timings), 3),
        "step_time_p95_s": round(timings[int(0.95 * (len(timings) - 1))], 3),
        "wall_s": round(wall, 1),
        "server_rss_before_mib": round(rss_before / 2**20, 1),
        "server_rss_after_mib": round(rss_after / 2**20, 1),
        "exceptions": sum(r["exceptions"] for r in results),
        "sessions_with_foreign_tokens": leaks,
        "sessions_missing_steps": short,
    }
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=30)
    parser.add_argument("--steps", type=int, default=5, help="Next-token clicks per session after Prefill")
    parser.add_argument("--timeout", type=float, default=900.0, help="give up after this many seconds")
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args()
    report = asyncio.run(main_async(args))
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    ok = not (report["sessions_with_foreign_tokens"] or report["exceptions"] or report["sessions_missing_steps"])
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
