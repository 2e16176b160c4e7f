"""A class in a room (issue 27), in a real browser: a teacher and five students, each in a browser
context of their own. Students show the teacher's step within 2 seconds, drawn by the stage's
fragment alone (issue 34: the rest of the page does not rerun, and the views keep the student's
step until Catch up), a student's own view moves nobody else, answers are counted and shown at the
reveal, and take-over gives a lesson of one's own; and the same for a Paged cache and batching run
with two students. Screenshots go to docs/screenshots/.
"""

import re
import shutil
import time

import pytest
from test_browser import app_url, browser  # noqa: F401  (fixtures)

from kvviz.ui.app_server import CHROMIUM, ROOT

from chromium import SLOW_S, open_tab, press, wait_drawn, wait_idle
from room_pages import shown_step, wait_for_step

pytestmark = pytest.mark.skipif(shutil.which(CHROMIUM) is None and not (ROOT / CHROMIUM).exists(),
                                reason="Debian's chromium is not installed (.ci/run installs it)")
SHOTS = ROOT / "docs" / "screenshots"
STUDENTS = 5


def new_page(browser, url, width=1280, height=720):
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.set_default_timeout(SLOW_S * 1000)
    page.goto(url)
    return context, page



WATCH_RERUNS = """() => {  // counts the whole page's reruns: each marks the student's banner stale, a fragment's does not
    window.__pageReruns = 0;
    const box = [...document.querySelectorAll("[data-testid='stElementContainer']")]
        .find((element) => element.innerText.includes("Following room"));
    new MutationObserver(() => { if (box.getAttribute("data-stale") === "true") window.__pageReruns += 1; })
        .observe(box, {attributes: true, attributeFilter: ["data-stale"]});
}"""


def page_reruns(page) -> int:
    return page.evaluate("() => window.__pageReruns")




def test_five_students_follow_the_teacher_answer_and_take_over(browser, app_url):  # noqa: F811
    teacher_context, teacher = new_page(browser, f"{app_url}/prefill_decode")
    wait_drawn(teacher, teacher.get_by_role("button", name="Prefill", exact=True), timeout=SLOW_S)
    press(teacher, "Prefill", exact=False)
    press(teacher, "Next token", exact=False)
    teacher.get_by_text("Show this lesson to the class").click()
    press(teacher, "Open a room for the class", exact=False)
    link = teacher.locator("[data-testid='stCode']").filter(has_text="?room=").first.inner_text().strip()
    code = link.rsplit("=", 1)[1]
    assert re.fullmatch(r"[A-Z2-9]{6}", code)
    qr = teacher.locator("[data-testid='stImage'] img").first  # the QR code, a PNG (an SVG was sanitized away)
    qr.wait_for()
    assert teacher.wait_for_function("img => img.complete && img.naturalWidth >= 100", arg=qr.element_handle())

    students = []
    for index in range(STUDENTS):
        # the last student's link was edited to another lesson's page, one without rooms: it goes to the room's
        path = "memory_bill" if index == STUDENTS - 1 else "prefill_decode"
        students.append(new_page(browser, f"{app_url}/{path}?room={code}"))
        page = students[-1][1]
        try:
            page.get_by_text(f"Following room {code}").wait_for(timeout=120_000)
            assert re.search(rf"/prefill_decode\?room={code}$", page.url), page.url  # the room's link alone
        except Exception:
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ROOT / "artifacts" / f"room_student_{index}_failed.png"))
            raise
        wait_for_step(page, 1, SLOW_S)
    teacher.get_by_text(f"{STUDENTS} of {STUDENTS} students following", exact=False).wait_for(timeout=30_000)

    # a student's own view moves nobody else
    first = students[0][1]
    first.get_by_text("Work saved", exact=True).first.click()
    wait_idle(first, timeout=SLOW_S)

    # the teacher asks, steps; every student shows the step within 2 seconds of the teacher's page
    teacher.get_by_text("Predict, then reveal", exact=True).first.click()
    teacher.get_by_role("button", name="Ask", exact=True).click()
    wait_idle(teacher, timeout=SLOW_S)
    for _, page in students:  # the question's whole-page rerun is over
        wait_drawn(page, page.get_by_text("The teacher asks:"), timeout=SLOW_S)
        page.evaluate(WATCH_RERUNS)
    press(teacher, "Next token", exact=False)
    moved = time.time()
    for _, page in students:
        assert wait_for_step(page, 2, SLOW_S) - moved < 2.5  # woken by the server, not polling
    for _, page in students:
        wait_idle(page, timeout=SLOW_S)
        assert page_reruns(page) == 0  # the stage's fragment alone drew the step
    assert first.get_by_text("Work saved", exact=True).count() >= 1
    assert first.locator("[data-testid='stMetricLabel']").filter(has_text="Tokens run, with cache").count() == 1
    assert teacher.locator("[data-testid='stMetricLabel']").filter(has_text="Tokens run, with cache").count() == 0
    if first.get_by_text("stay where they are").count():  # the views still show the step before
        press(first, "Catch up", exact=False)  # the views go to the teacher's step, the view chosen stays
    first.get_by_text("Look back at step").wait_for(timeout=30_000)
    assert first.locator("[data-testid='stSliderThumbValue']").first.inner_text() == "2"
    assert first.locator("[data-testid='stMetricLabel']").filter(has_text="Tokens run, with cache").count() == 1
    assert first.get_by_text("stay where they are").count() == 0

    # two students answer the open question
    for index, (_, page) in enumerate(students[:2]):
        page.get_by_text("The teacher asks:").wait_for(timeout=30_000)
        page.get_by_label(re.compile("Your answer")).fill(str(300_000 + index))
        page.get_by_role("button", name="Send my answer").click()
        wait_idle(page, timeout=SLOW_S)
    teacher.get_by_text("2 answered so far", exact=False).wait_for(timeout=30_000)
    for _ in range(5):  # to the question's target step: the reveal
        press(teacher, "Next token", exact=False)
    teacher.get_by_text("Room's answers", exact=True).wait_for(timeout=30_000)
    assert teacher.get_by_text(re.compile(r"\d of 2 answered within 1%")).count() == 1
    chart = teacher.locator("[data-testid='stPlotlyChart']").last  # the answers, a bar each (issue 33 item 7)
    chart.locator(".main-svg").first.wait_for(timeout=30_000)
    chart.scroll_into_view_if_needed()
    assert chart.bounding_box()["height"] >= 150 and "students" in chart.inner_text()
    SHOTS.mkdir(parents=True, exist_ok=True)
    chart.screenshot(path=str(SHOTS / "room_answers.png"))
    SHOTS.mkdir(parents=True, exist_ok=True)
    teacher.screenshot(path=str(SHOTS / "room_teacher.png"), full_page=True)
    students[1][1].screenshot(path=str(SHOTS / "room_student.png"))

    # take over: a lesson of one's own that steps on its own
    last = students[-1][1]
    wait_for_step(last, 7, 30)
    press(last, "Take over", exact=False)
    wait_for_step(last, 7, SLOW_S)
    press(last, "Next token", exact=False)
    wait_for_step(last, 8, SLOW_S)
    assert shown_step(teacher) == 7 and shown_step(students[1][1]) == 7  # nobody else moved
    for context, _ in students:
        context.close()
    teacher_context.close()


def stage_step(page) -> int | None:
    """The step a page's stage shows ("Step 2 of 3")."""
    try:
        found = re.match(r"Step (\d+)", page.locator("[data-testid='stage-step']").first.inner_text(timeout=1000))
    except Exception:  # the page is redrawing
        return None
    return int(found.group(1)) if found else None


def look_back_step(page) -> int | None:
    """The step a Paged page shows: its look-back slider's value."""
    try:
        box = page.locator("[data-testid='stSlider']").filter(has_text="Look back at step").first
        return int(box.locator("[data-testid='stSliderThumbValue']").inner_text(timeout=1000))
    except Exception:  # the page is redrawing
        return None


def wait_for_paged_step(page, step, within_s, read=look_back_step):
    """When `read` (the look-back slider, or stage_step) first showed `step`."""
    deadline = time.time() + within_s
    while time.time() < deadline:
        if read(page) == step:
            return time.time()
        time.sleep(0.1)
    raise AssertionError(f"the page still shows step {read(page)}, not {step}, after {within_s} s")


def metrics(page) -> list[str]:
    return page.locator("[data-testid='stMetricValue']").all_inner_texts()


def test_two_students_follow_a_paged_run_choose_their_own_tab_and_take_over(browser, app_url):  # noqa: F811
    teacher_context, teacher = new_page(browser, f"{app_url}/paged_batching")
    wait_drawn(teacher, teacher.get_by_role("button", name="Start", exact=True).first, timeout=SLOW_S)
    press(teacher, "Start", exact=False)
    press(teacher, "Step", exact=False)
    teacher.get_by_text("Show this lesson to the class").click()
    press(teacher, "Open a room for the class", exact=False)
    link = teacher.locator("[data-testid='stCode']").filter(has_text="?room=").first.inner_text().strip()
    assert "/paged_batching?room=" in link
    code = link.rsplit("=", 1)[1]
    students = [new_page(browser, f"{app_url}/paged_batching?room={code}") for _ in range(2)]
    for _, page in students:
        page.get_by_text(f"Following room {code}").wait_for(timeout=120_000)
        wait_for_paged_step(page, 1, SLOW_S)
        assert page.get_by_role("button", name="Step", exact=True).count() == 0  # only the teacher steps
    first, second = students[0][1], students[1][1]
    open_tab(first, "Preemption: swap or recompute")  # one student's own tab
    for _, page in students:
        page.evaluate(WATCH_RERUNS)
    press(teacher, "Step", exact=False)
    moved = time.time()
    for _, page in students:
        assert wait_for_paged_step(page, 2, SLOW_S, stage_step) - moved < 2.5
    wait_idle(teacher, timeout=SLOW_S)
    for _, page in students:
        wait_idle(page, timeout=SLOW_S)
        assert page_reruns(page) == 0 and look_back_step(page) == 1  # the stage moved; the views stay
        press(page, "Catch up", exact=False)
        wait_for_paged_step(page, 2, SLOW_S)
        assert metrics(page) == metrics(teacher)  # the same step's numbers
    assert first.get_by_role("tab", name="Preemption: swap or recompute").get_attribute("aria-selected") == "true"
    for page in (second, teacher):
        assert page.get_by_role("tab", name="Parallel sampling: one prompt, n samples").get_attribute(
            "aria-selected") == "true"
    press(second, "Take over", exact=False)  # a run of one's own at the room's step, that steps on its own
    second.get_by_role("button", name="Step", exact=True).wait_for(timeout=SLOW_S * 1000)
    wait_for_paged_step(second, 2, SLOW_S)
    press(second, "Step", exact=False)
    wait_for_paged_step(second, 3, SLOW_S)
    assert look_back_step(teacher) == 2 and look_back_step(first) == 2  # nobody else moved
    for context, _ in students:
        context.close()
    teacher_context.close()
