"""Issue 50 item 2: a student at a phone's 390x844 sees the whole stage. It drew 640 px wide in a 356 px box
that could not scroll sideways: the newest column, the block table, the pool and the bill were cut off. Now
the cache band takes the width and the block table, pool and bill go under it; a follower and a student who
took over see the same. Screenshots go to screenshots/phone/ (ignored by git)."""

import re

from kvviz.ui.app_server import ROOT

from chromium import SLOW_S, press, wait_drawn
from room_pages import new_page, step_sentence

SHOTS = ROOT / "screenshots" / "phone"
PHONE = (390, 844)


def whole_stage(page, name: str) -> None:
    """Every part of the stage lies inside the phone's width: the newest column, the table, the pool, the bill."""
    page.locator("[data-testid='stage-bill']").wait_for()
    width = PHONE[0]
    for part in ("stage-cache", "stage-block-table", "stage-pool", "stage-bill"):
        box = page.locator(f"[data-testid='{part}']").first.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width + 0.5, (part, box)
    newest = page.locator("[data-testid='stage-cache'] rect.att.query").first.bounding_box()  # the red column
    assert newest is not None and newest["x"] + newest["width"] <= width, newest
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.locator(".kvviz-stage").first.screenshot(path=str(SHOTS / f"{name}.png"))


def test_a_follower_and_a_student_who_took_over_see_the_whole_stage_on_a_phone(browser, app_url):
    teacher_context, teacher = new_page(browser, f"{app_url}/prefill_decode")
    student_context = None
    try:
        wait_drawn(teacher, teacher.get_by_role("button", name="Prefill", exact=True), timeout=SLOW_S)
        press(teacher, "Prefill", shows=step_sentence(teacher, 0), exact=False)
        for step in range(1, 4):
            press(teacher, "Next token", shows=step_sentence(teacher, step), exact=False)
        teacher.get_by_text("Show this lesson to the class").click()
        room_link = teacher.locator("[data-testid='stCode']").filter(has_text="?room=")
        press(teacher, "Open a room for the class", shows=room_link, exact=False)
        link = room_link.first.inner_text().strip()
        code = link.rsplit("=", 1)[1]
        student_context, student = new_page(browser, f"{app_url}/prefill_decode?room={code}", *PHONE)
        wait_drawn(student, student.get_by_text(f"Following room {code}"))
        assert re.search(rf"/prefill_decode\?room={code}$", student.url)
        whole_stage(student, "follower")
        # a lesson of one's own: its Next token button, which a follower's page does not have
        press(student, "Take over", shows=student.get_by_role("button", name=re.compile("^Next token")), exact=False)
        whole_stage(student, "taken-over")
    finally:
        teacher_context.close()
        if student_context is not None:
            student_context.close()
