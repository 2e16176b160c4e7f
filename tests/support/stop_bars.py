"""Stop in the browser: a long click's own Stop button and progress bars, and pressing Stop mid-run with the
page and the server's process timed until both are idle (tests/browser/test_browser_stop.py and
test_browser_strategies_stop.py)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from playwright.sync_api import expect

from chromium import run_finished

ONE_UNIT_S = 45  # the longest unit seen here under a load of 11 on 2 cores: 22 s (a context length), 15 s (a run)


def stop_button(page, key: str):
    """The page's own Stop button (Streamlit's status widget has one too, for the whole script)."""
    return page.locator(f".st-key-{key}").get_by_role("button", name=re.compile("Stop$"))


def says(page, pattern: str) -> bool:
    """Whether the page's main area shows text matching `pattern`."""
    return re.search(pattern, page.locator("[data-testid='stMain']").inner_text()) is not None


BAR_RECORDER = """() => {
    if (window.kvvizBars) return;
    window.kvvizBars = [];
    const record = () => document.querySelectorAll("[data-testid='stProgress']").forEach(bar => {
        const text = bar.innerText;
        if (window.kvvizBars[window.kvvizBars.length - 1] !== text) window.kvvizBars.push(text);
    });
    new MutationObserver(record).observe(document.body, {subtree: true, childList: true, characterData: true});
}"""


def record_bars(page) -> None:
    """From now on, keep every text the page's progress bars show (for wait_for_bar(seen=True)): a phase
    of a run can pass in under a poll on a quiet machine (the strategies' reference run takes 0.08 s)."""
    page.evaluate(BAR_RECORDER)


# whether a progress bar says `pattern` now or said it since record_bars, or an error sentence shows instead
SEEN_OR_ERROR_JS = """(pattern) => { const said = new RegExp(pattern);
    const bars = [...document.querySelectorAll("[data-testid='stProgress']")].map(bar => bar.innerText);
    return [...(window.kvvizBars || []), ...bars].some(text => said.test(text))
        || document.querySelector("[data-testid='stAlertContentError']") !== null; }"""


def wait_for_bar(page, pattern: str, timeout: float = 180.0, seen: bool = False) -> None:
    """Wait for a progress bar whose text matches `pattern`; with seen, a text shown since record_bars counts
    (Playwright waits on the texts kept in the page then, as one that has gone is on the page no more). An
    error sentence in the bar's place ends the wait: the test fails, saying what the page said. Playwright's
    wait_for, which sees the bar the frame it is drawn: the tests press Stop while the bar still counts, and
    expect's 0.5 s polls once let a warm Model lab run end before Stop was pressed (a clean-clone run)."""
    errors = page.locator("[data-testid='stAlertContentError']")
    if seen:
        page.wait_for_function(SEEN_OR_ERROR_JS, arg=pattern, timeout=timeout * 1000)
    else:
        bar = page.locator("[data-testid='stProgress']").filter(has_text=re.compile(pattern))
        bar.or_(errors).first.wait_for(timeout=timeout * 1000)
    assert errors.count() == 0, f"the page said {errors.first.inner_text()!r} where a bar should say {pattern!r}"


def server_cpu_s(url: str) -> float:
    """CPU seconds the app's server process (started by the fixture, on this port) has used."""
    port = url.rsplit(":", 1)[1].encode()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
            if b"streamlit" in b" ".join(args) and port in args:
                fields = (cmdline.parent / "stat").read_text().rsplit(")", 1)[1].split()
                return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
        except OSError:
            continue
    raise LookupError(f"no streamlit process on port {port.decode()}")


def stop_and_time(page, app_url: str, key: str, stopped_text: str) -> tuple[float, float]:
    """Press Stop; return the seconds until the page says it stopped and no script run is left, and
    until the server's work has ended too (its process using under a third of a core over a second):
    the stopped run's thread finishes the unit it is in, then stops at its next progress call."""
    started = time.perf_counter()
    stop_button(page, key).click()
    # the run after Stop draws the sentence (the stopped run never does), then no script run is left: Streamlit
    # marks its app element (it shows no status widget here)
    expect(page.get_by_test_id("stMain"), "the script run went on after Stop").to_contain_text(
        re.compile(stopped_text), timeout=ONE_UNIT_S * 1000)
    left_s = ONE_UNIT_S - (time.perf_counter() - started)
    expect(page.locator("[data-testid='stApp'][data-test-script-state='running']"),
           "the script run went on after Stop").to_have_count(0, timeout=max(left_s, 0.001) * 1000)
    idle_s = time.perf_counter() - started
    assert idle_s < ONE_UNIT_S, "the script run went on after Stop"
    while True:  # the server's own CPU time, which no page shows: read from /proc over one second at a time
        before = server_cpu_s(app_url)
        time.sleep(1.0)
        if server_cpu_s(app_url) - before < 0.33:
            return idle_s, time.perf_counter() - started - 1.0
        assert time.perf_counter() - started < ONE_UNIT_S, "the server kept working after Stop"


def stop_mid_run(page, app_url: str, key: str, bar_text: str, stopped_text: str, what: str) -> None:
    """Wait for the Stop button `key` and for the bar to say `bar_text`, press Stop, and check that the
    page and the server go idle within one unit, with the page saying `stopped_text` and no bar or Stop left."""
    stop_button(page, key).wait_for(timeout=30_000)
    wait_for_bar(page, bar_text)
    idle_s, ended_s = stop_and_time(page, app_url, key, stopped_text)
    print(f"{what}: {idle_s:.1f} s from Stop to an idle page, {ended_s:.1f} s to an idle server")
    run_finished(page)  # the run that drew the stopped sentence (stop_and_time waited for it) has drawn everything
    assert stop_button(page, key).count() == 0
    assert page.locator("[data-testid='stProgress']").count() == 0
