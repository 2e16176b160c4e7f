"""Issue 61's hostile cases against one server and its command line, replayed (scripts/probe_hostile.py runs them;
hostile_rooms.py has the rooms' cases). Each case starts its own app (kvviz.ui.app_server.running_app, the bundled
model unless it says) and returns probe_hostile's row: the server's CPU seconds (user + system, from /proc), the
wall seconds, its peak resident memory above what it held just before the case, and PASS against the case's bound.

  r1   rerun flood: 6 websocket tabs send empty rerun requests (flood_reruns.flood) for 20 s while a teacher in
       Chromium presses Next token 8 times (flood_reruns.time_clicks). PASS: the teacher's median click <= 1 s
  r2   model links: 15 Chromium tabs open Prefill and decode links cycling bundled, tiny-gemma3, tiny-mla,
       smollm2 and gemma3 (those fetched here), each pressing Prefill, under KVVIZ_MEMORY_GIB=6 (this machine's
       default budget, 80% of 23 GiB, is no bound worth testing). PASS: the server's peak RSS stays within the
       budget and every tab ran or was refused in a sentence
  r6   the budget talked down: one session runs 16 cheap batches (1 prompt, 1-2 tokens), then another asks Batch
       generation for 64 prompts of 200-256 tokens each (minutes of this CPU; the issue's batch ran past 150 s), then
       for 16. PASS: each big click comes back within the click budget (KVVIZ_CLICK_SECONDS, 30 s) and 10 s, what it
       says (refused by the estimate, stopped by the clock) in a sentence
  r7   a 20 MB prompt sent over the websocket as the Prompt box's value, with Prefill (socket_tab).
       PASS: refused in a sentence, at most 1 CPU s and 500 MiB
  r10  the stage's report sent as a script would: {"step": -2}, a 5,000-digit step, non-JSON, [1,2], "abc",
       -100, Infinity, NaN, null, a bare 5,000-digit number and 100,000 nested brackets, each in a fresh session
       after Prefill, then Next token twice. PASS: no error or exception box, and every session still steps
  r11  `kvviz fetch smollm2` on a copy of the model's folder whose READY is unreadable bytes, and one whose READY
       is {}, with 8 bytes of model.safetensors zeroed. PASS: never "nothing to do": fetched again with the zeroed
       bytes restored, or (offline) refused in a sentence. CPU and memory are the command's own (os.wait4)
  r12  `kvviz generate --prompts` of a 4 MB file of 2,000,000 one-character lines. PASS: refused in a sentence
       within 10 CPU s and 1 GiB (the command's own, with its imports)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT), str(ROOT / "tests" / "support")]
from load_test import RssPeak, server_cpu_seconds, server_process  # noqa: E402
from app_tests import one_sentence  # noqa: E402
from socket_tab import SocketTab  # noqa: E402

from kvviz.ui.app_server import CHROMIUM, CHROMIUM_ARGS, running_app  # noqa: E402

ERRORS = "[data-testid='stAlertContentError']"
MiB = 2**20


class Measured:
    """The server's CPU seconds, wall seconds and peak RSS above idle from `start()` to `stop()`."""

    def __init__(self, port: int):
        self.port, self.meter = port, RssPeak(server_process(port) / "status")

    def start(self) -> Measured:
        self.idle = self.meter.start()
        self.cpu, self.started = server_cpu_seconds(self.port), time.perf_counter()
        return self

    def stop(self) -> dict:
        settle(self.port)  # work still running after the page looked idle counts too
        wall = time.perf_counter() - self.started
        return {"cpu_s": round(server_cpu_seconds(self.port) - self.cpu, 1), "wall_s": round(wall, 1),
                "rss_above_idle_mib": round((self.meter.stop() - self.idle) / MiB, 1),
                "idle_rss_mib": round(self.idle / MiB)}


def settle(port: int, most: float = 30.0, window: float = 0.5) -> None:
    """Wait until the server uses under 0.1 CPU s a second over a window."""
    deadline = time.time() + most
    while time.time() < deadline:
        before = server_cpu_seconds(port)
        time.sleep(window)
        if server_cpu_seconds(port) - before < 0.1 * window:
            return


def result(key: str, what: str, figures: dict, passed: bool, outcome: str, notes: list[str],
           exceptions: int = 0) -> dict:
    return {"case": key, "what": what, **figures, "exceptions": exceptions, "pass": bool(passed),
            "outcome": " ".join(outcome.split()) or "handled", "notes": "; ".join(notes)}


@contextlib.contextmanager
def served(env: dict[str, str] | None = None):
    """(url, port) of a fresh app on the bundled model unless `env` says, with Chromium beside it."""
    from playwright.sync_api import sync_playwright

    with running_app(env={"KVVIZ_DEFAULT_MODEL": "bundled", **(env or {})}) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield url, int(url.rsplit(":", 1)[1]), browser
        finally:
            browser.close()


def chromium_page(browser, url: str, timeout: float):
    page = browser.new_context(viewport={"width": 1280, "height": 720}).new_page()
    page.set_default_timeout(timeout * 1000)
    page.goto(url)
    return page


def prefilled(browser, url: str, timeout: float):
    """A teacher's Prefill and decode page, Prefill pressed."""
    page = chromium_page(browser, f"{url}/prefill_decode", timeout)
    page.get_by_role("button", name="Prefill", exact=True).click()
    page.locator("[data-testid='stage-step']").wait_for()
    page.wait_for_timeout(1000)
    return page


def in_thread(work) -> threading.Thread:
    """Run the coroutine function `work` on an event loop of its own, in a thread (the pages here are sync)."""
    thread = threading.Thread(target=lambda: asyncio.run(work()), daemon=True)
    thread.start()
    return thread


# ---- r1: the rerun flood ------------------------------------------------------------------------
def rerun_flood(timeout: float, tabs: int = 6, flood_s: float = 20.0, clicks: int = 8, rate: float = 0) -> dict:
    """`rate`: each tab's messages a second (0: as fast as its socket takes them, as the issue's script did)."""
    from flood_reruns import flood, time_clicks

    logging.getLogger("asyncio").setLevel(logging.CRITICAL)  # each socket the server closes: a reader's traceback
    with served() as (url, port, browser):
        teacher = prefilled(browser, url, timeout)
        quiet = time_clicks(teacher, 3)
        measured, own_cpu = Measured(port).start(), time.process_time()
        stop, sent, closed = threading.Event(), [0], [0]
        flooder = threading.Thread(target=flood, args=(url, tabs, stop, sent, closed, rate), daemon=True)
        flooder.start()
        time.sleep(2.0)  # the flood under way
        flooded = time_clicks(teacher, clicks)
        time.sleep(max(0.0, flood_s - (time.perf_counter() - measured.started)))
        stop.set()
        flooder.join(timeout=30)
        own_cpu = time.process_time() - own_cpu  # the flooding script's (and this one's), on the same cores
        figures = measured.stop()
    median = statistics.median(flooded)
    paced = f", {rate:g} messages a second each" if rate else ""
    return result("r1", f"rerun flood, {tabs} socket tabs for {flood_s:.0f} s{paced}", figures, median <= 1.0,
                  f"teacher's Next token during the flood: median {median:.2f} s, largest {max(flooded):.2f} s",
                  [f"quiet median {statistics.median(quiet):.2f} s", f"{sent[0]:,} rerun requests sent",
                   f"{closed[0]:,} sockets closed by the server", f"the flooding client used {own_cpu:.1f} CPU s"])


# ---- r2: links that load every model ----------------------------------------------------------------
def model_links(timeout: float, tabs: int = 15, budget_gib: float = 6.0) -> dict:
    from model_links_memory import rss_gib

    from kvviz.hub.fetch import PACKAGED, fetched_folder

    models = [m for m in ("gemma3", "bundled", "tiny-gemma3", "tiny-mla", "smollm2")
              if m not in PACKAGED or fetched_folder(m) is not None]
    notes, refused, ran = [f"KVVIZ_MEMORY_GIB={budget_gib:g}"], [], 0
    with served({"KVVIZ_MEMORY_GIB": str(budget_gib)}) as (url, port, browser):
        measured, pages, process = Measured(port).start(), [], server_process(port)
        for tab in range(tabs):
            page = chromium_page(browser, f"{url}/prefill_decode?model={models[tab % len(models)]}", timeout)
            page.get_by_role("button", name="Prefill", exact=True).click()
            page.locator(f"[data-testid='stage-step'], {ERRORS}").first.wait_for()
            errors = page.locator(ERRORS).all_inner_texts()
            refused += errors
            ran += not errors
            pages.append(page)
            if (tab + 1) % 5 == 0:
                notes.append(f"{rss_gib(process)} GiB after {tab + 1} tabs")
        for page in pages:
            page.context.close()
        figures = measured.stop()
        peak_gib = (figures["idle_rss_mib"] + figures["rss_above_idle_mib"]) / 1024
    sentences = all(one_sentence(text) for text in refused)
    notes.append(f"peak {peak_gib:.2f} GiB; {ran} tabs ran, {len(refused)} refused")
    return result("r2", f"{tabs} tabs on ?model= links cycling {len(models)} models", figures,
                  peak_gib <= budget_gib and sentences and ran + len(refused) == tabs,
                  " | ".join(sorted(set(refused))) or "every tab ran", notes)


# ---- r6: the budget talked down -------------------------------------------------------------------------------
def budget_talked_down(timeout: float, cheap: int = 16, budget_s: float = 30.0) -> dict:
    clicks: list[tuple[int, float, list[str]]] = []  # (prompts, seconds, what the page said)
    with served({"KVVIZ_CLICK_SECONDS": str(budget_s)}) as (url, port, _):
        async def batches() -> None:
            cheap_tab, big_tab = await SocketTab.open(url), await SocketTab.open(url)
            drawn = await cheap_tab.run("batch_generation", within_s=timeout)
            count, lengths = drawn.id_of("slider", "batch_count"), drawn.id_of("slider", "batch_output_len")
            prompts, run = drawn.id_of("slider", "batch_prompt_len"), drawn.id_of("button", "Run the batch")
            for _ in range(cheap):
                await cheap_tab.run("batch_generation", {count: [1], prompts: [1, 2], lengths: [1, 2], run: True},
                                    within_s=timeout)
            await big_tab.run("batch_generation", within_s=timeout)
            settle(port)
            measured.start()
            for size in (64, 16):  # the size, then one the estimate lets through
                started = time.perf_counter()
                drawn = await big_tab.run("batch_generation", {count: [size], lengths: [200, 256], run: True},
                                          within_s=timeout)
                clicks.append((size, time.perf_counter() - started, drawn.alerts("warning") + drawn.alerts("error")))
        measured = Measured(port)
        in_thread(batches).join(timeout * 4)
        figures = measured.stop()
    passed = len(clicks) == 2 and all(seconds <= budget_s + 10 and all(one_sentence(line) for line in said)
                                      for _, seconds, said in clicks)
    return result("r6", f"batches of 64 and 16 x 200-256 tokens after another session's {cheap} cheap ones", figures,
                  passed, " | ".join(f"{size} prompts, back after {seconds:.1f} s: {' '.join(said) or 'ran'}"
                                     for size, seconds, said in clicks) or "no click came back", [])


# ---- r7: a 20 MB prompt over the websocket -------------------------------------------------------------
def huge_prompt(timeout: float, megabytes: int = 20) -> dict:
    said: list = []
    with served() as (url, port, _):
        async def send() -> None:
            tab = await SocketTab.open(url)
            drawn = await tab.run("prefill_decode")
            prompt, prefill = drawn.id_of("text_area", "Prompt"), drawn.id_of("button", "Prefill")
            await asyncio.sleep(1.0)
            measured.start()
            said.append(await tab.run("prefill_decode", {prompt: "a" * (megabytes * 10**6), prefill: True},
                                      within_s=timeout))
            await tab.close()

        async def plain() -> None:  # what an ordinary Prefill of the default prompt costs this page, for scale
            tab = await SocketTab.open(url)
            drawn = await tab.run("prefill_decode")
            settle(port)
            before = server_cpu_seconds(port)
            await tab.run("prefill_decode", {drawn.id_of("button", "Prefill"): True}, within_s=timeout)
            settle(port)
            notes.append(f"an ordinary Prefill costs this page {server_cpu_seconds(port) - before:.1f} CPU s")
            await tab.close()
        measured, notes = Measured(port), []
        in_thread(send).join(timeout + 60)
        figures = measured.stop()
        in_thread(plain).join(timeout + 60)
    drawn = said[0]
    errors = drawn.alerts("error")
    passed = (len(errors) == 1 and one_sentence(errors[0]) and figures["cpu_s"] <= 1.0
              and figures["rss_above_idle_mib"] <= 500)
    return result("r7", f"a {megabytes} MB prompt over the websocket, with Prefill", figures, passed,
                  " | ".join(errors) or "no refusal", notes, drawn.exceptions)


# ---- r10: the stage's reports, as a script sends them ----------------------------------------------------
BAD_REPORTS = ['{"step": -2}', '{"step": ' + "9" * 5000 + "}", "not json", "[1, 2]", '"abc"', '{"step": -100}',
               '{"step": Infinity}', '{"step": NaN}', '{"step": null}', "9" * 5000, "[" * 100_000]


def stage_reports(timeout: float) -> dict:
    broken: list[str] = []
    with served() as (url, port, _):
        async def report(bad: str) -> None:
            tab = await SocketTab.open(url)
            drawn = await tab.run("prefill_decode")
            drawn = await tab.run("prefill_decode", {drawn.id_of("button", "Prefill"): True})
            stage, step = drawn.id_of("bidi_component", "lesson_stage"), drawn.id_of("button", "Next token")
            after = [await tab.run("prefill_decode", {"json:" + stage: bad})]
            after += [await tab.run("prefill_decode", {step: True}) for _ in range(2)]
            boxes = sum(d.exceptions + len(d.alerts("error")) for d in after)
            stepped = any(s.startswith("**Decode step 2.") for s in after[-1].alerts("success"))
            if boxes or not stepped:
                broken.append(f"{bad[:14]}{'...' if len(bad) > 14 else ''}: {boxes} error boxes, "
                              f"{'steps' if stepped else 'no longer steps'}")
            await tab.close()

        async def every() -> None:
            for bad in BAD_REPORTS:
                await asyncio.wait_for(report(bad), timeout)
        measured = Measured(port).start()
        in_thread(every).join(timeout * len(BAD_REPORTS))
        figures = measured.stop()
    return result("r10", f"{len(BAD_REPORTS)} bad stage reports, each in its own session", figures, not broken,
                  " | ".join(broken) or "every report ignored; every session still steps",
                  [f"{len(BAD_REPORTS) - len(broken)} of {len(BAD_REPORTS)} handled"])


# ---- r11, r12: the command line ------------------------------------------------------------------------
def command(args: list[str], env: dict[str, str] | None = None, within_s: float = 600) -> tuple[int, str, dict]:
    """Run `python -m kvviz ARGS`: (exit status, its output, its own CPU s, wall s and peak RSS in MiB)."""
    with tempfile.TemporaryFile() as output:
        started = time.perf_counter()
        process = subprocess.Popen([sys.executable, "-m", "kvviz", *args], cwd=ROOT, stdout=output,
                                   stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        timer = threading.Timer(within_s, process.kill)
        timer.start()
        _, status, usage = os.wait4(process.pid, 0)
        timer.cancel()
        process.returncode = os.waitstatus_to_exitcode(status)
        output.seek(0)
        text = output.read().decode(errors="replace")
    return process.returncode, text.strip(), {
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1), "wall_s": round(time.perf_counter() - started, 1),
        "rss_above_idle_mib": round(usage.ru_maxrss / 1024, 1), "idle_rss_mib": 0}


def last_line(text: str) -> str:
    return (text.splitlines() or [""])[-1][:400]


def fetch_broken_ready(timeout: float) -> dict:
    from kvviz.hub.fetch import fetched_folder

    source = fetched_folder("smollm2")
    if source is None:
        return result("r11", "kvviz fetch, READY broken", {"cpu_s": 0, "wall_s": 0, "rss_above_idle_mib": 0,
                      "idle_rss_mib": 0}, False, "smollm2 is not fetched here", [])
    rows, passed, totals = [], True, {"cpu_s": 0.0, "wall_s": 0.0, "rss_above_idle_mib": 0.0, "idle_rss_mib": 0}
    with tempfile.TemporaryDirectory(prefix="kvviz-probe-cache-") as cache:
        folder = Path(cache) / "models" / "smollm2"
        shutil.copytree(source, folder)  # a copy: the real cache is never touched
        for name, ready in (("unreadable READY", b"\xff\xfe\x00 not a READY"), ("READY {}", b"{}")):
            (folder / "READY").write_bytes(ready)
            with open(folder / "model.safetensors", "r+b") as weights:
                weights.seek(2**20)
                weights.write(bytes(8))
            status, text, figures = command(["fetch", "smollm2"], {"KVVIZ_CACHE_DIR": cache}, timeout)
            with open(folder / "model.safetensors", "rb") as weights, open(source / "model.safetensors", "rb") as kept:
                weights.seek(2**20)
                kept.seek(2**20)
                restored = weights.read(8) == kept.read(8)
            passed &= "nothing to do" not in text and (restored if status == 0 else one_sentence(last_line(text)))
            rows.append(f"{name}: exit {status}, {'weights restored' if restored else 'weights still zeroed'}, "
                        f"\"{last_line(text)[:120]}\"")
            for key in ("cpu_s", "wall_s"):
                totals[key] = round(totals[key] + figures[key], 1)
            totals["rss_above_idle_mib"] = max(totals["rss_above_idle_mib"], figures["rss_above_idle_mib"])
    return result("r11", "kvviz fetch smollm2: READY unreadable / {}, 8 bytes zeroed", totals, passed,
                  " | ".join(rows), ["CPU and wall: both runs; RSS: the command's peak, not above idle"])


def generate_two_million(timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="kvviz-probe-") as folder:
        prompts = Path(folder) / "many.txt"
        prompts.write_text("a\n" * 2_000_000)
        status, text, figures = command(["generate", "--model", "bundled", "--prompts", str(prompts),
                                         "--out", str(Path(folder) / "out.jsonl")], within_s=timeout)
    said = last_line(text)
    passed = (status != 0 and one_sentence(said) and "2,000,000" in said and figures["cpu_s"] <= 10
              and figures["rss_above_idle_mib"] <= 1024)
    return result("r12", "kvviz generate --prompts: 2,000,000 one-character lines (4 MB)", figures, passed,
                  f"exit {status}: \"{said}\"", ["RSS: the command's peak, not above idle"])


CASES = {"r1": rerun_flood, "r2": model_links, "r6": budget_talked_down, "r7": huge_prompt, "r10": stage_reports,
         "r11": fetch_broken_ready, "r12": generate_two_million}
