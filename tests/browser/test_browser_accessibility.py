"""Issue 50 item 5: axe-core (the copy the axe-playwright-python wheel carries) over every page, in normal and
presenter mode, after Prefill on the first lesson: no serious or critical violation of the WCAG 2.0-2.2 A and
AA rules. Also: the focus ring of a control and of the stage is visible (3:1 against white), focus is on Next
token after Prefill, and the stage tells a screen reader each step in a sentence (an aria-live region)."""

import shutil
from pathlib import Path

import pytest

from kvviz.lessons.registry import LECTURE
from kvviz.ui.app_server import CHROMIUM, ROOT

from chromium import browser_page, wait_idle
from test_browser_presenter import app_url, url_of  # noqa: F401  (app_url is the fixture)

pytestmark = pytest.mark.skipif(shutil.which(CHROMIUM) is None and not (ROOT / CHROMIUM).exists(),
                                reason="Debian's chromium is not installed (.ci/run installs it)")
axe_module = pytest.importorskip("axe_playwright_python", reason="axe-playwright-python is in requirements-dev.txt")
AXE_JS = Path(axe_module.__file__).with_name("axe.min.js")
TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"]
AXE_RUN = """async (tags) => {
  const result = await axe.run(document, {runOnly: {type: 'tag', values: tags}});
  return result.violations.filter(v => ['serious', 'critical'].includes(v.impact))
    .map(v => ({id: v.id, impact: v.impact, nodes: v.nodes.slice(0, 4).map(n => n.target.join(' ') + ' :: ' +
                                                                      (n.failureSummary || '').slice(0, 160))}));
}"""


def violations(page) -> list:
    page.add_script_tag(path=str(AXE_JS))
    return page.evaluate(AXE_RUN, TAGS)


@pytest.mark.parametrize("mode", ["normal", "presenter"])
def test_no_serious_or_critical_axe_violation_on_any_page(app_url, mode):
    found = {}
    with browser_page(width=1280, height=720) as page:
        for lesson in LECTURE:
            page.goto(url_of(app_url, lesson) + ("?presenter=1" if mode == "presenter" else ""))
            page.locator("h1").first.wait_for()
            wait_idle(page)
            if lesson.path.endswith("prefill_decode.py"):
                page.get_by_role("button", name="Prefill").click()
                wait_idle(page)
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


def test_focus_is_visible_lands_on_next_token_and_the_stage_speaks(app_url):
    with browser_page(width=1280, height=720) as page:
        page.goto(f"{app_url}/prefill_decode")
        page.locator("h1").first.wait_for()
        wait_idle(page)
        page.get_by_role("button", name="Prefill").click()
        wait_idle(page)
        focused = page.evaluate("() => document.activeElement && document.activeElement.innerText")
        assert focused and "Next token" in focused, focused
        ring = page.evaluate("() => { const s = getComputedStyle(document.activeElement); "
                             "return [s.outlineStyle, s.outlineWidth, s.outlineColor]; }")
        assert ring[0] != "none" and float(ring[1].removesuffix("px")) >= 2 and contrast(ring[2]) >= 3, ring
        stage = page.locator(".kvviz-stage").first
        stage.focus()
        stage_ring = page.evaluate("() => { const s = getComputedStyle(document.activeElement); "
                                   "return [s.outlineStyle, s.outlineWidth, s.outlineColor]; }")
        assert stage_ring[0] != "none" and contrast(stage_ring[2]) >= 3, stage_ring
        live = page.locator(".kvviz-stage [aria-live='polite']").first
        before = live.inner_text()
        assert "Step" in before or "step" in before, before
        page.keyboard.press("ArrowLeft")
        page.wait_for_function("(old) => document.querySelector(\\".kvviz-stage [aria-live='polite']\\").innerText !== old",
                               arg=before)
