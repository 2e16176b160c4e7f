"""Issue 12 in a real browser: Play/Pause keeps the view, nothing is cut off at 1280x720, and the
app asks no host but its own for anything."""

import re
import time
from urllib.parse import urlparse

import pytest
from playwright.sync_api import expect

from app_reads import no_exceptions
from chromium import SLOW_S, browser_page, click_to_next_step, run_finished, stage_caption, wait_drawn
from lesson_steps import prefill_lesson
from room_pages import shown_step, step_sentence

SLOW_MS = SLOW_S * 1000

# text cut with an ellipsis, or a code block that hides part of a line behind a sideways scroll
CUT_OFF_JS = """() => {
  const cut = [];
  const selectors = '[data-testid="stMetricLabel"], [data-testid="stMetricValue"], [data-testid="stMetricDelta"],'
    + ' [data-testid="stBaseButton-secondary"] p, [data-testid="stBaseButton-primary"] p, [data-testid="stCode"] pre,'
    + ' [data-testid="stMarkdownContainer"] p';
  for (const el of document.querySelectorAll(selectors)) {
    if (!el.getClientRects().length || !el.clientWidth || !el.innerText.trim()) continue;  // hidden or empty
    for (const node of [el, ...el.querySelectorAll('*')]) {
      if (node.scrollWidth > node.clientWidth + 1 && (getComputedStyle(node).textOverflow === 'ellipsis'
          || node.tagName === 'PRE')) {
        cut.push(el.innerText.slice(0, 60));
        break;
      }
    }
  }
  return cut;
}"""


# Every step the page's sentence names as the page draws it (room_pages.shown_step's reading, made in the page on
# each change rather than read now and then), each once: window.__shownSteps
SHOWN_STEPS_JS = """() => {
  const seen = window.__shownSteps = [];
  const read = () => {
    const text = document.querySelector("[data-testid='stAlertContentSuccess']")?.innerText ?? "";
    const found = text.startsWith("Prefill.") ? "0" : text.match(/^Decode step (\\d+)/)?.[1];
    if (found !== undefined && seen[seen.length - 1] !== Number(found)) seen.push(Number(found));
  };
  new MutationObserver(read).observe(document.body, {subtree: true, childList: true, characterData: true});
  read();
}"""


def view_slider(page):
    return page.get_by_role("slider", name=re.compile("Look back at step"))


def slider_value(page) -> int:
    return int(view_slider(page).input_value())  # a native range input: its value, not aria-valuenow


def test_play_follows_the_newest_step_and_pause_keeps_the_view(app_url):
    with browser_page(1280, 720) as page:
        page.set_default_timeout(SLOW_MS)
        prefill_lesson(page, app_url)
        for _ in range(5):
            click_to_next_step(page, page.get_by_role("button", name="Next token"), timeout=SLOW_S)
        assert shown_step(page) == 5
        for step in (4, 3, 2):  # one key at a time, each once its step shows: a key pressed mid-run can be lost
            view_slider(page).press("ArrowLeft")
            wait_drawn(page, step_sentence(page, step), timeout=SLOW_S)
        assert shown_step(page) == 2 == slider_value(page)
        page.evaluate(SHOWN_STEPS_JS)
        page.get_by_role("button", name="Play").click()
        sentence = page.locator("[data-testid='stAlertContentSuccess']").first
        expect(sentence).to_have_text(re.compile(r"^Decode step (9|[1-9]\d+)\b"), timeout=SLOW_MS)  # step 9 or later
        shown = page.evaluate("() => window.__shownSteps")
        first_played = next((i for i, step in enumerate(shown) if step >= 6), len(shown))  # the first step Play ran
        seen = shown[first_played:]
        # playing shows the newest step: never the old view (2) or prefill (0) again
        assert seen and max(seen) >= 9 and min(seen) >= 6, shown
        assert seen == sorted(seen), shown
        page.get_by_role("button", name="Pause").click()
        # Pause's run draws Play again (its name ends with the button's shortcut, P)
        wait_drawn(page, page.get_by_role("button", name=re.compile(r"^Play\b")), timeout=SLOW_S)
        paused = shown_step(page)
        assert paused == int(view_slider(page).get_attribute("max"))
        time.sleep(3)  # the scenario: paused, nothing moves for 3 s (Play stepped every 0.7 s)
        run_finished(page, timeout=SLOW_S)
        assert shown_step(page) == paused == slider_value(page)
        no_exceptions(page)


# the Prefill and decode views that test_nothing_is_cut_off opens, and a text only each draws
VIEW_SHOWS = {"Cache per layer": "Every position costs", "Work saved": "Tokens run, with cache",
              "Memory bill": "Last block's slack"}


@pytest.mark.parametrize("width, height", [(1280, 720), (1920, 1080)])
def test_nothing_is_cut_off(app_url, width, height):
    with browser_page(width, height) as page:
        page.set_default_timeout(SLOW_MS)
        prefill_lesson(page, app_url)
        for _ in range(3):
            click_to_next_step(page, page.get_by_role("button", name="Next token"), timeout=SLOW_S)
        for view, shows in VIEW_SHOWS.items():
            page.locator("[data-testid='stRadio']").get_by_text(view, exact=True).click()
            # what only this view draws (the first is the view shown already: its click runs nothing)
            wait_drawn(page, page.get_by_text(shows).first, timeout=SLOW_S)
            assert page.evaluate(CUT_OFF_JS) == [], view
        page.goto(f"{app_url}/prefill_decode?presenter=1")
        wait_drawn(page, page.get_by_role("button", name="Prefill"), timeout=SLOW_S)
        page.get_by_role("button", name="Prefill").click()
        wait_drawn(page, stage_caption(page), timeout=SLOW_S)
        assert page.evaluate(CUT_OFF_JS) == [], "presenter mode"
        page.goto(f"{app_url}/paged_batching")
        page.get_by_role("button", name="Start").click()
        wait_drawn(page, stage_caption(page), timeout=SLOW_S)
        for _ in range(2):
            click_to_next_step(page, page.get_by_role("button", name="Step", exact=True), timeout=SLOW_S)
        assert page.evaluate(CUT_OFF_JS) == [], "paged"
        no_exceptions(page)


MAIN_ACTIONS = {"": None, "prefill_decode": "Prefill", "memory_bill": None, "model_lab": "Measure",
                "paged_batching": "Start", "cache_strategies": "Run every strategy",
                "batch_generation": "Run the batch"}
# what each action's run draws, which its page did not show before
ACTION_SHOWS = {"Prefill": "[data-testid='stage-step']", "Measure": "text=The engine's cache held",
                "Start": "[data-testid='stage-step']",
                "Run every strategy": "text=After the last step the full (dynamic) cache holds",
                "Run the batch": "[data-testid='stMetricLabel'] >> text=Generated tokens"}


def test_no_request_leaves_the_app(app_url):
    own = urlparse(app_url).netloc
    with browser_page(1280, 720) as page:
        page.set_default_timeout(SLOW_MS)
        requests = []
        page.on("request", lambda request: requests.append(request.url))
        for path, action in MAIN_ACTIONS.items():
            page.goto(f"{app_url}/{path}")
            wait_drawn(page, page.locator("[data-testid='stMain'] h1").first, timeout=SLOW_S)
            if path == "cache_strategies":  # its defaults run in test_browser_lecture_stepped; 2 tokens draw the same
                tokens = page.locator("[data-testid='stSlider']").filter(has_text="Tokens to generate").get_by_role(
                    "slider")
                tokens.press("Home")
                # its run draws nothing new: the value goes to the server with the Run click, whose run uses it
                expect(tokens).to_have_value("2")
            if action:
                page.get_by_role("button", name=action).first.click()
                wait_drawn(page, page.locator(ACTION_SHOWS[action]), timeout=SLOW_S)
            no_exceptions(page)
        outside = [url for url in requests if urlparse(url).scheme in ("http", "https", "ws", "wss")
                   and urlparse(url).netloc != own]
        assert requests and outside == []
