"""Stop in a real browser (issue 25): Model lab's Measure, Batch generation's "Run the batch" and its
"Run both and compare" each show a progress bar and a Stop button while they run; pressing Stop
ends the script run within one unit of work (one context length, one engine step, one timed run),
says how far it got, and leaves the page able to start again."""

import re
import time

import pytest
from playwright.sync_api import expect

from app_reads import no_exceptions
from chromium import click_to_next_step, open_tab, screenshot, stage_caption, wait_drawn
from stop_bars import says, stop_button, stop_mid_run, wait_for_bar


def test_model_lab_measure_stops_keeps_what_was_timed_and_measures_again(app_url, page):
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


def test_batch_compare_stops_keeps_nothing_and_compares_again(app_url, page):
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


def test_batch_run_stops_keeps_nothing_and_runs_again(app_url, page):
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


def test_a_late_step_link_shows_progress_and_stop_keeps_the_step_reached(app_url, page):
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


def test_take_over_at_a_late_step_shows_progress_and_stop_keeps_the_step_reached(app_url, page):
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
def test_a_long_click_shows_a_running_tab_the_room_can_see(app_url, page, presenter):
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
