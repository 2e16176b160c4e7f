"""Issue 35 item 8 in Chromium: a Take over the server refuses (its live lessons are full) keeps the student
in the room, at the teacher's step, with one sentence; before, the student dropped out to an empty page.
The app runs on a server of its own with KVVIZ_MAX_LESSONS=1, so the teacher's lesson fills it."""

import contextlib
import re

from app_tests import one_sentence
from kvviz.ui.app_server import running_app

from chromium import shared_browser, wait_drawn
from room_pages import SLOW_S, click_at, new_page, open_room, shown_step, start_lesson, step_sentence, wait_for_step


def test_a_refused_take_over_keeps_the_student_following_with_one_sentence(monkeypatch):
    monkeypatch.setenv("KVVIZ_MAX_LESSONS", "1")  # read by the server started below
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(running_app())
        browser = shared_browser()
        teacher_context, teacher = new_page(browser, f"{url}/prefill_decode")
        stack.callback(teacher_context.close)
        start_lesson(teacher)
        code = open_room(teacher)
        student_context, student = new_page(browser, f"{url}/prefill_decode?room={code}")
        stack.callback(student_context.close)
        student.get_by_text(f"Following room {code}").wait_for(timeout=SLOW_S * 1000)
        wait_drawn(student, step_sentence(student, 1), timeout=60)

        alerts = student.locator("[data-testid='stAlertContentError']")
        click_at(student, "Take over")
        wait_drawn(student, alerts, timeout=SLOW_S)  # the refusal, the first error the student's page shows
        refusal = alerts.first.inner_text().strip()
        assert f"you still follow room {code}" in refusal and "live lessons" in refusal, refusal
        assert one_sentence(refusal), refusal
        assert student.get_by_text(f"Following room {code}").count() >= 1 and shown_step(student) == 1
        assert student.locator("[data-testid='stException']").count() == 0

        click_at(teacher, "Next token")  # the student still follows: the teacher's next step reaches them
        wait_for_step(student, 2, 60)
        assert re.search(rf"{code}", student.url)
