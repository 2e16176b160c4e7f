"""A class in a room (issue 27), in a real browser: a teacher and five students, each in a browser
context of their own. Students show the teacher's step within 2 seconds, drawn by the stage's
fragment alone (issue 34: the rest of the page does not rerun, and the views keep the student's
step until Catch up), a student's own view moves nobody else, answers are counted and shown at the
reveal, and take-over gives a lesson of one's own; and the same for a Paged cache and batching run
with two students. Screenshots go to docs/screenshots/.
"""

import re
import time

from playwright.sync_api import expect

from kvviz.ui.app_server import ROOT

from app_reads import metrics
from chromium import SLOW_S, open_tab, press, run_finished, stage_caption, wait_drawn
from room_pages import new_page, shown_step, step_sentence, wait_for_step

SHOTS = ROOT / "docs" / "screenshots"
STUDENTS = 5


# counts the whole page's reruns: each marks the student's banner stale, a fragment's does not
WATCH_RERUNS = """() => {
    window.__pageReruns = 0;
    const box = [...document.querySelectorAll("[data-testid='stElementContainer']")]
        .find((element) => element.innerText.includes("Following room"));
    new MutationObserver(() => { if (box.getAttribute("data-stale") === "true") window.__pageReruns += 1; })
        .observe(box, {attributes: true, attributeFilter: ["data-stale"]});
}"""


def page_reruns(page) -> int:
    return page.evaluate("() => window.__pageReruns")


def room_link(page):
    """The room's link on the teacher's page (a locator: empty until the room is open)."""
    return page.locator("[data-testid='stCode']").filter(has_text="?room=")


def test_five_students_follow_the_teacher_answer_and_take_over(browser, app_url):
    teacher_context, teacher = new_page(browser, f"{app_url}/prefill_decode")
    wait_drawn(teacher, teacher.get_by_role("button", name="Prefill", exact=True), timeout=SLOW_S)
    press(teacher, "Prefill", shows=step_sentence(teacher, 0), exact=False)
    press(teacher, "Next token", shows=step_sentence(teacher, 1), exact=False)
    teacher.get_by_text("Show this lesson to the class").click()
    press(teacher, "Open a room for the class", shows=room_link(teacher), exact=False)
    link = room_link(teacher).first.inner_text().strip()
    code = link.rsplit("=", 1)[1]
    assert re.fullmatch(r"[A-Z2-9]{8}", code)
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
    work_saved = first.locator("[data-testid='stMetricLabel']").filter(has_text="Tokens run, with cache")
    first.get_by_text("Work saved", exact=True).first.click()
    wait_drawn(first, work_saved, timeout=SLOW_S)  # the view's metrics, which the view before did not show

    # the teacher asks, steps; every student shows the step within 2 seconds of the teacher's page
    teacher.get_by_text("Predict, then reveal", exact=True).first.click()
    press(teacher, "Ask", shows=teacher.get_by_label(re.compile("^Your guess")))  # the question's guess box
    for _, page in students:  # the question's whole-page rerun is over
        wait_drawn(page, page.get_by_text("The teacher asks:"), timeout=SLOW_S)
        page.evaluate(WATCH_RERUNS)
    press(teacher, "Next token", shows=step_sentence(teacher, 2), exact=False)
    moved = time.time()
    for _, page in students:
        assert wait_for_step(page, 2, SLOW_S) - moved < 2.5  # woken by the server, not polling
    for _, page in students:
        run_finished(page, timeout=SLOW_S)  # the fragment's run that drew step 2 is over
        assert page_reruns(page) == 0  # the stage's fragment alone drew the step
    assert first.get_by_text("Work saved", exact=True).count() >= 1
    assert work_saved.count() == 1
    assert teacher.locator("[data-testid='stMetricLabel']").filter(has_text="Tokens run, with cache").count() == 0
    if first.get_by_text("stay where they are").count():  # the views still show the step before
        # the views go to the teacher's step (the look-back slider at 2), the view chosen stays
        press(first, "Catch up", shows=look_back_value(first).filter(has_text=re.compile("^2$")), exact=False)
    first.get_by_text("Look back at step").wait_for(timeout=30_000)
    assert first.locator("[data-testid='stSliderThumbValue']").first.inner_text() == "2"
    assert work_saved.count() == 1
    assert first.get_by_text("stay where they are").count() == 0

    # two students answer the open question
    for index, (_, page) in enumerate(students[:2]):
        page.get_by_text("The teacher asks:").wait_for(timeout=30_000)
        page.get_by_label(re.compile("Your answer")).fill(str(300_000 + index))
        page.get_by_role("button", name="Send my answer").click()
        wait_drawn(page, page.locator("[data-testid='stAlertContentSuccess']").filter(has_text=re.compile("^Sent: ")),
                   timeout=SLOW_S)  # the answer's receipt
    teacher.get_by_text("2 answered so far", exact=False).wait_for(timeout=30_000)
    for step in range(3, 8):  # to the question's target step: the reveal
        press(teacher, "Next token", shows=step_sentence(teacher, step), exact=False)
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
    press(last, "Take over", shows=last.get_by_role("button", name=re.compile("^Next token")), exact=False)
    wait_for_step(last, 7, SLOW_S)
    press(last, "Next token", shows=step_sentence(last, 8), exact=False)
    wait_for_step(last, 8, SLOW_S)
    assert shown_step(teacher) == 7 and shown_step(students[1][1]) == 7  # nobody else moved
    for context, _ in students:
        context.close()
    teacher_context.close()


def look_back_value(page):
    """The value of a page's look-back slider: the step its views show."""
    box = page.locator("[data-testid='stSlider']").filter(has_text="Look back at step").first
    return box.locator("[data-testid='stSliderThumbValue']")


def wait_for_paged_step(page, step, within_s, shown=look_back_value):
    """When `shown` (the look-back slider's value, or the stage's caption) showed `step`; TimeoutError after
    `within_s` s. Playwright's wait_for on the locator, which sees the text the frame it is drawn, not at
    expect's 0.5 s polls: the room tests time how soon a student's page follows the teacher's."""
    words = re.compile(rf"^Step {step} of" if shown is stage_caption else rf"^{step}$")
    shown(page).filter(has_text=words).first.wait_for(timeout=within_s * 1000)
    return time.time()


def test_two_students_follow_a_paged_run_choose_their_own_tab_and_take_over(browser, app_url):
    teacher_context, teacher = new_page(browser, f"{app_url}/paged_batching")
    wait_drawn(teacher, teacher.get_by_role("button", name="Start", exact=True).first, timeout=SLOW_S)
    press(teacher, "Start", shows=stage_caption(teacher).filter(has_text=re.compile("^Step 0 of")), exact=False)
    press(teacher, "Step", shows=stage_caption(teacher).filter(has_text=re.compile("^Step 1 of")), exact=False)
    teacher.get_by_text("Show this lesson to the class").click()
    press(teacher, "Open a room for the class", shows=room_link(teacher), exact=False)
    link = room_link(teacher).first.inner_text().strip()
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
    press(teacher, "Step", shows=stage_caption(teacher).filter(has_text=re.compile("^Step 2 of")), exact=False)
    moved = time.time()
    for _, page in students:
        assert wait_for_paged_step(page, 2, SLOW_S, stage_caption) - moved < 2.5
    for _, page in students:
        run_finished(page, timeout=SLOW_S)  # the fragment's run that drew step 2 is over
        assert page_reruns(page) == 0  # the stage moved
        expect(look_back_value(page)).to_have_text("1")  # the views stay
        press(page, "Catch up", shows=look_back_value(page).filter(has_text=re.compile("^2$")), exact=False)
        assert metrics(page) == metrics(teacher)  # the same step's numbers
    assert first.get_by_role("tab", name="Preemption: swap or recompute").get_attribute("aria-selected") == "true"
    for page in (second, teacher):
        assert page.get_by_role("tab", name="Parallel sampling: one prompt, n samples").get_attribute(
            "aria-selected") == "true"
    # a run of one's own at the room's step, that steps on its own
    press(second, "Take over", shows=second.get_by_role("button", name="Step", exact=True), exact=False)
    wait_for_paged_step(second, 2, SLOW_S)
    press(second, "Step", shows=stage_caption(second).filter(has_text=re.compile("^Step 3 of")), exact=False)
    wait_for_paged_step(second, 3, SLOW_S)
    for page in (teacher, first):  # nobody else moved
        expect(look_back_value(page)).to_have_text("2")
    for context, _ in students:
        context.close()
    teacher_context.close()
