"""Issue 60: a lesson as one web page, opened from disk in Chromium with every request outside the file refused.
The pages are made from real runs on the bundled model: the lecture pack by `kvviz page --lecture` (each stepped
lesson at its page's defaults, and index.html), and each lesson's *Download as a web page* in the app after a
few steps. Each page is stepped to its end by the keyboard and by its buttons, played, switched to presenter
type and hovered, at a projector's 1280x720 and a phone's 390x844, with no page error, no request and no serious
or critical axe-core violation; its text stays text whatever the prompt held. Screenshots of the lecture's
pages go to docs/screenshots/page_*.png, for people to look at."""

import re
from pathlib import Path

import pytest
from axe_audit import violations
from lesson_steps import start_and_step
from playwright.sync_api import expect

from kvviz.cli.main import main
from kvviz.page.build import web_page
from kvviz.page.record import STEPPED_BY_KEY, record_lesson
from kvviz.ui.app_server import ROOT

from chromium import SLOW_S, click_to_next_step, press, shared_browser, stage_caption, still, wait_drawn

SHOTS = ROOT / "docs" / "screenshots"
SIZES = [(1280, 720), (390, 844)]
NAMES = {"prefill_decode": "kvviz-lesson.html", "paged_batching": "kvviz-paged-batching.html",
         "speculative": "kvviz-speculative.html"}
MARKUP = "<img src=x onerror=alert(1)><script>alert(2)</script>&lt;b&gt;"
LAST_STEP_JS = "() => JSON.parse(document.getElementById('kvviz-lesson').textContent).stage.steps.length - 1"


class OpenPage:
    """A page opened from disk in a fresh context of the session's Chromium: every request that is not for a
    file refused and counted, page errors, console errors and dialogs kept."""

    def __init__(self, path: Path, width: int, height: int):
        self.context = shared_browser().new_context(viewport={"width": width, "height": height})
        self.page = self.context.new_page()
        self.page.set_default_timeout(30_000)
        self.width, self.outside, self.errors = width, [], []
        self.page.route(re.compile(r"^(?!file:).*"), self._refuse)
        self.page.on("request", lambda request: None if request.url.startswith("file:") else
                     self.outside.append(request.url))
        self.page.on("pageerror", lambda error: self.errors.append(f"page error: {error}"))
        self.page.on("console", lambda message: self.errors.append(f"console: {message.text}")
                     if message.type == "error" else None)
        self.page.on("dialog", lambda dialog: (self.errors.append(f"dialog: {dialog.message}"), dialog.dismiss()))
        self.page.goto(path.as_uri())
        self.stage = self.page.locator(".kvviz-stage")

    def _refuse(self, route) -> None:
        self.outside.append(route.request.url)
        route.abort()

    def close(self) -> None:
        self.context.close()

    def at(self, step: int) -> None:
        expect(self.stage).to_have_attribute("data-step", str(step))

    def clean(self) -> None:
        """No request outside the file, no error, nothing wider than the window, and axe content."""
        assert not self.outside and not self.errors, (self.outside, self.errors)
        assert self.page.evaluate("() => document.documentElement.scrollWidth") <= self.width
        assert violations(self.page) == []


def step_through(opened: OpenPage, shot: str | None = None) -> int:
    """Step the page to its end by the keyboard, back, to the end by its buttons, with its slider, Play and
    presenter type; hover the stage. Screenshots mid-lesson and at the end when `shot` names them. Its last step."""
    page, last = opened.page, opened.page.evaluate(LAST_STEP_JS)
    opened.at(0)
    assert page.evaluate("() => performance.getEntriesByName('kvviz-stage-drawn')[0].startTime") < 2000
    page.keyboard.press("Tab")  # the keyboard: from the first control, → to the end, ← back, Home to the start
    for step in range(1, last + 1):
        page.keyboard.press("ArrowRight")
        opened.at(step)
    expect(page.locator("#next")).to_have_attribute("aria-disabled", "true")
    page.keyboard.press("ArrowLeft")
    opened.at(last - 1)
    page.keyboard.press("Home")
    opened.at(0)
    for step in range(1, last + 1):  # the buttons
        page.locator("#next").click()
        opened.at(step)
        if step == last // 2 and shot:
            still(page)
            page.screenshot(path=str(SHOTS / f"{shot}_mid.png"))
            opened.clean()
    answer = page.locator("#answer").inner_text()
    assert "(nothing yet)" not in answer, answer
    if shot:
        still(page)
        page.screenshot(path=str(SHOTS / f"{shot}_end.png"), full_page=True)
    page.locator("#previous").click()
    opened.at(last - 1)
    page.locator("#step").focus()  # the slider, by its keys
    page.keyboard.press("Home")
    opened.at(0)
    page.keyboard.press("End")
    opened.at(last)
    page.locator("#play").click()  # Play from the end starts again and steps on its own
    expect(opened.stage).to_have_attribute("data-step", re.compile(r"^[1-9]\d*$"), timeout=10_000)
    page.locator("#play").click()
    page.get_by_role("switch", name="Presenter type").check()
    expect(opened.stage).to_have_class(re.compile(r"\bpresenter\b"))
    opened.stage.locator("[data-token], [data-request], [data-block]").first.hover()  # hover lights it everywhere
    expect(opened.stage.locator(".lit").first).to_be_attached()
    opened.clean()
    return last


@pytest.fixture(scope="module")
def lecture(tmp_path_factory) -> Path:
    """`kvviz page --lecture` on the bundled model: every stepped lesson at its page's defaults, and index.html."""
    folder = tmp_path_factory.mktemp("lecture") / "lecture"
    assert main(["page", "--lecture", "--model", "bundled", "--out", str(folder)]) == 0
    return folder


@pytest.mark.parametrize("width, height", SIZES)
def test_the_lecture_pack_steps_to_the_end_offline(lecture, width, height):
    SHOTS.mkdir(parents=True, exist_ok=True)
    opened = OpenPage(lecture / "index.html", width, height)
    try:
        titles = opened.page.locator("ol.lessons a").all_inner_texts()
        assert titles == ["Prefill and decode", "Paged cache and batching", "Speculative decoding"]
        opened.clean()
        for key, title in zip(NAMES, titles):
            opened.page.get_by_role("link", name=title).click()  # from the index, as a student goes
            opened.stage.wait_for()
            step_through(opened, f"page_{key}_{width}x{height}")
            opened.page.get_by_role("link", name="The lecture: every lesson").click()
            opened.page.locator("ol.lessons").wait_for()
    finally:
        opened.close()


def test_each_lessons_web_page_downloaded_from_the_app_steps_offline(app_url, browser_page_context,
                                                                     tmp_path):
    app = browser_page_context
    for key, start in (("prefill_decode", "Prefill"), ("paged_batching", "Start"), ("speculative", "Start")):
        if start == "Prefill":
            app.goto(f"{app_url}/{key}")
            wait_drawn(app, app.get_by_role("button", name="Prefill", exact=True), timeout=SLOW_S)
            press(app, "Prefill", shows=stage_caption(app), exact=False)
            for _ in range(3):
                click_to_next_step(app, app.get_by_role("button", name="Next token"), timeout=SLOW_S)
        else:
            start_and_step(app, app_url, key, 3, False)
        app.get_by_text("Export or replay a lesson").click()
        with app.expect_download(timeout=SLOW_S * 1000) as download:
            app.get_by_role("button", name="Download as a web page").click()
        assert download.value.suggested_filename == NAMES[key]
        saved = tmp_path / NAMES[key]
        download.value.save_as(saved)
        for width, height in SIZES:
            opened = OpenPage(saved, width, height)
            try:
                assert step_through(opened) == 3  # the steps the app had taken
                link = opened.page.get_by_role("link", name="Run this lesson live in kvviz")
                assert link.get_attribute("href").endswith(f"/{key}")
            finally:
                opened.close()


@pytest.fixture()
def browser_page_context():
    context = shared_browser().new_context(viewport={"width": 1280, "height": 720}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(60_000)
    yield page
    context.close()


def test_a_prompt_of_markup_shows_as_text(bundled, tmp_path):
    lesson = STEPPED_BY_KEY["speculative"]
    path = tmp_path / "markup.html"
    path.write_text(web_page(lesson, record_lesson(lesson, bundled, prompt=MARKUP, tokens=8), "http://kvviz.invalid/"),
                    encoding="utf-8")
    opened = OpenPage(path, 1280, 720)
    try:
        opened.at(0)
        assert opened.page.locator("#prompts pre").inner_text() == MARKUP
        assert opened.page.locator("img, #prompts script, #prompts b").count() == 0
        assert opened.stage.locator("img, script, b").count() == 0
        step_through(opened)
    finally:
        opened.close()
