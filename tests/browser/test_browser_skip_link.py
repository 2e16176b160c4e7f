"""Issue 59 item 7: it took 23 Tabs to reach Prefill. The page's first stop for the keyboard is a skip link
(kvviz.ui.skip_link), shown when it has the focus, and Enter on it puts the focus on the lesson's first control:
the example prompt before Prefill, Next token after it, Start on the Paged lesson; a page without a lesson's
controls gets its first control, never a help icon."""

import pytest

from chromium import browser_page, press, run_finished, wait_drawn


def skip(page, tab: bool = True) -> str:
    """Tab once from the top of the page (or, after a click has moved where Tab starts, focus the link), check the
    skip link shows, press Enter: what has the focus then."""
    page.wait_for_function("() => !!document.getElementById('kvviz-skip')")
    if tab:
        page.keyboard.press("Tab")
    else:
        page.focus("#kvviz-skip")
    assert page.evaluate("() => document.activeElement.id") == "kvviz-skip"
    box = page.locator("#kvviz-skip").bounding_box()
    assert box["width"] > 100 and box["y"] >= 0, box  # shown on the screen while it has the focus
    page.keyboard.press("Enter")
    return page.evaluate("() => document.activeElement.getAttribute('aria-label') || document.activeElement.innerText")


@pytest.mark.parametrize("path, first", [("prefill_decode", "Example prompts"), ("paged_batching", "Start"),
                                         ("memory_bill", "Start from a model")])
def test_the_first_tab_is_a_skip_link_to_the_lessons_controls(app_url, path, first):
    with browser_page(1280, 720) as page:
        page.goto(f"{app_url}/{path}")
        run_finished(page)
        assert skip(page).strip().startswith(first)


def test_after_prefill_the_skip_link_lands_on_next_token(app_url):
    with browser_page(1280, 720) as page:
        page.goto(f"{app_url}/prefill_decode")
        press(page, "Prefill", page.get_by_role("button", name="Next token"))
        wait_drawn(page, page.get_by_test_id("kvviz-stage"))
        run_finished(page)
        assert skip(page, tab=False).strip().startswith("Next token")
        assert page.locator("#kvviz-skip").bounding_box()["x"] < 0  # hidden again once the focus has left it
