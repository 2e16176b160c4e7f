"""A teacher's and students' Prefill and decode pages in Chromium, for the tests and scripts that follow
a room across app processes (tests/rooms/, scripts/rooms_two_processes.py)."""

from __future__ import annotations

import re
import time

from chromium import SLOW_S, wait_drawn


def new_page(browser, url: str, width: int = 1280, height: int = 720):
    """A browser context of its own (its own Streamlit session) with `url` opened: (context, page)."""
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.set_default_timeout(SLOW_S * 1000)
    page.goto(url)
    return context, page


def click_at(page, name: str) -> float:
    """Click the button named `name` (its start: "Next token →"); the time of the click."""
    button = page.get_by_role("button", name=re.compile("^" + re.escape(name))).first
    button.wait_for()
    clicked = time.time()
    button.click()
    return clicked


def shown_step(page) -> int | None:
    """The Prefill and decode step the page's sentence names (0: the prefill), None while it redraws."""
    try:
        text = page.locator("[data-testid='stAlertContentSuccess']").first.inner_text(timeout=1000)
    except Exception:  # the page is redrawing
        return None
    if text.startswith("Prefill."):
        return 0
    found = re.match(r"Decode step (\d+)", text)
    return int(found.group(1)) if found else None


def step_sentence(page, step: int):
    """The Prefill and decode page's sentence of `step` (a locator: empty while another step shows)."""
    words = re.compile(r"^Prefill\." if step == 0 else rf"^Decode step {step}\b")
    return page.locator("[data-testid='stAlertContentSuccess']").filter(has_text=words)


def wait_for_step(page, step: int, within_s: float) -> float:
    """When the page's sentence named `step` showed; TimeoutError after `within_s` s. Playwright's wait_for on the
    locator, which sees it the frame it is drawn (expect polls every 0.5 s after its first second): the room
    tests time how soon a student's page follows the teacher's."""
    step_sentence(page, step).first.wait_for(timeout=within_s * 1000)
    return time.time()


def open_room(teacher) -> str:
    """On a teacher's Prefill and decode page with a lesson: open a room; its code."""
    teacher.get_by_text("Show this lesson to the class").click()
    click_at(teacher, "Open a room for the class")
    wait_drawn(teacher, teacher.locator("[data-testid='stCode']").filter(has_text="?room="), timeout=SLOW_S)
    link = teacher.locator("[data-testid='stCode']").filter(has_text="?room=").first.inner_text().strip()
    return link.rsplit("=", 1)[1]


def start_lesson(teacher) -> None:
    """Prefill and one decode step on the teacher's page."""
    wait_drawn(teacher, teacher.get_by_role("button", name="Prefill", exact=True), timeout=SLOW_S)
    click_at(teacher, "Prefill")
    wait_drawn(teacher, step_sentence(teacher, 0), timeout=SLOW_S)
    click_at(teacher, "Next token")
    wait_drawn(teacher, step_sentence(teacher, 1), timeout=SLOW_S)
