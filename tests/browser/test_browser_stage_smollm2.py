"""The stage on SmolLM2-135M-Instruct (issue 32 item 3) in a real browser at a projector's 1280x720:
30 layers folded to a band with a strip of all 30, 9 query heads grouped under the 3 KV heads they
share, the chat template's special tokens as chips of their own kind; normal and presenter mode.

Skipped where SmolLM2 is not fetched (`kvviz fetch smollm2`). Screenshots go to artifacts/screenshots/.
"""

import re
from urllib.parse import quote

import pytest
from playwright.sync_api import expect

from kvviz.hub.fetch import fetched_folder

from app_reads import no_exceptions
from chromium import SCREENSHOTS, SLOW_S, browser_page, click_to_next_step, press, stage_caption, still, wait_drawn
from room_pages import step_sentence

pytestmark = pytest.mark.skipif(fetched_folder("smollm2") is None,
                                reason="SmolLM2 is not fetched here; run `kvviz fetch smollm2` once")
QUESTION = "What is a KV cache? Answer in one sentence."
NEXT_TOKENS = 3


@pytest.mark.parametrize("presenter", [False, True])
def test_the_stage_holds_smollm2_on_one_screen(app_url, presenter):
    with browser_page(1280, 720) as page:
        page.set_default_timeout(SLOW_S * 1000)
        page.goto(f"{app_url}/prefill_decode?model=smollm2&tokens=8&prompt={quote(QUESTION)}"
                  + ("&presenter=1" if presenter else ""))
        wait_drawn(page, page.get_by_role("button", name="Prefill", exact=True), timeout=SLOW_S)
        chat = page.get_by_role("switch", name=re.compile("^Chat: apply the model's chat template"))
        expect(chat).to_be_checked()  # an instruct model opens with its chat template on: the chips below need it
        press(page, "Prefill", shows=step_sentence(page, 0))
        for _ in range(NEXT_TOKENS):  # the button's name carries an arrow
            click_to_next_step(page, page.get_by_role("button", name="Next token").first, timeout=SLOW_S)
        stage_caption(page).get_by_text(f"Step {NEXT_TOKENS} of", exact=False).wait_for()
        no_exceptions(page)
        still(page)  # the new column's slide-in
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"stage_smollm2_{'presenter' if presenter else 'normal'}_1280x720.png"))

        cache = page.locator("[data-testid='stage-cache']").bounding_box()
        assert 0 <= cache["y"] < 720, cache  # the diagram starts on the first screen

        cells = page.locator("[data-testid='stage-layer-strip'] .lcell")
        assert cells.count() == 30
        assert page.locator("[data-testid='stage-layer-strip'] .lcell.band").count() < 30  # folded
        drawn = page.locator("[data-testid='stage-cache'] rect.cell.k").evaluate_all(
            "cells => [...new Set(cells.map(c => c.dataset.layer))].map(Number)")
        cells.nth(20).click()  # a layer outside the band comes into it
        assert 20 not in drawn
        assert page.locator("[data-testid='stage-cache'] rect.cell.k[data-layer='20']").count() > 0

        groups = page.locator("[data-testid='stage-head-groups'] .hgroup")
        assert groups.count() == 3
        for g in range(3):
            heads = groups.nth(g).locator(".qhead").evaluate_all("qs => qs.map(q => Number(q.dataset.head))")
            assert heads == [3 * g, 3 * g + 1, 3 * g + 2]

        special = page.locator(".kvviz-stage .chips .chip.special").all_inner_texts()
        assert "<|im_start|>" in special and "<|im_end|>" in special, special
        ordinary = page.locator(".kvviz-stage .chips .chip:not(.special)").all_inner_texts()
        assert not any(text.startswith("<|") for text in ordinary), ordinary
        assert page.locator("[data-testid='stage-legend'] .chip.special").count() == 1


def test_a_long_prompts_prefill_shows_what_it_runs_and_for_how_long(app_url):
    """Issue 33 item 1: Prefill of a long prompt on SmolLM2 ran for seconds with the page only dimmed; now a
    spinner names the work (prompt tokens, layers), its estimate and the seconds so far, until the stage draws."""
    prompt = " ".join(["The cache keeps every key and value the model has computed so far."] * 40)  # about 550 tokens
    with browser_page(1280, 720) as page:
        page.set_default_timeout(SLOW_S * 1000)
        page.goto(f"{app_url}/prefill_decode?model=smollm2&tokens=4&prompt={quote(prompt)}")
        wait_drawn(page, page.get_by_role("button", name="Prefill", exact=True), timeout=SLOW_S)
        page.get_by_role("button", name="Prefill", exact=True).click()
        spinner = page.locator("[data-testid='stSpinner']")
        spinner.wait_for(timeout=60_000)
        text = spinner.inner_text()
        assert "prompt tokens through the model's 30 layers" in text and "estimated about" in text, text
        counted = int(re.search(r"Prefill: ([\d,]+) prompt tokens", text).group(1).replace(",", ""))
        wait_drawn(page, stage_caption(page).get_by_text("Prefill (step 0 of", exact=False))
        assert spinner.count() == 0
        # the spinner counted what ran: the chat template's tokens too (issue 50: it said 7 where the page said 37)
        said = page.locator("[data-testid='stAlertContentSuccess']").filter(has_text="prompt tokens ran").first
        ran = int(re.search(r"All ([\d,]+) prompt tokens ran", said.inner_text()).group(1).replace(",", ""))
        assert counted == ran and page.locator(".kvviz-stage .chips .chip.special").count() >= 2, (counted, ran)
        no_exceptions(page)
