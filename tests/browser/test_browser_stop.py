"""Stop in a real browser (issue 25): Model lab's Measure, Batch generation's "Run the batch" and its
"Run both and compare" each show a progress bar and a Stop button while they run; pressing Stop
ends the script run within one unit of work (one context length, one engine step, one timed run),
says how far it got, and leaves the page able to start again."""

import os
import re
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

# the same browser, app and skip rule as the other browser tests (pytest registers imported fixtures)
from test_browser import app_url, no_exceptions, page, pytestmark  # noqa: F401

from chromium import click_to_next_step, open_tab, run_finished, screenshot, stage_caption, wait_drawn

ONE_UNIT_S = 45  # the longest unit seen here under a load of 11 on 2 cores: 22 s (a context length), 15 s (a run)


def stop_button(page, key: str):  # noqa: F811 (the fixture)
    """The page's own Stop button (Streamlit's status widget has one too, for the whole script)."""
    return page.locator(f".st-key-{key}").get_by_role("button", name=re.compile("Stop$"))


def says(page, pattern: str) -> bool:  # noqa: F811 (the fixture)
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


def record_bars(page) -> None:  # noqa: F811 (the fixture)
    """From now on, keep every text the page's progress bars show (for wait_for_bar(seen=True)): a phase
    of a run can pass in under a poll on a quiet machine (the strategies' reference run takes 0.08 s)."""
    page.evaluate(BAR_RECORDER)


# whether a progress bar says `pattern` now or said it since record_bars, or an error sentence shows instead
SEEN_OR_ERROR_JS = """(pattern) => { const said = new RegExp(pattern);
    const bars = [...document.querySelectorAll("[data-testid='stProgress']")].map(bar => bar.innerText);
    return [...(window.kvvizBars || []), ...bars].some(text => said.test(text))
        || document.querySelector("[data-testid='stAlertContentError']") !== null; }"""


def wait_for_bar(page, pattern: str, timeout: float = 180.0, seen: bool = False) -> None:  # noqa: F811
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


def stop_and_time(page, app_url: str, key: str, stopped_text: str) -> tuple[float, float]:  # noqa: F811
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


def stop_mid_run(page, app_url: str, key: str, bar_text: str, stopped_text: str, what: str) -> None:  # noqa: F811
    """Wait for the Stop button `key` and for the bar to say `bar_text`, press Stop, and check that the
    page and the server go idle within one unit, with the page saying `stopped_text` and no bar or Stop left."""
    stop_button(page, key).wait_for(timeout=30_000)
    wait_for_bar(page, bar_text)
    idle_s, ended_s = stop_and_time(page, app_url, key, stopped_text)
    print(f"{what}: {idle_s:.1f} s from Stop to an idle page, {ended_s:.1f} s to an idle server")
    run_finished(page)  # the run that drew the stopped sentence (stop_and_time waited for it) has drawn everything
    assert stop_button(page, key).count() == 0
    assert page.locator("[data-testid='stProgress']").count() == 0


def test_model_lab_measure_stops_keeps_what_was_timed_and_measures_again(app_url, page):  # noqa: F811 (the fixture)
    page.goto(f"{app_url}/model_lab")
    wait_drawn(page, page.get_by_role("button", name="Measure"))
    # the default shape, 4 layers of 256, to 512 tokens: five rounds over six context lengths
    page.get_by_role("button", name="Measure").click()
    stop_mid_run(page, app_url, "lab_stop", r"\b[1-4] of 5 rounds done", r"Stopped after [1-4] of 5 rounds",
                 "Model lab")
    assert page.get_by_text("With the cache", exact=True).count() >= 1  # the lengths timed are shown
    assert not says(page, "Set a size and press")  # not the empty page
    no_exceptions(page)
    screenshot(page, "model_lab_stopped")

    # the session is usable: Measure runs again, and its Stop works again
    page.get_by_role("button", name="Measure").click()
    wait_for_bar(page, r"rounds done", timeout=60)
    assert stop_button(page, "lab_stop").is_visible()
    stop_mid_run(page, app_url, "lab_stop", r"\b[1-4] of 5 rounds done", r"Stopped after [1-4] of 5 rounds",
                 "Model lab, second Stop")
    no_exceptions(page)


def test_batch_compare_stops_keeps_nothing_and_compares_again(app_url, page):  # noqa: F811 (the fixture)
    page.goto(f"{app_url}/batch_generation")
    wait_drawn(page, page.get_by_role("button", name="Run the batch"))
    page.get_by_role("button", name="Run the batch").click()  # the default 16 requests
    wait_drawn(page, page.get_by_text("requests in").first, timeout=180)
    open_tab(page, "Against transformers generate")
    # warm-ups, then 3 timed runs each way: 8 runs, 70 s here under load
    page.get_by_role("button", name="Run both and compare").click()
    stop_mid_run(page, app_url, "batch_compare_stop", r"\b[1-7] of 8 runs done", r"Stopped after [1-7] of 8 runs",
                 "Batch compare")
    assert not says(page, "Outputs identical")  # nothing of the stopped comparison is shown
    assert page.get_by_text("requests in").count() >= 1  # the batch itself stays
    no_exceptions(page)
    screenshot(page, "batch_compare_stopped")

    # the session is usable: the comparison runs again, to its end this time
    page.get_by_role("tab", name="Against transformers generate").click()
    page.get_by_role("button", name="Run both and compare").click()
    wait_for_bar(page, r"of 8 runs done", timeout=60)
    wait_drawn(page, page.get_by_text("Outputs identical").first, timeout=400)
    assert not says(page, "Stopped after")
    no_exceptions(page)
    screenshot(page, "batch_compare_after_stop")


def test_batch_run_stops_keeps_nothing_and_runs_again(app_url, page):  # noqa: F811 (the fixture)
    page.goto(f"{app_url}/batch_generation")
    wait_drawn(page, page.get_by_role("button", name="Run the batch"))
    prompts = page.locator("input[type='range'][aria-label='Prompts']")
    prompts.focus()
    page.keyboard.press("End")  # the page's most prompts, 256: a run long enough to stop
    # the slider shows 256. Its run draws nothing new (the batch reads the number when it runs), and it need not
    # end first: the slider hands its value over at the key, and the click below sends it along, as the bar's
    # "of 256 requests" shows
    expect(prompts).to_have_value("256")
    page.get_by_role("button", name="Run the batch").click()
    stop_mid_run(page, app_url, "batch_run_stop", r"\b[1-9]\d? of 256 requests finished",
                 r"Stopped after \d+ of 256 requests", "Batch run")
    assert not says(page, "requests in")  # the stopped run is not shown
    no_exceptions(page)
    screenshot(page, "batch_run_stopped")

    # the session is usable: the batch runs again, to its end this time, and the note goes
    page.get_by_role("button", name="Run the batch").click()
    wait_drawn(page, page.get_by_text("256 requests in").first, timeout=400)
    assert not says(page, "Stopped after")
    no_exceptions(page)


def test_a_late_step_link_shows_progress_and_stop_keeps_the_step_reached(app_url, page):  # noqa: F811 (the fixture)
    """Issue 33 items 1 and 5: a link to a late step ran with only the navigation on screen; now a bar counts
    the steps under a Stop button, and Stop leaves the lesson at the step it reached, saying so."""
    page.goto(f"{app_url}/prefill_decode?step=200&prompt=ROMEO%3A%0ABut%20soft")
    stop_mid_run(page, app_url, "lesson_link_stop", r"The link's lesson: step ([1-9]|[1-9]\d|1[0-4]\d) of \d+",
                 r"Stopped before step \d+: the lesson shows the step it reached", "Late-step link")
    reached = int(re.search(r"Step (\d+) of", stage_caption(page).inner_text()).group(1))
    assert 0 < reached < 200
    click_to_next_step(page, page.get_by_role("button", name=re.compile("^Next token")).first)  # it goes on from there
    shown, steps = map(int, re.search(r"Step (\d+) of (\d+)", stage_caption(page).inner_text())
                       .groups())
    # one step past the one reached: the stopped script run finishes the step it is in before the page
    # draws (kvviz.lessons.stepped.stepping); the page drew the step before it and showed two more here
    assert shown == reached + 1 <= steps
    assert page.get_by_test_id("stage-forward").is_disabled()  # the newest step taken
    no_exceptions(page)


def test_take_over_at_a_late_step_shows_progress_and_stop_keeps_the_step_reached(app_url, page):  # noqa: F811
    """Issue 33 item 1: Take over reruns the room's lesson to the teacher's step on the student's own engine;
    at a late step that ran with the page only dimmed. Now a bar counts the steps under a Stop button, the
    student is out of the room from the first step, and Stop leaves their own lesson at the step reached."""
    page.goto(f"{app_url}/prefill_decode?step=150&prompt=ROMEO%3A%0ABut%20soft")
    wait_drawn(page, stage_caption(page).get_by_text(re.compile(r"^Step 150 of")), timeout=600)
    page.get_by_text("Show this lesson to the class").click()
    page.get_by_role("button", name="Open a room for the class").click()
    wait_drawn(page, page.locator("[data-testid='stCode']").filter(has_text="?room="))
    link = page.locator("[data-testid='stCode']").filter(has_text="?room=").first.inner_text().strip()
    code = link.rsplit("=", 1)[1]

    student = page.context.browser.new_context(viewport={"width": 1280, "height": 720}).new_page()
    student.set_default_timeout(180_000)
    student.goto(f"{app_url}/prefill_decode?room={code}")
    wait_drawn(student, student.get_by_text(f"Following room {code}"))
    student.get_by_role("button", name="Take over").click()
    stop_mid_run(student, app_url, "lesson_link_stop",
                 r"Your own copy of the lesson: step ([1-9]|[1-9]\d|1[0-3]\d) of 150",
                 r"Stopped before step 150: the lesson shows the step it reached", "Take over")
    assert student.get_by_text(f"Following room {code}").count() == 0  # a lesson of one's own
    reached = int(re.search(r"Step (\d+) of", stage_caption(student).inner_text()).group(1))
    assert 0 < reached < 150
    click_to_next_step(student, student.get_by_role("button", name=re.compile("^Next token")).first)  # it goes on
    shown = int(re.search(r"Step (\d+) of", stage_caption(student).inner_text()).group(1))
    assert shown == reached + 1
    no_exceptions(student)
    screenshot(student, "take_over_stopped")
    student.context.close()


# the script's state and the tab read in one go: between two reads from here a run may end
BUSY_TAB = """() => { const app = document.querySelector('[data-testid="stApp"]'), s = getComputedStyle(app, '::after');
    return {running: app.getAttribute('data-test-script-state') === 'running', content: s.content,
            opacity: parseFloat(s.opacity), px: parseFloat(s.fontSize)}; }"""


@pytest.mark.parametrize("presenter", [False, True], ids=["normal", "presenter"])
def test_a_long_click_shows_a_running_tab_the_room_can_see(app_url, page, presenter):  # noqa: F811
    """Issue 33: while the server works on a click for more than a moment a tab at the top of the window says
    so, in large type in presenter mode; it is gone once the page is idle."""
    page.goto(f"{app_url}/prefill_decode?step=120&prompt=ROMEO%3A%0ABut%20soft" + ("&presenter=1" if presenter else ""))
    wait_for_bar(page, r"The link's lesson: step \d+ of 120", timeout=300)
    # the tab is a style of the app element (its ::after), which no locator reaches: Playwright waits on the
    # style read in the page, for a moment (a clean-clone CI once read the script running before the tab's
    # style applied), and returns the read that ended the wait
    tab = page.wait_for_function(f"() => {{ const tab = ({BUSY_TAB})(); "
                                 "return (!tab.running || tab.content.includes('The server is working')) && tab; }",
                                 timeout=3000).json_value()
    if tab["running"]:  # the last steps can end before this read (a clean-clone CI saw it): no tab to see then
        assert "The server is working" in tab["content"] and tab["px"] >= (18 if presenter else 16), tab
        time.sleep(0.8)  # the scenario: the tab shows once a run has gone on for 0.6 s; read it past that
        later = page.evaluate(BUSY_TAB)
        assert not later["running"] or later["opacity"] >= 0.5, later
    screenshot(page, f"busy_tab_{'presenter' if presenter else 'normal'}")
    wait_drawn(page, stage_caption(page).get_by_text(re.compile(r"^Step 120 of")), timeout=600)
    idle = page.evaluate(BUSY_TAB)
    assert not idle["running"] and idle["content"] in ("none", "normal"), idle
