"""Issue 50 item 5: axe-core (the copy the axe-playwright-python wheel carries) over every page, in normal and
presenter mode, after Prefill on the first lesson: no serious or critical violation of the WCAG 2.0-2.2 A and
AA rules. Also: the focus ring of a control and of the stage is visible (3:1 against white), focus is on Next
token after Prefill, and the stage tells a screen reader each step in a sentence (an aria-live region)."""

import pytest

from kvviz.lessons.lecture import LECTURE

from axe_audit import violations
from chromium import browser_page, run_finished, stage_caption, wait_drawn
from lesson_steps import url_of


@pytest.mark.parametrize("mode", ["normal", "presenter"])
def test_no_serious_or_critical_axe_violation_on_any_page(app_url, mode):
    found = {}
    with browser_page(width=1280, height=720) as page:
        for lesson in LECTURE:
            page.goto(url_of(app_url, lesson) + ("?presenter=1" if mode == "presenter" else ""))
            wait_drawn(page, page.locator("h1").first)
            if lesson.path.endswith("prefill_decode.py"):
                page.get_by_role("button", name="Prefill").click()
                wait_drawn(page, stage_caption(page))
            problems = violations(page)
            if problems:
                found[lesson.title] = problems
    assert not found, f"axe in {mode} mode: {found}"


def contrast(rgb_a: str, rgb_b: str = "rgb(255, 255, 255)") -> float:
    def luminance(text):
        parts = [float(p) / 255 for p in text[text.index("(") + 1:text.index(")")].split(",")[:3]]
        lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in parts]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]
    light, dark = sorted((luminance(rgb_a), luminance(rgb_b)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def prefilled(page, app_url) -> None:
    """Prefill and decode opened and its Prefill pressed, the page idle again."""
    page.goto(f"{app_url}/prefill_decode")
    wait_drawn(page, page.locator("h1").first)
    page.get_by_role("button", name="Prefill").click()
    wait_drawn(page, stage_caption(page))


def test_focus_is_visible_lands_on_next_token_and_the_stage_speaks(app_url):
    with browser_page(width=1280, height=720) as page:
        prefilled(page, app_url)
        page.wait_for_function("() => document.activeElement.tagName === 'BUTTON' && "
                               "document.activeElement.innerText.includes('Next token')", timeout=10_000)
        page.keyboard.press("Shift")  # a key: the browser now shows where the focus is, as for a keyboard user
        page.get_by_role("button", name="Next token").focus()
        ring = page.evaluate(RING_JS)
        assert "Next token" in ring[3] and ring[0] != "none" and float(ring[1].removesuffix("px")) >= 2 \
            and contrast(ring[2]) >= 3, ring
        stage = page.locator(".kvviz-stage").first
        stage.focus()
        page.keyboard.press("ArrowLeft")  # a key, so the stage's own ring shows as it would for a keyboard user
        stage_ring = page.evaluate(RING_JS)  # the stage itself: its text starts with its bar's step
        assert stage_ring[0] != "none" and contrast(stage_ring[2]) >= 3, stage_ring
        live = page.locator("[data-testid='stage-live'][aria-live='polite']")
        spoken = lambda words, timeout=10_000: live.filter(has_text=words).wait_for(state="attached", timeout=timeout)  # noqa: E731
        spoken("Prefill")  # step 1 -> 0: the region says the new step
        page.keyboard.press("ArrowRight")
        spoken("Step 1 of")
        page.keyboard.press("ArrowRight")  # at the newest step: -> asks the page for the next token
        spoken("Step 2 of", 60_000)


# the focused element's ring, inside a component's shadow root where the stage lives
RING_JS = """() => { let e = document.activeElement;
  while (e.shadowRoot && e.shadowRoot.activeElement) e = e.shadowRoot.activeElement;
  const s = getComputedStyle(e);
  return [s.outlineStyle, s.outlineWidth, s.outlineColor, (e.innerText || '').trim()]; }"""


def test_the_keyboard_goes_through_every_token_and_block_of_the_stage(app_url):
    """↓ and ↑ pin the stage's parts one at a time (the prompt's tokens, then its blocks) and the live region says
    what each is; Escape lets go."""
    with browser_page(width=1280, height=720) as page:
        prefilled(page, app_url)
        stage = page.locator(".kvviz-stage").first
        stage.wait_for()
        run_finished(page)  # the run that drew the stage has ended: no redraw lets go of the pinned part midway
        page.wait_for_timeout(500)  # the stage's report of its first step (350 ms after drawing) and its rerun
        run_finished(page)
        # the pointer off the stage, as a keyboard user's would be: left where Prefill was clicked, it rested on one of
        # the stage's tokens once the step's note moved beside the cache, and that token's hover outlived Escape
        page.mouse.move(0, 0)
        stage.focus()
        readout = page.locator("[data-testid='stage-readout']").first
        idle = readout.inner_text()
        said = []
        for _ in range(40):  # past the prompt's tokens into the block table
            page.keyboard.press("ArrowDown")
            said.append(page.locator("[data-testid='stage-live']").first.inner_text())
        assert said[0] != idle and said[-1] == readout.inner_text()
        assert page.locator(".kvviz-stage .lit").count() > 0  # the part said is lit on the stage too
        assert any("block" in s.lower() for s in said) and any("token" in s.lower() or "position" in s.lower()
                                                               for s in said), said
        assert len(set(said)) > 10, said  # one stop after another, each its own sentence
        page.keyboard.press("ArrowUp")
        assert page.locator("[data-testid='stage-live']").first.inner_text() == said[-2]
        page.keyboard.press("Escape")
        assert readout.inner_text() == idle and page.locator(".kvviz-stage .lit").count() == 0
