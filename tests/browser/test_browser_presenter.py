"""Presenter mode on every page at 1280x720 (a classroom projector): no text cut, a screenshot each.

The screenshots go to screenshots/presenter/ (ignored by git, so a test run never changes the
tree); copy them to docs/presenter/ by hand to refresh the pictures the docs show.
"""

from kvviz.lessons.lecture import LECTURE
from kvviz.ui.app_server import ROOT

from app_reads import view_shows
from chromium import browser_page, stage_caption, still, wait_drawn
from lesson_steps import url_of
from page_texts import CUT_TEXT_JS

SHOTS = ROOT / "screenshots" / "presenter"


def check(page, name, where, cut):
    """Record text cut anywhere on the page (scrolled through), and keep a screenshot of the first screen."""
    problems = page.evaluate(CUT_TEXT_JS)
    if problems:
        cut[where] = problems
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def test_presenter_mode_on_every_page_at_1280x720(app_url):
    SHOTS.mkdir(parents=True, exist_ok=True)
    cut = {}
    with browser_page(width=1280, height=720) as page:
        for index, lesson in enumerate(LECTURE):
            page.goto(url_of(app_url, lesson) + "?presenter=1")
            wait_drawn(page, page.locator("h1").first)
            if lesson.path.endswith("prefill_decode.py"):
                page.get_by_role("button", name="Prefill").click()
                wait_drawn(page, stage_caption(page))
            still(page)  # the stage's slide-ins end before the page is measured and pictured
            assert page.locator("section[data-testid='stSidebar']").is_hidden()
            assert page.get_by_role("button", name="Leave presenter mode").is_visible()
            if index + 1 < len(LECTURE):  # Next reachable without the sidebar
                assert page.get_by_role("link", name=f"Next: {LECTURE[index + 1].title}").first.is_visible()
            # charts scaled: plotly's base font is larger than the normal 16 px
            if page.locator(".js-plotly-plot").count():
                size = page.evaluate("() => document.querySelector('.js-plotly-plot').layout.font.size")
                assert size > 16
            name = f"{index}-{lesson.path.removeprefix('lessons/').removesuffix('.py')}"
            check(page, name, lesson.title, cut)
            if lesson.path.endswith("prefill_decode.py"):  # the two explanation views too
                for view, short in (("Inside attention", "inside"), ("Why decode is memory-bound", "bound")):
                    page.get_by_text(view, exact=True).click()
                    wait_drawn(page, view_shows(page, view))
                    page.get_by_text(view, exact=True).evaluate("e => e.scrollIntoView({block: 'start'})")
                    check(page, f"{name}-{short}", f"{lesson.title} / {view}", cut)
        # the way out works: presenter mode off, the sidebar back
        page.get_by_role("button", name="Leave presenter mode").click()
        wait_drawn(page, page.locator("section[data-testid='stSidebar']"))  # hidden until that run
        assert "presenter" not in page.url
    assert not cut, f"text cut at 1280x720 in presenter mode: {cut}"
