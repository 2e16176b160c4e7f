"""The Memory bill at a 1280x720 projector, presenter and normal mode (issue 33, item 9): the sliders
the class watches (Context, Batch, Cache dtype, Accelerator) and the bill they change share the first
screen, so that moving one changes numbers the class can see without scrolling.

Screenshots go to screenshots/presenter/bill-*.png (ignored by git).
"""

import pytest
from playwright.sync_api import expect

from kvviz.ui.app_server import ROOT

from app_reads import metric_shows, no_exceptions
from chromium import browser_page, run_finished, wait_drawn

MODES = pytest.mark.parametrize("presenter", [False, True], ids=["normal", "presenter"])
SHOTS = ROOT / "screenshots" / "presenter"
WIDTH, HEIGHT = 1280, 720


def on_first_screen(locator, what: str) -> None:
    box = locator.bounding_box()
    assert box is not None, f"{what} is not drawn"
    assert box["y"] >= 0 and box["y"] + box["height"] <= HEIGHT, f"{what} at y={box['y']:.0f}-" \
                                                                   f"{box['y'] + box['height']:.0f}, past {HEIGHT}"
    assert box["x"] >= 0 and box["x"] + box["width"] <= WIDTH, f"{what} cut at the right edge"


def bill_value(page) -> str:
    metric = page.locator("[data-testid='stMetric']").filter(has_text="KV cache").first
    return metric.locator("[data-testid='stMetricValue']").inner_text()


@MODES
def test_the_bills_sliders_and_its_figures_share_the_first_screen(app_url, presenter):
    SHOTS.mkdir(parents=True, exist_ok=True)
    mode = "presenter" if presenter else "normal"
    with browser_page(WIDTH, HEIGHT) as page:
        page.goto(f"{app_url}/memory_bill" + ("?presenter=1" if presenter else ""))
        wait_drawn(page, page.get_by_text("The formula, filled in"))
        no_exceptions(page)
        controls = {name: page.get_by_role("slider", name=name) for name in ("Context", "Batch", "Cache dtype")}
        controls["Accelerator"] = page.get_by_role("combobox", name="Accelerator")
        for name, control in controls.items():
            on_first_screen(control, f"the {name} control")
        metric = page.locator("[data-testid='stMetric']").filter(has_text="KV cache").first
        on_first_screen(metric, "the KV cache figure")
        on_first_screen(page.locator("[data-testid='stMetric']").filter(has_text="Weights").first, "the weights")
        on_first_screen(page.get_by_text("Fits:", exact=False).first, "the fit summary")
        before = bill_value(page)
        assert before == "1.00 GiB"
        page.screenshot(path=str(SHOTS / f"bill-{mode}.png"))

        controls["Context"].press("ArrowRight")  # 8,192 -> 16,384 tokens: the bill doubles, on the same screen
        wait_drawn(page, metric_shows(page, "KV cache", "2.00 GiB"))
        assert bill_value(page) == "2.00 GiB"
        controls["Batch"].press("ArrowRight")  # 1 -> 2 requests
        wait_drawn(page, metric_shows(page, "KV cache", "4.00 GiB"))
        assert bill_value(page) == "4.00 GiB"
        assert page.evaluate("() => window.scrollY") == 0 and page.evaluate(
            "() => document.querySelector('[data-testid=\"stMain\"]').scrollTop") == 0
        on_first_screen(metric, "the KV cache figure after the move")
        no_exceptions(page)
        page.screenshot(path=str(SHOTS / f"bill-{mode}-moved.png"))


@MODES
def test_the_stages_bill_of_blocks_and_slack_is_on_the_first_screen_after_prefill(app_url, presenter):
    """Issue 33, item 11: the stage's bill line (blocks held, slack) sat just below the fold."""
    mode = "presenter" if presenter else "normal"
    with browser_page(WIDTH, HEIGHT) as page:
        page.set_default_timeout(300_000)
        page.goto(f"{app_url}/prefill_decode" + ("?presenter=1" if presenter else ""))
        page.get_by_role("button", name="Prefill").click()
        wait_drawn(page, page.locator("[data-testid='stage-bill']"))
        page.evaluate("() => window.scrollTo(0, 0)")
        bill = page.locator("[data-testid='stage-bill']")
        assert "held" in bill.inner_text() and "slack" in bill.inner_text()
        for part in ("blocks", "slack"):  # the formula under them may run on below the fold in presenter type
            on_first_screen(page.locator(f"[data-testid='stage-bill-{part}']"), f"the stage's {part} held")
        if not presenter:
            on_first_screen(bill, "the stage's bill")
        on_first_screen(page.locator("[data-testid='stage-pool']"), "the pool")
        no_exceptions(page)
        page.screenshot(path=str(SHOTS / f"stage-bill-{mode}.png"))


@MODES
def test_a_long_prompts_block_table_and_pool_are_windowed_and_the_bill_stays_up(app_url, presenter):
    """Issue 50 item 4: a 1,548-token lesson's 98 block-table entries pushed the pool and the bill 1,800 px down.
    The table and the pool show the newest entries and blocks, with a count of the rest."""
    # 412 tokens: 26 blocks
    prompt = " ".join(["ROMEO: But soft, what light through yonder window breaks? It is the east."] * 18)
    with browser_page(WIDTH, HEIGHT) as page:
        page.set_default_timeout(300_000)
        page.goto(f"{app_url}/prefill_decode" + ("?presenter=1" if presenter else ""))
        page.locator("textarea").first.fill(prompt)
        page.locator("textarea").first.press("Control+Enter")
        # the run that takes the new prompt names no example prompt any more: the box shows its placeholder
        expect(page.get_by_role("combobox", name="Example prompts")).to_have_value("")
        run_finished(page)
        page.get_by_role("button", name="Prefill").click()
        wait_drawn(page, page.locator("[data-testid='stage-bill']"))
        page.evaluate("() => window.scrollTo(0, 0)")
        table = page.locator("[data-testid='stage-block-table'] .entry")
        texts = table.all_inner_texts()
        assert (texts[0].startswith("+") and texts[0].endswith("earlier")
                and len(texts) == (7 if presenter else 13)), texts[:3]
        assert page.locator("[data-testid='stage-pool'] .block.more").count() >= 1
        on_first_screen(page.locator("[data-testid='stage-bill-blocks']"), "the stage's blocks held")
        no_exceptions(page)
        page.screenshot(path=str(SHOTS / f"stage-long-{'presenter' if presenter else 'normal'}.png"))
