"""A room across two real Streamlit processes and a real redis-server (issue 34 item 5): a teacher on
process A, a student on process B follows the teacher's steps; then redis-server is killed mid-lesson
and both pages go on, each with one sentence and no traceback."""

import contextlib
import re
import shutil

import pytest
from playwright.sync_api import expect

from kvviz.ui.app_server import CHROMIUM, running_app

from chromium import run_finished, shared_browser, wait_drawn
from room_pages import SLOW_S, click_at, new_page, open_room, shown_step, start_lesson, step_sentence, wait_for_step

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(shutil.which(CHROMIUM) is None, reason="Debian's chromium is not installed")]


def test_a_student_on_another_process_follows_and_a_killed_redis_leaves_both_running(redis_url):
    with contextlib.ExitStack() as stack:
        url_a, url_b = stack.enter_context(running_app()), stack.enter_context(running_app())  # both read
        browser = shared_browser()  # KVVIZ_ROOMS_URL from the redis_url fixture
        teacher_context, teacher = new_page(browser, f"{url_a}/prefill_decode")
        stack.callback(teacher_context.close)
        start_lesson(teacher)
        code = open_room(teacher)
        assert re.fullmatch(r"[A-Z2-9]{8}", code)

        student_context, student = new_page(browser, f"{url_b}/prefill_decode?room={code}")  # process B
        stack.callback(student_context.close)
        student.get_by_text(f"Following room {code}").wait_for(timeout=SLOW_S * 1000)
        wait_for_step(student, 1, 120)  # a loaded 2-core machine runs two app processes and two browsers here
        click_at(teacher, "Next token")
        wait_for_step(teacher, 2, SLOW_S)
        wait_for_step(student, 2, 90)  # B heard of A's step through Redis

        redis_url.stop()  # the room server goes away mid-lesson
        click_at(teacher, "Next token")
        wait_drawn(teacher, step_sentence(teacher, 3), timeout=SLOW_S)  # the teacher's lesson goes on
        teacher.get_by_text(f"The class room server at {redis_url.url} does not answer").first.wait_for(timeout=60_000)
        gone = student.get_by_text("The class room server does not answer")  # said once, by the page's next run
        gone.first.wait_for(timeout=60_000)
        assert shown_step(student) == 2  # the student keeps the lesson at its step, on their own now
        for page in (teacher, student):
            assert page.locator("[data-testid='stException']").count() == 0
        click_at(student, "Next token")  # the student's page still answers: the copy has no step past the room's
        expect(gone).to_have_count(0, timeout=SLOW_S * 1000)  # the click's run drew the page without the sentence
        run_finished(student, timeout=SLOW_S)
        assert student.locator("[data-testid='stException']").count() == 0 and shown_step(student) == 2
