"""How the browser tests take a lesson of the running app to a step: by its address (url_of), pressing Prefill
(prefill_lesson) or Start and Step (start_and_step), after loading a built-in model (start_on_model), or by
replaying a lesson file (replay)."""

from __future__ import annotations

import re

from chromium import SLOW_S, click_to_next_step, press, stage_caption, wait_drawn


def url_of(app_url, lesson):
    """The address of `lesson` (an entry of kvviz.lessons.lecture.LECTURE) on the app at `app_url`."""
    name = lesson.path.removeprefix("lessons/").removesuffix(".py")
    return f"{app_url}/" if name == "home" else f"{app_url}/{name}"


def prefill_lesson(page, app_url):
    """Open the first lesson by its own address and press Prefill."""
    page.goto(f"{app_url}/prefill_decode")
    wait_drawn(page, page.get_by_role("button", name="Prefill"))
    page.get_by_role("button", name="Prefill").click()
    wait_drawn(page, stage_caption(page))  # the stage shows once the prefill ran


def start_and_step(page, url, lesson, steps, presenter):
    """Open the stepped lesson `lesson` (its address), press Start and then Step `steps` times."""
    page.goto(f"{url}/{lesson}" + ("?presenter=1" if presenter else ""))
    wait_drawn(page, page.get_by_role("button", name="Start", exact=True), timeout=SLOW_S)
    press(page, "Start", shows=stage_caption(page), exact=False)  # the run's stage
    for _ in range(steps):
        click_to_next_step(page, page.get_by_role("button", name="Step", exact=True), timeout=SLOW_S)


def start_on_model(page, address: str, start: str, source: str, shown_name: str, presenter: bool) -> None:
    """Open a lesson, load a built-in model from the sidebar's field as a student would (in presenter
    mode then turn the sidebar's switch on, as a teacher does after picking the model), and press the
    lesson's first button, `start`."""
    page.goto(address)
    wait_drawn(page, page.get_by_role("button", name=start, exact=True), timeout=SLOW_S)
    field = page.get_by_label(re.compile(r"^bundled, .*tiny-mla, .*a Hugging Face id"))
    field.fill(source)
    field.press("Enter")
    # the sidebar's caption names the model once it has loaded (it named the bundled model before)
    wait_drawn(page, page.locator("[data-testid='stSidebar']").get_by_text(shown_name, exact=False), timeout=SLOW_S)
    if presenter:
        page.locator("[data-testid='stSidebar']").get_by_text("Presenter mode", exact=True).click()
        wait_drawn(page, page.get_by_role("button", name=re.compile("Leave presenter mode")), timeout=SLOW_S)
    page.get_by_role("button", name=start, exact=True).click()
    wait_drawn(page, stage_caption(page), timeout=SLOW_S)


def replay(page, url, lesson, ready, text):
    """Open a lesson's page (ready once the button `ready` shows) and replay the lesson file `text`."""
    page.goto(f"{url}/{lesson}")
    wait_drawn(page, page.get_by_role("button", name=ready, exact=True), timeout=SLOW_S)
    page.get_by_text("Export or replay a lesson").click()
    page.locator("[data-testid='stFileUploaderDropzoneInput']").set_input_files(files=[{
        "name": "lesson.json", "mimeType": "application/json", "buffer": text.encode()}])
    # the stage, which the page draws once it has a run: the replay (the page was opened without one)
    wait_drawn(page, stage_caption(page), timeout=SLOW_S)
