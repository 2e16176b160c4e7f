"""Issues 35 and 61's probe: replay hostile inputs against a running app and measure what each costs the server.

    python scripts/probe_hostile.py                   # every case
    python scripts/probe_hostile.py --cases 1b,2,3    # some of them
    python scripts/probe_hostile.py --cases r1,r9     # issue 61's (round five), below

It starts the app (kvviz.ui.app_server.running_app), opens each case's page in Debian's Chromium
with Playwright, does the hostile thing (uploads a crafted lesson file, opens a crafted link, runs
the Eviction lab at its largest) and waits for the page to settle. Per case it prints the server's
CPU seconds (user + system, from /proc), the wall seconds, the server's peak resident memory above
what it held just before the case (VmRSS sampled every 0.2 s) and the outcome: the sentence the page
showed, or "handled". A case passes when it was refused in a sentence or handled within 30 s of CPU
and 500 MiB above idle (issue 35's Done when), with no exception box and, for the link, no element
pointing at the link's address. Every case is bounded by --timeout, so the script always ends.

Cases (the crafted files are built here, the way tests/lessons/test_lesson_file_bounds.py builds them):
  1   a Paged cache lesson file of 2,000 records
  1b  a ~3 KiB Paged file whose layer group lists 256 layers and a pool of 1,000,000 blocks
  2   a Prefill and decode link whose view and tokens are markdown: an image and a link to kvviz.invalid
  3   a Prefill and decode file with block_size 1024 and 4,096 blocks
  4   a Prefill and decode file with room_answers at their limits (files.MAX_ROOM_QUESTIONS x MAX_ROOM_ANSWERS)
  7   a link to step 255 with a 250-token prompt (bundled model)
  9   a link whose step is 4,000 nines (issue 51: it once cost 23-126 CPU s)
  S   a Speculative decoding file whose passes' cached tokens climb to 13,000,000 (issue 51: 1.1 GB once)
  E   Cache strategies' Eviction lab with a 380-token prompt and 128 tokens to generate

Issue 61's cases (round five), r1-r12, each on a fresh app of its own, the hostile side a script's websocket
sessions (socket_tab.py) where the issue's student used one: r1, r2, r6, r7, r10, r11, r12 are in hostile_server.py,
r3, r4, r5, r8 and r9 in hostile_rooms.py, each with its bound (PASS) and the sizes it runs at on a 2-core machine.
Their rows are the same: the server's CPU seconds, wall seconds, peak RSS above idle; r11 and r12 measure the
command itself (os.wait4), whose RSS is its whole peak. The minor items are not replayed here: the uploads'
megabytes of 10**6 bytes (tests/pages/test_page_budgets.py), a tokenizer that needs remote code
(tests/core/test_input_limits.py); KVVIZ_MODELS=bundled admits the fetched smollm2 and gemma3 by design
(docs/serving.md), their memory bounded by the budget (r2).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # load_test's helpers; the app of this checkout, not an installed one
from load_test import RssPeak, server_cpu_seconds, server_process, shown_step, wait_idle  # noqa: E402

from kvviz.ui.app_server import CHROMIUM, CHROMIUM_ARGS, running_app  # noqa: E402

CPU_BOUND_S, RSS_BOUND_MIB = 30.0, 500.0  # issue 35's Done when
HOST = "kvviz.invalid"
IMAGE, LINK = f"![a](http://{HOST}/x)", f"[CLICK ME](http://{HOST}/y)"
POINTING = f"""() => [...document.querySelectorAll('*')]
    .filter(e => ['href', 'src', 'srcset', 'xlink:href', 'data']
      .some(a => (e.getAttribute(a) || '').includes('{HOST}')))
    .length"""
ERRORS = "[data-testid='stAlertContentError']"


# ---- the crafted files ------------------------------------------------------------------------
def bundled_model():
    from kvviz import load_model

    return load_model("bundled")


def paged_run(lm):
    from kvviz.lessons.paged_batching.logic import DEFAULT_REQUESTS, PagedLesson, RequestSpec

    lesson = PagedLesson.start(lm, [RequestSpec(*r) for r in DEFAULT_REQUESTS], 8, 12, True)
    while lesson.step() is not None:
        pass
    return lesson


def paged_2000_records(lm) -> str:
    from kvviz.lessons.paged_batching.file import MAX_BLOCKS, export_paged

    data = json.loads(export_paged(paged_run(lm), 0))
    data["settings"]["num_blocks"] = MAX_BLOCKS
    last = data["records"][-1]
    data["records"] += [dict(copy.deepcopy(last), step=i, events=[]) for i in range(len(data["records"]), 2000)]
    data["texts"] += [data["texts"][-1]] * (2000 - len(data["texts"]))
    return json.dumps(data)


def paged_million_blocks(lm) -> str:
    from kvviz.lessons.paged_batching.file import MAX_BLOCKS, export_paged

    data = json.loads(export_paged(paged_run(lm), 0))
    data["records"], data["texts"], data["settings"]["num_blocks"] = data["records"][:1], data["texts"][:1], MAX_BLOCKS
    data["records"][0]["layer_groups"] = [{"name": "full", "window": None, "layers": list(range(256)),
                                           "num_blocks": 1_000_000, "num_free_blocks": 0, "num_cached_blocks": 0}]
    for state in data["records"][0]["requests"]:
        state["group_block_tables"] = [state["block_table"]]
    return json.dumps(data)


def speculative_13m_tokens(lm) -> str:
    from kvviz.lessons.speculative.file import export_speculative
    from kvviz.lessons.speculative.logic import DEFAULT_PROMPT, SpeculativeLesson

    lesson = SpeculativeLesson.start(lm, DEFAULT_PROMPT, 4, 24, 4)
    while lesson.step():
        pass
    data = json.loads(export_speculative(lesson, 0))
    for index, record in enumerate(data["records"]):  # each pass claims a million more cached tokens
        record["requests"][0]["num_computed_tokens"] = 1_000_000 * (index + 1)
    return json.dumps(data)


def prefill_data(lm) -> dict:
    from kvviz.lessons.prefill_decode.file import export_lesson
    from kvviz.lessons.prefill_decode.logic import PrefillLesson, LessonSettings, lesson_sampling

    lesson = PrefillLesson.start(lm, LessonSettings(prompt="ROMEO:", sampling=lesson_sampling(max_tokens=2)))
    lesson.prefill()
    lesson.next_token()
    return json.loads(export_lesson(lesson))


def prefill_huge_pool(lm) -> str:
    data = prefill_data(lm)
    data["settings"]["block_size"] = 1024
    for record in data["records"] + data["twin_records"]:
        record["memory"]["allocated_bytes"] = record["memory"]["bytes_per_token"] * 1024 * 4096
    return json.dumps(data)


def prefill_room_answers(lm) -> str:
    from kvviz.lessons.files import MAX_ROOM_ANSWERS, MAX_ROOM_QUESTIONS

    data = prefill_data(lm)
    answers = [float(i) for i in range(MAX_ROOM_ANSWERS)]
    data["room_answers"] = [{"room": "K7QW2M", "question": f"How many bytes does step 1 hold? ({i})", "unit": "bytes",
                             "step": 1, "engine": 500.0, "answers": answers, "exact": False}
                            for i in range(MAX_ROOM_QUESTIONS)]
    return json.dumps(data)


def prompt_of(lm, tokens: int) -> str:
    """Text of about `tokens` tokens on `lm`'s tokenizer (Shakespeare-ish lines, trimmed by whole words)."""
    words = ("ROMEO:\nBut soft, what light through yonder window breaks? It is the east, and Juliet is the sun. "
             "Arise, fair sun, and kill the envious moon, who is already sick and pale with grief. ").split(" ")
    text = ""
    for i in range(4 * tokens):
        longer = (text + " " + words[i % len(words)]) if text else words[0]
        if len(lm.tokenizer(longer)["input_ids"]) > tokens:
            break
        text = longer
    return text


# ---- the cases --------------------------------------------------------------------------------
async def open_page(browser, url: str, path: str, ready: str):
    context = await browser.new_context(viewport={"width": 1400, "height": 1000})
    page = await context.new_page()
    page.set_default_timeout(300_000)
    await page.goto(f"{url}/{path}")
    await page.get_by_role("button", name=ready, exact=True).first.wait_for()
    await wait_idle(page)
    return context, page


CASES = {  # key: (what, page, its ready button, the crafted file's builder or None)
    "1": ("Paged file, 2,000 records", "paged_batching", "Start", paged_2000_records),
    "1b": ("Paged file, 256 layers x 1,000,000 blocks", "paged_batching", "Start", paged_million_blocks),
    "2": ("Prefill link, markdown view and tokens", "prefill_decode", "Prefill", None),
    "3": ("Prefill file, block_size 1024 x 4,096 blocks", "prefill_decode", "Prefill", prefill_huge_pool),
    "4": ("Prefill file, room_answers at the limits", "prefill_decode", "Prefill", prefill_room_answers),
    "7": ("Prefill link, 250-token prompt to step 255", "prefill_decode", "Prefill", None),
    "E": ("Eviction lab, 380 prompt + 128 tokens", "cache_strategies", "Run every strategy", None),
    "9": ("Prefill link, step of 4,000 nines", "prefill_decode", "Prefill", None),
    "S": ("Speculative file, 13M cached tokens", "speculative", "Start", speculative_13m_tokens),
}
LINKS = ("2", "7", "9")  # a link's case is the page opening


async def run_case(key: str, browser, url: str, lm, meter: RssPeak, port: int, timeout: float) -> dict:
    what, path, ready, build = CASES[key]
    text = build(lm) if build else None
    notes: list[str] = []
    context, page = None, None
    if key not in LINKS:  # the others act on an open page
        context, page = await open_page(browser, url, path, ready)
        if text is not None:
            await page.get_by_text("Export or replay a lesson").click()
            await wait_idle(page)
            saved = Path(tempfile.gettempdir()) / f"kvviz-probe-{key}.json"
            saved.write_text(text, encoding="utf-8")
            notes.append(f"{len(text) / 1024:,.0f} KiB file")
        elif key == "E":
            prompt = prompt_of(lm, 380)
            notes.append(f"{len(lm.tokenizer(prompt)['input_ids'])} prompt tokens")
            box = page.get_by_label("Prompt", exact=True)
            await box.fill(prompt)
            await box.press("Control+Enter")
            await wait_idle(page)
            tokens = (page.locator("[data-testid='stSlider']").filter(has_text="Tokens to generate")
                      .get_by_role("slider"))
            await tokens.focus()
            await tokens.press("End")
            await wait_idle(page)
            value = page.locator("[data-testid='stSlider']").filter(has_text="Tokens to generate")
            chosen = await value.locator("[data-testid='stSliderThumbValue']").inner_text()
            notes.append(f"{chosen} tokens to generate")
            await page.get_by_role("tab", name="Eviction lab").click()
            await page.get_by_role("button", name="Run the eviction lab").wait_for()
            await wait_idle(page)
    idle = meter.start()
    cpu_before, started = server_cpu_seconds(port), time.perf_counter()
    outcome, timed_out = "handled", False

    async def act():
        nonlocal context, page
        if key in LINKS:
            context = await browser.new_context(viewport={"width": 1400, "height": 1000})
            page = await context.new_page()
            page.set_default_timeout(300_000)
            if key == "2":
                query = {"prompt": "ROMEO:", "step": "0", "view": IMAGE, "tokens": LINK}
            elif key == "9":
                query = {"prompt": "ROMEO:", "step": "9" * 4000}
            else:
                prompt = prompt_of(lm, 250)
                notes.append(f"{len(lm.tokenizer(prompt)['input_ids'])} prompt tokens")
                query = {"prompt": prompt, "step": "255"}
            await page.goto(f"{url}/{path}?{urlencode(query)}")
            await page.locator("[data-testid='stButton']").first.wait_for()
            while await page.locator(ERRORS).count() == 0 and not await shown_step(page):
                await asyncio.sleep(0.2)  # the link's lesson runs to its step before the page shows one
        elif text is not None:
            await page.locator("[data-testid='stFileUploaderDropzoneInput']").set_input_files(
                str(Path(tempfile.gettempdir()) / f"kvviz-probe-{key}.json"))
            await page.locator(ERRORS).or_(page.get_by_text(re.compile("Replaying a recorded"))).first.wait_for()
        else:
            await page.get_by_role("button", name="Run the eviction lab").click()
            await asyncio.sleep(1.0)  # the run starts
        await wait_idle(page, timeout)
        if key in LINKS:
            notes.append(f"page shows step {await shown_step(page)}")
        if key == "4" and await page.locator(ERRORS).count() == 0:  # draw the answers' charts, then one more rerun
            await page.get_by_text("The room's answers (").first.click()
            await wait_idle(page, timeout)
            await page.locator("[data-testid='stRadio']").get_by_text("Cache per layer", exact=True).first.click()
            await wait_idle(page, timeout)
            notes.append("answers opened + 1 rerun")

    try:
        await asyncio.wait_for(act(), timeout)
    except (asyncio.TimeoutError, TimeoutError):
        outcome, timed_out = f"still busy after {timeout:.0f} s", True
    wall = time.perf_counter() - started
    await settle(port, 30.0)  # work still running after the page looked idle counts too
    cpu = server_cpu_seconds(port) - cpu_before
    peak = meter.stop()
    exceptions = pointing = 0
    if page is not None and not timed_out:
        errors = page.locator(ERRORS)
        shown = [(await errors.nth(i).inner_text()).strip() for i in range(await errors.count())]
        outcome = " | ".join(shown) if shown else "handled"
        exceptions = await page.locator("[data-testid='stException']").count()
        for frame in page.frames:
            pointing += await frame.evaluate(POINTING)
        if key == "2":
            notes.append(f"{pointing} elements point at {HOST}")
    if page is not None and Path("artifacts").is_dir():
        await page.screenshot(path=f"artifacts/probe_{key}.png", full_page=True)
    if context is not None:
        await context.close()
    rss_above = (peak - idle) / 2**20
    passed = not timed_out and cpu <= CPU_BOUND_S and rss_above <= RSS_BOUND_MIB and not exceptions and not pointing
    return {"case": key, "what": what, "cpu_s": round(cpu, 1), "wall_s": round(wall, 1),
            "rss_above_idle_mib": round(rss_above, 1), "idle_rss_mib": round(idle / 2**20), "exceptions": exceptions,
            "pass": passed, "outcome": outcome.replace("\n", " "), "notes": "; ".join(notes)}


async def settle(port: int, most: float = 60.0, window: float = 0.5) -> None:
    """Wait until the server uses under 0.1 CPU s a second over a window (a timed-out case may still be
    running; a step of work on the bundled model takes a whole core for far longer than the window)."""
    deadline = time.time() + most
    while time.time() < deadline:
        before = server_cpu_seconds(port)
        await asyncio.sleep(window)
        if server_cpu_seconds(port) - before < 0.1 * window:
            return


async def probe(keys: list[str], timeout: float) -> list[dict]:
    from playwright.async_api import async_playwright

    os.environ.setdefault("KVVIZ_DEFAULT_MODEL", "bundled")  # the cases are sized on the bundled model
    lm = bundled_model()
    results = []
    with running_app() as url:
        port = int(url.rsplit(":", 1)[1])
        meter = RssPeak(server_process(port) / "status")
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            context, _ = await open_page(browser, url, "prefill_decode", "Prefill")  # the server loads the model
            await context.close()
            for key in keys:
                await settle(port)
                results.append(await run_case(key, browser, url, lm, meter, port, timeout))
                print(row(results[-1]), flush=True)
            await browser.close()
    return results


HEADER = (f"| case | what | CPU s | wall s | peak RSS above idle (MiB) "
          f"| PASS (1-9: ≤{CPU_BOUND_S:.0f} s, ≤{RSS_BOUND_MIB:.0f} MiB; r: the case's bound) | outcome |")


def row(r: dict) -> str:
    outcome = r["outcome"][:300] + (f" ({r['notes']})" if r["notes"] else "")
    if r["exceptions"]:
        outcome += f" [{r['exceptions']} exception boxes]"
    return (f"| {r['case']} | {r['what']} | {r['cpu_s']} | {r['wall_s']} | {r['rss_above_idle_mib']} | "
            f"{'PASS' if r['pass'] else 'FAIL'} | {outcome.replace('|', '/')} |")


def round_five() -> dict:
    """Issue 61's cases: key -> the function that runs one and returns its row."""
    import hostile_rooms
    import hostile_server

    cases = {**hostile_server.CASES, **hostile_rooms.CASES}
    return {key: cases[key] for key in sorted(cases, key=lambda key: int(key[1:]))}


def run_round_five(key: str, timeout: float) -> dict:
    """One of issue 61's cases; a case that fails to run is a FAIL row saying why."""
    try:
        return round_five()[key](timeout)
    except Exception as error:  # the row says what broke; the other cases still run
        return {"case": key, "what": round_five()[key].__name__, "cpu_s": "-", "wall_s": "-",
                "rss_above_idle_mib": "-", "idle_rss_mib": "-", "exceptions": 0, "pass": False,
                "outcome": f"the case did not run: {type(error).__name__}: {' '.join(str(error).split())[:300]}",
                "notes": ""}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    every = [*CASES, *round_five()]
    parser.add_argument("--cases", default=",".join(every), help=f"comma-separated, of {', '.join(every)}")
    parser.add_argument("--timeout", type=float, default=240.0, help="give up on a case after this many seconds")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    keys = [k.strip() for k in args.cases.split(",") if k.strip()]
    unknown = [k for k in keys if k not in every]
    if unknown or not keys:
        parser.error(f"unknown case {', '.join(unknown) or '(none)'}; use some of {', '.join(every)}")
    print(HEADER)
    print("|---|---|---|---|---|---|---|", flush=True)
    old = [k for k in keys if k in CASES]
    results = asyncio.run(probe(old, args.timeout)) if old else []
    for key in (k for k in keys if k not in CASES):  # each on an app of its own, after the shared app's cases
        results.append(run_round_five(key, args.timeout))
        print(row(results[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0 if all(r["pass"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
