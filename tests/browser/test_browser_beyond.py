"""The views beyond the article, in a real browser at a projector's 1280x720 in presenter mode:
the Speculative decoding page and the Paged page's fork and swap tabs. Stepped and run like a
teacher would; no text cut, no exception box, and the key figures equal what the engine computes
for the same settings (run here directly).

Screenshots go to screenshots/beyond/ (ignored by git).
"""

import re
from urllib.parse import urlparse

import pytest
from playwright.sync_api import expect

from kvviz.lessons.paged_batching import fork as fork_lesson
from kvviz.lessons.paged_batching import swap as swap_lesson
from kvviz.lessons.paged_batching.fork_view import DEFAULT_PROMPT as FORK_PROMPT
from kvviz.lessons.paged_batching.state import DEFAULT_TABLE
from kvviz.lessons.speculative.logic import DEFAULT_PROMPT as SPEC_PROMPT
from kvviz.lessons.speculative.logic import SpeculativeLesson
from kvviz.models import load_model
from kvviz.shapes import format_bytes
from kvviz.ui.app_server import ROOT

from app_reads import metric, metric_box, metric_shows, no_exceptions
from chromium import browser_page, open_tab, press, stage_caption, still, wait_drawn
from page_texts import CUT_TEXT_JS

SHOTS = ROOT / "screenshots" / "beyond"
FORK_TAB, SWAP_TAB = "Parallel sampling: one prompt, n samples", "Preemption: swap or recompute"


@pytest.fixture(scope="module")
def lm():
    return load_model("bundled")


def check(page, name):
    """No text cut, no exception box; a screenshot of the whole page (the window made as tall)."""
    assert page.evaluate(CUT_TEXT_JS) == [], name
    no_exceptions(page)
    assert page.get_by_text("Session State API").count() == 0  # no warning about widget values
    SHOTS.mkdir(parents=True, exist_ok=True)
    height = page.evaluate("() => Math.max(...[...document.querySelectorAll('[data-testid=\"stMain\"] *')]"
                           ".map(e => e.scrollHeight || 0), 720)")
    page.set_viewport_size({"width": 1280, "height": min(int(height) + 40, 7000)})
    still(page)  # the resize's relayout: its animations end before the picture
    page.screenshot(path=str(SHOTS / f"{name}.png"))
    page.set_viewport_size({"width": 1280, "height": 720})


def test_speculative_page_stepped_and_run_matches_the_engine(app_url, lm):
    expected = SpeculativeLesson.start(lm, SPEC_PROMPT, 5, 48, 4)  # the page's defaults, but k = 5
    while expected.step():
        pass
    with browser_page(1280, 720) as page:
        page.goto(f"{app_url}/speculative?presenter=1")
        wait_drawn(page, page.get_by_role("button", name="Start"), timeout=180)
        k = page.locator("[data-testid='stSlider']").filter(has_text="Draft tokens per step").get_by_role("slider")
        k.focus()
        k.press("ArrowRight")  # 4 -> 5
        # Nothing on the page shows k before a run, so this move's run draws nothing to wait on: the slider holds
        # the value, and Start's press carries it to the server (the metrics below check the run used k = 5)
        expect(k).to_have_value("5")
        press(page, "Start", shows=metric_shows(page, "Forward passes", "1"))  # the prefill's pass
        for passes in (2, 3, 4):
            press(page, "Step", shows=metric_shows(page, "Forward passes", str(passes)))
        early = expected.summary(3)
        assert metric(page, "Forward passes") == "4"
        assert metric(page, "Tokens generated") == str(early["tokens"])
        assert metric(page, "Tokens per pass") == f"{early['tokens_per_pass']:.2f}"
        check(page, "speculative-step3")
        press(page, "Run to the end", shows=page.get_by_text("Both finished:", exact=False))
        last = len(expected.records) - 1
        final = expected.summary(last)
        assert metric(page, "Forward passes") == str(len(expected.records))
        assert metric(page, "Tokens per pass") == f"{final['tokens_per_pass']:.2f}"
        assert metric(page, "Drafts accepted") == f"{final['accepted']} of {final['proposed']}"
        expect(page.get_by_text(f"Both finished: {len(expected.records)} forward passes with drafts against "
                                f"{len(expected.plain_records)} without, for the same tokens.")).to_be_visible()
        check(page, "speculative-end")
        # away to the page before (the closing page of the article's arc) and back: the run is still there
        page.get_by_role("link", name="Previous: Putting it together").first.click()
        wait_drawn(page, page.get_by_text("The long-context job's choices").first)
        page.get_by_role("link", name="Next: Speculative decoding").first.click()
        wait_drawn(page, page.get_by_role("button", name="Reset", exact=True))  # not Plotly's "Reset axes"
        assert metric(page, "Forward passes") == str(len(expected.records))  # the latest pass, not pass 0
        page.get_by_role("button", name="Prompt and settings").click()  # the settings fold away during a run
        shown = page.locator("[data-testid='stSlider']").filter(has_text="Draft tokens per step").inner_text()
        assert shown.split()[5] == "5", "the setting the run was made with, not the default"  # "Draft … (k) 5 1 8"
        page.keyboard.press("Escape")
        press(page, "Reset", shows=page.get_by_text(re.compile("^Press Start: the prompt is prefilled")))  # run gone
        assert page.locator("[data-testid='stMetric']").count() == 0
        no_exceptions(page)


def test_paged_fork_and_swap_tabs_match_the_engine(app_url, lm):
    run = fork_lesson.run_fork(lm, FORK_PROMPT, n=4, max_tokens=12, block_size=4)  # the tab's defaults
    prompts = [str(row["prompt"]).replace("\\n", "\n") for row in DEFAULT_TABLE if str(row["prompt"]).strip()]
    modes = swap_lesson.compare(lm, prompts, block_size=8, num_blocks=12, max_tokens=32, runs=1)
    with browser_page(1280, 720) as page:
        page.goto(f"{app_url}/paged_batching?presenter=1")
        wait_drawn(page, page.get_by_role("tab", name=FORK_TAB), timeout=180)
        page.get_by_role("tab", name=FORK_TAB).click()
        press(page, "Fork", shows=metric_box(page, "Shared blocks"))
        step = page.locator("[data-testid='stSlider']").filter(has_text="Step").get_by_role("slider")
        for at in (0, 1, len(run.records) - 1):  # the fork, the copies, the end
            step.focus()
            step.press("Home")
            for _ in range(at):
                step.press("ArrowRight")
            # the run for the slider's last value moves the stage there (at 0, where the Fork left it, none runs)
            wait_drawn(page, stage_caption(page).filter(has_text=re.compile(rf"^Step {at} of")))
            facts = fork_lesson.summary(run, at)
            assert metric(page, "Shared blocks") == str(facts["shared_blocks"])
            assert metric(page, "Copies (copy-on-write)") == str(facts["copies"])
            assert metric(page, "Blocks held now") == str(facts["blocks_now"])
            assert metric(page, "Saved now") == format_bytes(facts["bytes_saved_now"])
            check(page, f"fork-step{at}")
        assert fork_lesson.summary(run, 1)["blocks_saved_now"] == 3 * (run.num_prompt_tokens // 4)

        page.get_by_role("tab", name=SWAP_TAB).click()
        timed = page.locator("[data-testid='stNumberInput']").filter(has_text="Timed runs per mode").locator("input")
        timed.fill("0")  # one run each, not timed: quick, and no timing to check
        timed.press("Enter")
        # nothing on the page shows the number before a comparison (0 is also its default): the box holds it, and
        # the press below carries it to the server
        expect(timed).to_have_value("0")
        press(page, "Compare swap and recompute", shows=page.get_by_text("Outputs identical"))
        table = page.locator("[data-testid='stTable']").filter(has_text="tokens recomputed")
        cells = {mode: table.locator("tbody tr").filter(has_text=mode).first.locator("td").all_inner_texts()
                 for mode in ("recompute", "swap")}
        for mode, run_of_mode in modes.items():
            preemptions, recomputed, out, back, fallbacks, seconds = cells[mode][:6]
            assert (int(preemptions), int(recomputed)) == (run_of_mode.preemptions, run_of_mode.recomputed_tokens)
            assert (out, back) == (format_bytes(run_of_mode.bytes_out), format_bytes(run_of_mode.bytes_in))
            assert seconds == "not timed"
        assert modes["swap"].preemptions > 0, "the default pool is tight enough to preempt"
        check(page, "swap")


def test_the_fork_tabs_prompt_outlives_another_page_and_streamlit_warns_nothing(app_url):
    """Issue 50: the Fork tab's prompt, kept across a visit to another page, was a widget with a value= beside a
    value the Session State API had set, which Streamlit logs as a warning (once a server process)."""
    mine = "JULIET:\nO happy dagger, this is thy sheath."
    with browser_page(1280, 900) as page:
        page.goto(f"{app_url}/paged_batching")
        wait_drawn(page, page.get_by_role("tab", name=FORK_TAB), timeout=180)
        prompt = open_tab(page, FORK_TAB).get_by_label("Prompt", exact=True)
        prompt.fill(mine)
        prompt.press("Control+Enter")
        # Nothing on the page shows the prompt before a Fork, so this edit's run draws nothing to wait on: the box
        # has applied it (its "Press Ctrl+Enter to apply" is gone), and the link's click carries it to the server
        expect(page.get_by_test_id("InputInstructions").filter(has_text="to apply")).to_have_count(0)
        page.get_by_role("link", name="Memory bill", exact=True).first.click()  # in the app: the same session
        wait_drawn(page, page.get_by_text("The formula, filled in"))
        page.get_by_role("link", name="Paged cache and batching", exact=True).first.click()
        wait_drawn(page, page.get_by_role("tab", name=FORK_TAB), timeout=180)
        expect(open_tab(page, FORK_TAB).get_by_label("Prompt", exact=True)).to_have_value(mine)
        no_exceptions(page)
    log = (ROOT / "artifacts" / f"streamlit-{urlparse(app_url).port}.log").read_text()
    assert "was created with a default value but also had its value set" not in log, log[-2000:]
