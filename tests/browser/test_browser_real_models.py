"""Issue 59: the lecture on the real models, on a projector. Prefill and decode taught in Chromium at 1280x720 in
presenter mode, with the defaults, to the lesson's last step: the stage's bar, tokens, cache, block table(s), pool(s)
and bill stay on the first screen at every step checked, on SmolLM2 (30 layers, 9 query heads over 3 KV heads) and
on Gemma 3 past its sliding window (two layer groups, each with its table and pool; the blocks its window gives
back struck through, said in the step's sentence, and drawn as given back in the band). axe-core finds no serious
or critical violation after Prefill, mid-lesson and at the end, in presenter and normal mode and on a phone.
Also the keyboard: ← from the page, and the focus kept on a stage control that redraws the stage.

Skipped where a model is not fetched. Screenshots go to artifacts/screenshots/ (docs/screenshots/ keeps some).
"""

import re
from urllib.parse import quote

import pytest
from playwright.sync_api import expect

from kvviz.hub.fetch import fetched_folder
from kvviz.lessons.prefill_decode.state import PAST_THE_WINDOW

from app_reads import no_exceptions
from axe_audit import violations
from chromium import SCREENSHOTS, SLOW_S, browser_page, click_to_next_step, press, stage_caption, still, wait_drawn

HEIGHT = 720
# what the class must see, each a locator's CSS: the first match of each must lie within the first screen
PARTS = {"step bar": ".kvviz-stage .bar", "tokens": "[data-testid='stage-chips']",
         "cache": "[data-testid='stage-cache']", "block table": "[data-testid^='stage-block-table']",
         "pool": "[data-testid^='stage-pool']", "bill": "[data-testid='stage-bill']",
         "step's note": "[data-testid='stage-under']"}


def fetched(name: str):
    return pytest.mark.skipif(fetched_folder(name) is None,
                              reason=f"{name} is not fetched here; run `kvviz fetch {name}`")


def off_screen(page, height: int = HEIGHT) -> dict:
    """The stage's parts that do not lie whole within the first screen, with where they end."""
    far = {}
    for name, css in PARTS.items():
        for box in [page.locator(css).nth(i).bounding_box() for i in range(page.locator(css).count())]:
            if box is None or box["y"] < 0 or box["y"] + box["height"] > height + 0.5:
                far[name] = None if box is None else round(box["y"] + box["height"])
    return far


def next_token(page) -> bool:
    """Press Next token and wait for the next step; False once the lesson has ended (the button is disabled)."""
    button = page.get_by_role("button", name="Next token").first
    if button.is_disabled():
        return False
    click_to_next_step(page, button, timeout=SLOW_S)
    return True


def prefilled(page, address: str) -> None:
    """Open `address` (a Prefill and decode link) with a model's long timeouts and press Prefill."""
    page.set_default_timeout(SLOW_S * 1000)
    page.goto(address)
    wait_drawn(page, page.get_by_role("button", name="Prefill", exact=True), timeout=SLOW_S)
    press(page, "Prefill", shows=stage_caption(page), timeout=SLOW_S)


def audit(page, where: str, found: dict) -> None:
    problems = violations(page)
    if problems:
        found[where] = problems


@fetched("smollm2")
def test_smollm2_fills_one_projector_screen_to_the_lessons_end(app_url):
    found, far = {}, {}
    with browser_page(1280, HEIGHT) as page:
        prefilled(page, f"{app_url}/prefill_decode?model=smollm2&presenter=1")
        far["prefill"] = off_screen(page)
        audit(page, "after Prefill", found)
        steps = 0
        while next_token(page):  # the chat model ends its turn on its own, under the 48 tokens asked for
            steps += 1
            if steps == 6:
                far["step 6"] = off_screen(page)
                audit(page, "at step 6", found)
        no_exceptions(page)
        assert 6 < steps < 47, steps
        still(page)
        # issue 59 item 8: the bar says the lesson ended before the 47 steps asked for (it once jumped without a word)
        expect(stage_caption(page)).to_have_text(f"Step {steps} of {steps}, ended early")
        expect(stage_caption(page)).to_have_attribute("title", "47 steps were asked for; the step's sentence says why")
        far["end"] = off_screen(page)
        audit(page, "at the end", found)
        answer = page.locator(".st-key-lesson_answer p").first.bounding_box()
        assert answer["height"] < 60, answer  # one line, however long the answer grew
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / "stage_end_smollm2_presenter_1280x720.png"))
    assert not any(far.values()), f"past the first screen: {far}"
    assert not found, f"axe: {found}"


@fetched("smollm2")
def test_smollm2s_last_step_fits_a_1366x768_projector_with_its_note(app_url):
    """At 1366 px the band's heads and layers wrap onto a second line: the step's note, drawn under the cache, ended
    at y=774 on a 768 px screen; it now sits under the bill, in the column beside the cache."""
    with browser_page(1366, 768) as page:
        prefilled(page, f"{app_url}/prefill_decode?model=smollm2&presenter=1")
        while next_token(page):
            pass
        still(page)
        expect(page.locator("[data-testid='stage-under']")).to_contain_text("went back to the pool")
        assert not off_screen(page, 768), off_screen(page, 768)


@fetched("gemma3")
def test_gemma3s_sliding_layers_give_blocks_back_on_one_screen(app_url):
    found, far = {}, {}
    with browser_page(1280, HEIGHT) as page:
        prefilled(page, f"{app_url}/prefill_decode?model=gemma3&presenter=1&tokens=14&prompt={quote(PAST_THE_WINDOW)}")
        expect(page.locator("[data-testid='stage-head-groups']")).to_contain_text("4 query heads share 1 KV head (MQA)")
        assert page.locator("[data-testid='stage-block-table-0']").count() == 1  # a table and a pool per group
        assert page.locator("[data-testid='stage-pool-1']").count() == 1
        far["prefill"] = off_screen(page)

        next_token(page)  # step 1: the window has passed the first two blocks of 16 (548 + 1 - 512 = 37 positions)
        sentence = page.locator("[data-testid='stAlertContentSuccess']").first.inner_text()
        assert "moved past blocks 0, 1" in sentence, sentence
        expect(page.locator("[data-testid='stage-slid']")).to_have_text("gave back 0, 1")
        sliding = page.locator("[data-testid='stage-block-table-1']")
        expect(sliding).to_contain_text("2 given back")  # the struck-out entries, counted where they are folded
        assert page.locator("[data-testid='stage-block-table-0']").inner_text().count("given back") == 0
        gone = page.locator("[data-testid='stage-cache'] rect[data-older='gone']").evaluate_all(
            "rects => [...new Set(rects.map(r => Number(r.dataset.layer)))]")
        assert gone and 5 not in gone, gone  # the sliding layers drawn (0-4), not the full layer 5
        expect(page.locator("[data-testid='stage-slides']")).to_contain_text("they hold the last 517 of 549")
        audit(page, "at step 1", found)
        still(page)
        far["step 1"] = off_screen(page)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / "stage_gemma3_window_gives_back_presenter_1280x720.png"))

        while next_token(page):
            pass
        no_exceptions(page)
        expect(stage_caption(page)).to_have_text("Step 13 of 13")
        still(page)
        far["end"] = off_screen(page)
        audit(page, "at the end", found)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / "stage_end_gemma3_past_window_presenter_1280x720.png"))
    assert not any(far.values()), f"past the first screen: {far}"
    assert not found, f"axe: {found}"


@fetched("gemma3")
@pytest.mark.parametrize("mode, size", [("normal", (1280, 720)), ("phone", (390, 844))])
def test_gemma3s_last_step_passes_axe(app_url, mode, size):
    with browser_page(*size) as page:
        page.set_default_timeout(SLOW_S * 1000)
        page.goto(f"{app_url}/prefill_decode?model=gemma3&tokens=14&step=13&prompt={quote(PAST_THE_WINDOW)}")
        wait_drawn(page, stage_caption(page, 13), timeout=SLOW_S)
        no_exceptions(page)
        problems = violations(page)
        if mode == "normal":  # beside the sidebar the bill's first line stays on the first screen
            bill = page.locator("[data-testid='stage-bill-blocks']").bounding_box()
            assert bill["y"] + bill["height"] <= size[1], bill
    assert not problems, problems


def test_left_steps_back_from_the_page_and_a_stage_control_keeps_the_focus(app_url):
    with browser_page(1280, HEIGHT) as page:
        page.goto(f"{app_url}/prefill_decode?model=bundled")
        press(page, "Prefill", shows=stage_caption(page))
        for _ in range(2):
            next_token(page)
        page.evaluate("() => document.activeElement && document.activeElement.blur()")
        page.keyboard.press("ArrowLeft")  # the page has the focus, not the stage
        expect(stage_caption(page)).to_have_text(re.compile(r"^Step 1 of"))
        head = page.locator(".kvviz-stage [data-testid='stage-head-groups'] .qhead[data-head='1']")
        head.focus()
        page.keyboard.press("Enter")  # picks the head: the stage draws itself again around it
        expect(page.locator(".kvviz-stage .qhead.on[data-head='1']")).to_have_count(1)
        focused = page.evaluate("() => { const stage = [document, ...[...document.querySelectorAll('*')]"
                                ".filter(e => e.shadowRoot).map(e => e.shadowRoot)]"
                                ".map(r => r.querySelector('.kvviz-stage'))"
                                ".find(Boolean); const a = stage.getRootNode().activeElement; "
                                "return a && stage.contains(a) ? a.dataset.head : null; }")
        assert focused == "1"
