"""Teach the whole lecture in a real browser, as a teacher would, and time every click.

    python scripts/teach_lecture.py                  # starts the app, normal mode
    python scripts/teach_lecture.py --presenter      # the same in presenter mode (?presenter=1)
    python scripts/teach_lecture.py --pages 2        # only the first two pages of the lecture
    python scripts/teach_lecture.py --model smollm2  # from Prefill and decode on, on SmolLM2 (fetched)
    python scripts/teach_lecture.py --url http://127.0.0.1:8501   # an app that is already running
    python scripts/teach_lecture.py --contend 1      # beside one busy process, as on a shared server

The script starts the app (kvviz.ui.app_server.running_app) unless --url names one, opens Debian's
Chromium at a projector's 1280x720 and walks the pages of kvviz.lessons.lecture.LECTURE in order,
with every setting at its default, pressing each page's main controls: Prefill, Next token five
times, Play to the end and three views on Prefill and decode; three sliders on the Memory bill;
Measure in the Model lab; Start, Step three times and Run to the end on Paged cache and batching;
Start and Run to the end on Speculative decoding; Run the batch and Run both and compare on Batch
generation; Run every strategy and Run the eviction lab on Cache strategies; the home page, Putting
it together and the sources are only opened. It opens the first page by its address and every later
one with the page's own "Next: ..." link, as a teacher moves on.

Each click is timed from the click to the page being idle again: no script run (the element
[data-testid='stApp'] says data-test-script-state="notRunning", where a run says "running"), no message to
the server unanswered, nothing stale, no skeleton, for half a second (the ideas of
scripts/page_idle.py's BUSY_JS); the time is up to the start of that quiet half second. A
click that is not idle after --timeout seconds is recorded as "timeout" and the walk goes on; a
button that does not appear within a few seconds is "skipped". After each page's last click (and
after the key ones) a screenshot of the window goes to OUT/NN_page_click.png, and each click records
any traceback ([data-testid='stException']) the page shows.

A click whose progress bar or spinner says "Estimated about N s" records N beside its time, so a
run shows how the page's own estimates compare with what it measured.

At the end it prints a Markdown table (page, click, seconds from click to idle, its own estimate,
note), the total,
and the machine's load average at the start and the end, and writes the same to OUT/timings.json; it
exits with 1 when a click timed out or a page showed a traceback. OUT is --out (default
artifacts/lecture/) followed by normal/ or presenter/. Not part of CI: the whole lecture takes many
minutes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import sync_playwright

from kvviz.bench import busy_processes
from kvviz.lessons.prefill_decode.state import EXAMPLE_PROMPTS
from kvviz.lessons.lecture import LECTURE
from kvviz.ui.app_server import CHROMIUM, CHROMIUM_ARGS, ROOT, running_app

from page_idle import BUSY_JS, SENDS_JS  # noqa: E402  (scripts/, beside this file)

VIEWPORT = {"width": 1280, "height": 720}
FIND_S = 15.0  # how long a control may take to appear before it is skipped
SETTLE_S = 0.3  # a click counts as idle no sooner than this after it (its message may not be sent yet)
QUIET_S = 0.5  # idle means quiet for this long


# every text a progress bar or a spinner shows, kept as it changes: a bar says its estimate only until its
# first move, which can come within a tenth of a second
TEXTS_JS = """() => {
  if (window.__kvvizTexts) return;
  window.__kvvizTexts = [];
  const shown = "[data-testid='stProgress'], [data-testid='stSpinner']";
  const keep = () => document.querySelectorAll(shown).forEach((node) => {
    const text = node.innerText;
    if (window.__kvvizTexts[window.__kvvizTexts.length - 1] !== text) window.__kvvizTexts.push(text);
  });
  new MutationObserver(keep).observe(document.body, {subtree: true, childList: true, characterData: true});
}"""


REFUSAL = "[data-testid='stAlertContentError']"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:40]


class Teacher:
    """One browser page walking the lecture; every timed action appends a row to `rows`."""

    def __init__(self, page, url: str, out: Path, presenter: bool, timeout: float, model: str | None = None):
        self.page, self.url, self.out, self.presenter, self.timeout = page, url, out, presenter, timeout
        self.model = model
        self.rows: list[dict] = []
        self.number, self.lesson = 0, LECTURE[0]
        self.estimate: float | None = None  # the running click's own estimate, as its bar or spinner says it

    # ---- waiting --------------------------------------------------------------------------------
    def busy(self) -> bool:
        try:
            self.page.evaluate(SENDS_JS)
            self.page.evaluate(TEXTS_JS)
            return bool(self.page.evaluate(BUSY_JS))
        except PlaywrightError:  # the page is navigating: its context went away
            return True

    def read_estimate(self) -> None:
        """Keep the first "Estimated about N s" (or "estimated about") a progress bar or spinner shows."""
        if self.estimate is not None:
            return
        with contextlib.suppress(PlaywrightError):
            texts = self.page.evaluate("() => window.__kvvizTexts || []")
            for text in texts:
                found = re.search(r"[Ee]stimated about ([\d,.]+) s", text)
                if found:
                    self.estimate = float(found.group(1).replace(",", ""))
                    return

    def wait_idle(self, started: float) -> float | None:
        """Seconds from `started` to the start of the quiet stretch that ended the click's work, or
        None when the page was still busy `self.timeout` s after `started`."""
        quiet_since = None
        while True:
            now = time.perf_counter()
            self.read_estimate()
            if self.busy():
                quiet_since = None
            else:
                quiet_since = quiet_since or now
                if now - started >= SETTLE_S and now - quiet_since >= QUIET_S:
                    return quiet_since - started
            if now - started > self.timeout:
                return None
            time.sleep(0.1)

    # ---- recording ------------------------------------------------------------------------------
    def record(self, click: str, seconds: float | None, note: str = "", shot: bool = False) -> None:
        row = {"page": self.lesson.title, "key": self.lesson.key, "click": click,
               "seconds": None if seconds is None else round(seconds, 2), "estimate_s": self.estimate, "note": note}
        if seconds is not None or note.startswith("timeout"):
            errors = self.page.locator("[data-testid='stException']")
            with contextlib.suppress(PlaywrightError):
                if errors.count():
                    row["note"] = "; ".join(filter(None, [row["note"], f"exception ({errors.count()})"]))
                    row["exception"] = errors.first.inner_text(timeout=2000)[:600]
        if shot:
            path = self.out / f"{self.number:02d}_{self.lesson.key}_{slug(click)}.png"
            with contextlib.suppress(PlaywrightError):
                self.page.screenshot(path=str(path))
                row["screenshot"] = str(path)
        self.rows.append(row)
        seconds_text = "-" if row["seconds"] is None else f"{row['seconds']:.2f} s"
        print(f"  {self.lesson.key}: {click}: {seconds_text} {row['note']}", flush=True)

    def skip(self, click: str, why: str) -> None:
        self.record(click, None, f"skipped: {why}")

    def timed(self, click: str, act, until: str | None = None, shot: bool = False) -> bool:
        """Do `act` (a click or a key press) and time it to idle; `until`: a text (regular expression)
        the page shows once the work is done, waited for before idle (Play's end, a long run's result)."""
        self.busy()  # install the send marks before the click sends its message
        self.estimate = None
        with contextlib.suppress(PlaywrightError):
            self.page.evaluate("() => { if (window.__kvvizTexts) window.__kvvizTexts.length = 0; }")
        started = time.perf_counter()
        try:
            act()
        except PlaywrightError as error:
            self.skip(click, f"the action failed: {str(error).splitlines()[0][:120]}")
            return False
        if until is not None:  # the work's own result, or a refusal in a sentence
            done = self.page.get_by_text(re.compile(until)).or_(self.page.locator(REFUSAL)).first
            left = max(self.timeout - (time.perf_counter() - started), 1.0)
            try:
                done.wait_for(timeout=left * 1000)
            except PlaywrightError:
                self.record(click, None, f"timeout: no {until!r} after {self.timeout:.0f} s", shot=True)
                return False
        seconds = self.wait_idle(started)
        if seconds is None:
            self.record(click, None, f"timeout: still busy after {self.timeout:.0f} s", shot=True)
            return False
        self.record(click, seconds, self.refusal(), shot=shot)
        return True

    def refusal(self) -> str:
        """The sentence of an error box the page shows now (a click refused, past its budget), or ""."""
        with contextlib.suppress(PlaywrightError):
            boxes = self.page.locator(REFUSAL)
            if boxes.count():
                return "refused: " + " ".join(boxes.first.inner_text(timeout=2000).split())[:300]
        return ""

    def found(self, locator, click: str) -> bool:
        """Whether `locator` shows an enabled control within FIND_S; else record the click as skipped."""
        try:
            locator.wait_for(state="visible", timeout=FIND_S * 1000)
        except PlaywrightError:
            self.skip(click, f"not found within {FIND_S:.0f} s")
            return False
        if locator.is_disabled():
            self.skip(click, "disabled")
            return False
        return True

    # ---- what a teacher does ----------------------------------------------------------------------
    def press(self, name: str, click: str | None = None, until: str | None = None, shot: bool = False,
              starts: bool = False) -> bool:
        """Press the button called `name` (exactly; `starts`: its label starts with `name`, as a button
        with a keyboard shortcut's hint)."""
        label = re.compile("^" + re.escape(name)) if starts else name
        button = self.page.get_by_role("button", name=label, exact=not starts).first
        click = click or name
        return self.found(button, click) and self.timed(click, button.click, until, shot)

    def tab(self, name: str, shot: bool = False) -> bool:
        tab = self.page.get_by_role("tab", name=name, exact=True).first
        return self.found(tab, f"tab {name}") and self.timed(f"tab {name}", tab.click, shot=shot)

    def view(self, name: str, shot: bool = False) -> bool:
        """Pick `name` on the page's row of radio buttons."""
        option = self.page.locator("[data-testid='stRadio']").get_by_text(name, exact=True).first
        return self.found(option, f"view {name}") and self.timed(f"view {name}", option.click, shot=shot)

    def slide(self, name: str, shot: bool = False) -> bool:
        """Move the slider called `name` one notch right, with the keyboard."""
        # the range input's accessible name joins its own label to the group's, so match its aria-label
        slider = self.page.locator(f"input[type='range'][aria-label=\"{name}\"]").first
        click = f"slider {name} →"

        def move():
            slider.focus()
            slider.press("ArrowRight")

        return self.found(slider, click) and self.timed(click, move, shot=shot)

    def open(self, number: int) -> bool:
        """Open the lecture's page `number`: the first by its address, later ones by the previous page's
        "Next: ..." link (by the address when there is none)."""
        self.number, self.lesson = number, LECTURE[number]
        print(f"{number:02d} {self.lesson.title}", flush=True)
        link = self.page.get_by_role("link", name=re.compile(re.escape(f"Next: {self.lesson.title}"))).first
        if self.model and self.lesson.key == "prefill_decode":  # a link loads the model for the whole session
            query = {"model": self.model, "prompt": EXAMPLE_PROMPTS[0], **({"presenter": 1} if self.presenter else {})}
            address = f"{self.url}/prefill_decode?{urlencode(query)}"
            return self.timed(f"open (link with model={self.model})", lambda: self.page.goto(address))
        if number > 0 and link.count():
            return self.timed("open (Next link)", link.click)
        path = "" if self.lesson.key == LECTURE[0].key else self.lesson.key
        address = f"{self.url}/{path}" + ("?presenter=1" if self.presenter else "")
        return self.timed("open (address)", lambda: self.page.goto(address), until=None)

    def end_page(self) -> None:
        """A screenshot after the page's last click (unless that click took one already)."""
        last = self.rows[-1] if self.rows else None
        if last is None or last.get("screenshot") or last["key"] != self.lesson.key:
            return
        path = self.out / f"{self.number:02d}_{self.lesson.key}_{slug(last['click'])}.png"
        with contextlib.suppress(PlaywrightError):
            self.page.screenshot(path=str(path))
            last["screenshot"] = str(path)


# ---- each page's main controls, at their defaults (labels from lessons/<key>.py and kvviz/lessons/) ----
def prefill_decode(t: Teacher) -> None:
    if not t.press("Prefill", until=r"^Prefill\.", shot=True):
        return
    for n in range(1, 6):
        t.press("Next token", f"Next token {n}", starts=True, shot=n == 5)
    t.press("Play", "Play to the end", until=r"Done\.", starts=True, shot=True)
    for name in ("Keys and values", "Attention", "Memory bill"):
        t.view(name, shot=True)


def memory_bill(t: Teacher) -> None:
    for name in ("Context", "Batch", "GPUs (tensor parallel)"):
        t.slide(name, shot=True)


def model_lab(t: Teacher) -> None:
    t.press("Measure", shot=True)


def stepped_run(t: Teacher, steps: int) -> None:
    """Start, Step `steps` times, Run to the end: Paged cache and batching, Speculative decoding."""
    if not t.press("Start", shot=True):
        return
    for n in range(1, steps + 1):
        t.press("Step", f"Step {n}")
    t.press("Run to the end", shot=True)


def batch_generation(t: Teacher) -> None:
    if t.press("Run the batch", until="requests in", shot=True):
        t.tab("Against transformers generate")
        t.press("Run both and compare", shot=True)


def cache_strategies(t: Teacher) -> None:
    t.press("Run every strategy", until="^After the last step the full", shot=True)
    t.tab("Eviction lab")
    t.press("Run the eviction lab", shot=True)


PLANS = {
    "prefill_decode": prefill_decode,
    "memory_bill": memory_bill,
    "model_lab": model_lab,
    "paged_batching": lambda t: stepped_run(t, 3),
    "batch_generation": batch_generation,
    "cache_strategies": cache_strategies,
    "speculative": lambda t: stepped_run(t, 0),
}  # home, Putting it together and the sources: just opened


def teach(url: str, out: Path, presenter: bool, pages: int, timeout: float, rows: list[dict],
          model: str | None = None) -> None:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_context(viewport=VIEWPORT).new_page()
            page.set_default_timeout(60_000)
            teacher = Teacher(page, url, out, presenter, timeout, model)
            teacher.rows = rows  # filled as it goes, so an interrupted walk still reports
            for number in range(pages):
                if teacher.open(number):
                    PLANS.get(LECTURE[number].key, lambda t: None)(teacher)
                teacher.end_page()
        finally:
            browser.close()


def table(report: dict) -> str:
    lines = ["| page | click | seconds (click to idle) | its own estimate (s) | note |", "|---|---|---:|---:|---|"]
    for row in report["clicks"]:
        seconds = "" if row["seconds"] is None else f"{row['seconds']:.2f}"
        estimate = "" if row.get("estimate_s") is None else f"{row['estimate_s']:,.1f}"
        note = row["note"].replace("|", "/")
        lines.append(f"| {row['page']} | {row['click']} | {seconds} | {estimate} | {note} |")
    counts = (f"{report['timeouts']} timeouts, {report['skipped']} skipped, {report['refused']} refused, "
              f"{report['exceptions']} with exceptions")
    lines.append(f"| **total** | {report['timed_clicks']} timed clicks | **{report['total_s']:.2f}** | | {counts} |")
    start, end = report["load_average_start"], report["load_average_end"]
    mode = (f"Mode: {'presenter' if report['presenter'] else 'normal'}, {VIEWPORT['width']}x{VIEWPORT['height']}, "
            f"model: {report['model']}; busy processes beside it: {report.get('busy_processes', 0)}; "
            f"{report['pages']} pages in {report['wall_s']:.0f} s wall time.")
    load = (f"Load average (1, 5, 15 min) at start: {start[0]:.2f}, {start[1]:.2f}, {start[2]:.2f}; "
            f"at end: {end[0]:.2f}, {end[1]:.2f}, {end[2]:.2f} ({os.cpu_count()} CPUs).")
    return "\n".join([*lines, "", mode, load])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presenter", action="store_true", help="open the lecture with ?presenter=1")
    parser.add_argument("--out", type=Path, default=ROOT / "artifacts" / "lecture",
                        help="screenshots and timings.json go to OUT/normal or OUT/presenter")
    parser.add_argument("--url", help="an app already running (else the script starts one)")
    parser.add_argument("--pages", type=int, default=len(LECTURE),
                        help=f"only the first N pages of the lecture (1 to {len(LECTURE)})")
    parser.add_argument("--timeout", type=float, default=400.0, help="seconds a click may take before 'timeout'")
    parser.add_argument("--model", help="the model to teach on from Prefill and decode on (a link's model=, e.g. "
                                        "smollm2); default: the app's own (SmolLM2 once fetched, else bundled)")
    parser.add_argument("--contend", type=int, default=0, metavar="N",
                        help="N busy processes (python -c 'while True: pass') run beside the lecture, as other work "
                             "on a shared classroom server (kvviz.bench.busy_processes)")
    args = parser.parse_args()
    if not 0 <= args.contend <= 16:
        parser.error("--contend must be 0 to 16")
    if not 1 <= args.pages <= len(LECTURE):
        parser.error(f"--pages must be 1 to {len(LECTURE)}")
    out = args.out / ((f"{args.model}_" if args.model else "") + (f"contend{args.contend}_" if args.contend else "")
                      + ("presenter" if args.presenter else "normal"))
    out.mkdir(parents=True, exist_ok=True)
    (ROOT / "artifacts").mkdir(exist_ok=True)  # running_app writes the server's log there

    rows: list[dict] = []
    load_start, started = os.getloadavg(), time.perf_counter()
    try:
        with busy_processes(args.contend):
            if args.url:
                teach(args.url.rstrip("/"), out, args.presenter, args.pages, args.timeout, rows, args.model)
            else:
                with running_app() as url:
                    teach(url, out, args.presenter, args.pages, args.timeout, rows, args.model)
    finally:  # an interrupted walk still reports what it timed
        timed = [row for row in rows if row["seconds"] is not None]
        report = {
            "url": args.url or "started by the script", "presenter": args.presenter, "viewport": VIEWPORT,
            "model": args.model or "the app's default", "busy_processes": args.contend,
            "pages": args.pages, "timeout_s": args.timeout,
            "load_average_start": load_start, "load_average_end": os.getloadavg(),
            "wall_s": round(time.perf_counter() - started, 1),
            "total_s": round(sum(row["seconds"] for row in timed), 2), "timed_clicks": len(timed),
            "timeouts": sum(row["note"].startswith("timeout") for row in rows),
            "skipped": sum(row["note"].startswith("skipped") for row in rows),
            "refused": sum(row["note"].startswith("refused") for row in rows),
            "exceptions": sum("exception" in row for row in rows),
            "clicks": rows,
        }
        (out / "timings.json").write_text(json.dumps(report, indent=2))
        print()
        print(table(report))
        print(f"\nScreenshots and timings.json in {out}")
    return 1 if report["timeouts"] or report["exceptions"] else 0


if __name__ == "__main__":
    sys.exit(main())
