"""The stage (issue 24) in a real browser at a projector's 1280x720: one screen after Prefill and
three Next token, normal and presenter mode; hovering a token lights it everywhere; the smallest
type; the numbers equal the engine's; a replayed lesson steps in the browser without a rerun per step.

Screenshots go to docs/screenshots/ (kept in the repository, for people to look at).
"""

import re
import time

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from playwright.sync_api import expect

from kvviz.lessons.prefill_decode.state import PAGE_SAMPLING
from kvviz.shapes import format_bytes
from kvviz.ui.app_server import ROOT

from app_reads import no_exceptions
from chromium import SLOW_S, browser_page, click_to_next_step, press, stage_caption, still, wait_drawn
from lesson_steps import replay
from page_texts import SMALLEST_FONT_JS
from room_pages import step_sentence

SHOTS = ROOT / "docs" / "screenshots"


def stage_step_after(page, text: str, timeout_s: float) -> int:
    """The step the stage shows once it shows `text`, or after timeout_s, read from its data-step."""
    try:
        stage_caption(page).get_by_text(text).wait_for(timeout=timeout_s * 1000)
    except PlaywrightTimeoutError:
        pass
    return int(page.locator("[data-testid='kvviz-stage']").get_attribute("data-step") or 0)


def open_and_step(page, url, presenter):
    page.goto(f"{url}/prefill_decode" + ("?presenter=1" if presenter else ""))
    wait_drawn(page, page.get_by_role("button", name="Prefill", exact=True), timeout=SLOW_S)
    press(page, "Prefill", shows=step_sentence(page, 0), exact=False)
    for step in range(1, 4):
        press(page, "Next token", shows=step_sentence(page, step), exact=False)
    # issue 33 item 11: the bar counts the lesson's steps (48 tokens: prefill, then 47 decode steps), not
    # only the steps taken so far
    last = PAGE_SAMPLING.max_tokens - 1
    stage_caption(page).get_by_text(f"Step 3 of {last}", exact=True).wait_for()
    assert not page.get_by_test_id("stage-forward").is_enabled()  # the steps to come are not taken yet


@pytest.fixture(scope="module")
def lesson_at_step_3():
    """The page's default lesson, run here by the engine itself to step 3."""
    from kvviz.lessons.prefill_decode.logic import PrefillLesson, LessonSettings
    from kvviz.lessons.prefill_decode.state import EXAMPLE_PROMPTS, PAGE_SAMPLING
    from kvviz.models import load_model

    lesson = PrefillLesson.start(load_model("bundled"), LessonSettings(EXAMPLE_PROMPTS[0], PAGE_SAMPLING))
    lesson.prefill()
    for _ in range(3):
        lesson.next_token()
    return lesson


@pytest.mark.parametrize("presenter", [False, True])
def test_the_stage_fits_one_screen_lights_a_token_everywhere_and_is_legible(app_url, presenter,
                                                                           lesson_at_step_3):
    with browser_page(1280, 720) as page:
        open_and_step(page, app_url, presenter)
        no_exceptions(page)
        still(page)  # the new column's slide-in
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"stage_{'presenter' if presenter else 'normal'}_1280x720.png"))
        slide = page.locator(".kvviz-stage .slide").first  # the new column's cells
        assert slide.evaluate("e => getComputedStyle(e).animationName") == "slide-in"
        page.emulate_media(reduced_motion="reduce")  # a viewer whose system asks for less motion: none
        assert slide.evaluate("e => getComputedStyle(e).animationName") == "none"
        page.emulate_media(reduced_motion="no-preference")

        sentence = page.locator("[data-testid='stAlertContentSuccess']").first.bounding_box()
        chips = page.locator(".kvviz-stage .chips").bounding_box()
        cache = page.locator("[data-testid='stage-cache']").bounding_box()
        for name, box in (("sentence", sentence), ("chips", chips), ("diagram", cache)):
            assert box["y"] >= 0 and box["y"] + box["height"] <= 720, (name, box)  # the first screen, no scrolling

        stage = page.locator("[data-testid='kvviz-stage']")
        smallest = stage.evaluate(SMALLEST_FONT_JS)
        assert smallest >= (16 if presenter else 12), smallest

        # the numbers are the engine's
        bill = lesson_at_step_3.bill(3, lesson_at_step_3.model_info["dtype_bytes"])
        blocks, _, _ = lesson_at_step_3.held(3)
        entries = page.locator("[data-testid='stage-block-table'] .entry").all_inner_texts()
        assert entries == [f"{logical}→{block}" for logical, block in enumerate(blocks)]
        cached = lesson_at_step_3.num_tokens_at(3)
        assert page.locator(".kvviz-stage .chip").count() == cached + 1  # and the token just sampled
        text = page.locator("[data-testid='stage-bill']").inner_text()
        assert f"{cached} tokens" in text and f"measured {format_bytes(bill['token_bytes'])}" in text

        # hovering a prompt token lights its chip, its K and V in every layer, its block and its slot
        page.locator(".kvviz-stage .chip[data-token='3']").hover()
        layers = lesson_at_step_3.model_info["layers"]
        lit_layers = page.locator(".kvviz-stage rect.cell.lit").evaluate_all(
            "cells => [...new Set(cells.map(c => c.dataset.layer + c.classList.contains('k')))].length")
        assert lit_layers == 2 * layers  # K and V of every layer
        assert page.locator(f".kvviz-stage .entry.lit[data-block='{blocks[0]}']").count() == 1
        assert page.locator(".kvviz-stage .slot.lit").count() == 1
        assert "position 3" in page.locator("[data-testid='stage-readout']").inner_text()

        # issue 33 item 11: hovering a pool block lights its table entry and the tokens it holds
        block_size = lesson_at_step_3.settings.block_size
        page.locator(f"[data-testid='stage-pool'] .block[data-block='{blocks[0]}']").hover()
        assert page.locator(f".kvviz-stage .entry.lit[data-block='{blocks[0]}']").count() == 1
        assert page.locator(".kvviz-stage .chip.lit").count() == min(block_size, cached)
        assert f"block {blocks[0]} holds logical block 0" in page.locator("[data-testid='stage-readout']").inner_text()


# The pauses of 0.3 s or more between the keys pressed on the page (and after the last, when read): the stage reports
# its step 0.35 s after the last key (stage.js), so each such pause may send one report
PAUSES_JS = """() => {
  const pauses = window.__pauses = {count: 0, last: null};
  document.addEventListener('keydown', () => {
    const now = performance.now();
    if (pauses.last !== null && now - pauses.last >= 300) pauses.count++;
    pauses.last = now;
  }, true);
}"""


def test_a_replayed_lesson_steps_in_the_browser_without_a_rerun_per_step(app_url, tmp_path):
    from kvviz.lessons.prefill_decode.file import export_lesson
    from kvviz.lessons.prefill_decode.logic import PrefillLesson, LessonSettings
    from kvviz.lessons.prefill_decode.state import EXAMPLE_PROMPTS, PAGE_SAMPLING
    from kvviz.models import load_model

    run = PrefillLesson.start(load_model("bundled"), LessonSettings(EXAMPLE_PROMPTS[0], PAGE_SAMPLING))
    run.prefill()
    while run.next_token() is not None:
        pass
    assert len(run.records) == 48
    with browser_page(1280, 720) as page:
        sent = []  # every message and request the browser sends to the server
        page.on("websocket", lambda ws: ws.on("framesent", lambda frame: sent.append("frame")))
        page.on("request", lambda request: sent.append(request.url))
        replay(page, app_url, "prefill_decode", "Prefill", export_lesson(run))
        stage_caption(page).wait_for()
        before = len(sent)
        stage = page.locator("[data-testid='kvviz-stage']")
        page.evaluate(PAUSES_JS)
        stage.focus()
        start = time.time()
        for _ in range(47):
            page.keyboard.press("ArrowRight")
        # Keys got lost: two step reports in flight, the stage took the earlier's echo for a server move (stage.js)
        reached = stage_step_after(page, "Step 47 of 47", timeout_s=60)
        assert reached == 47, f"the stage stopped at step {reached}"
        stepped_s = time.time() - start  # printed, not asserted: a busy machine draws slower
        pauses = page.evaluate("() => window.__pauses.count + (performance.now() - window.__pauses.last >= 300)")
        new = sent[before:]
        # 47 steps, not a message to the server per step: none, or (a loaded machine pausing between keys) one step
        # report a pause, and the images of the runs they ask for
        assert new.count("frame") <= pauses, (pauses, new)
        assert all(s == "frame" or (pauses and "/media/" in s) for s in new), (pauses, new)
        print(f"47 steps drawn in the browser in {stepped_s:.1f} s, {new.count('frame')} messages to the server "
              f"({pauses} pauses of 0.3 s or more)")
        # then the one debounced report: the views follow, to the last step's sentence (the server's, over the stage)
        wait_drawn(page, page.get_by_text("Done.", exact=False), timeout=SLOW_S)
        no_exceptions(page)


# On the stage (in its component's shadow root): ← `back` times at once; then, in the task in which the stage sends
# that step to the server (its data-reporting attribute goes), → `on` times: before any answer can arrive.
# window.__pressedFrom: the step the stage had reported.
BACK_THEN_ON_AS_REPORTED_JS = """([back, on]) => {
  const host = [...document.querySelectorAll('*')]
    .find(e => e.shadowRoot && e.shadowRoot.querySelector('.kvviz-stage'));
  const root = host.shadowRoot.querySelector('.kvviz-stage');
  const key = (name) => root.dispatchEvent(new KeyboardEvent('keydown', {key: name, bubbles: true}));
  window.__pressedFrom = new Promise(done => new MutationObserver((_, observer) => {
    if (root.dataset.reporting) return;
    observer.disconnect();
    const from = Number(root.dataset.step);
    for (let i = 0; i < on; i++) key('ArrowRight');
    done(from);
  }).observe(root, {attributes: true, attributeFilter: ['data-reporting']}));
  for (let i = 0; i < back; i++) key('ArrowLeft');
}"""


def stage_at_step_8(page, app_url):
    """Prefill and decode opened, its Prefill and 8 Next token pressed: the stage, at step 8 of 8."""
    page.goto(f"{app_url}/prefill_decode")
    wait_drawn(page, page.get_by_role("button", name="Prefill", exact=True), timeout=SLOW_S)
    press(page, "Prefill", shows=step_sentence(page, 0))
    for _ in range(8):
        click_to_next_step(page, page.get_by_role("button", name=re.compile("^Next token")), timeout=SLOW_S)
    return page.locator("[data-testid='kvviz-stage']")


def test_keys_pressed_while_the_server_draws_the_stages_report_are_kept(app_url):
    """The stage reports its step to the server 0.35 s after the last key; the server draws the page again at that
    step. Keys pressed before that drawing arrives go on from the step reported, and the drawing (the stage's own
    report, echoed) does not pull the stage back to it."""
    with browser_page(1280, 720) as page:
        page.set_default_timeout(SLOW_S * 1000)
        stage = stage_at_step_8(page, app_url)
        page.evaluate(BACK_THEN_ON_AS_REPORTED_JS, [6, 3])
        assert page.evaluate("() => window.__pressedFrom") == 2  # the report of step 2 left, then 3 keys went on
        expect(stage).to_have_attribute("data-step", "5")
        # the echo of step 2, then the report of step 5 and its echo: the views below followed to step 5
        wait_drawn(page, step_sentence(page, 5), timeout=SLOW_S)
        expect(stage).to_have_attribute("data-step", "5")
        no_exceptions(page)


# On the stage: ← `back` times, then, once that report has left, → `on` times, and once that one has left too, →
# `more` times (their report waits its 0.35 s). The steps reported and the step reached: [first, second, now].
TWO_REPORTS_JS = """([back, on, more]) => new Promise(done => {
  const host = [...document.querySelectorAll('*')]
    .find(e => e.shadowRoot && e.shadowRoot.querySelector('.kvviz-stage'));
  const root = host.shadowRoot.querySelector('.kvviz-stage');
  const keys = (name, n) => {
    for (let i = 0; i < n; i++) root.dispatchEvent(new KeyboardEvent('keydown', {key: name, bubbles: true}));
  };
  const reported = [];
  new MutationObserver((_, observer) => {
    if (root.dataset.reporting) return;
    reported.push(Number(root.dataset.step));
    if (reported.length === 1) { keys('ArrowRight', on); return; }
    observer.disconnect();
    keys('ArrowRight', more);
    done([...reported, Number(root.dataset.step)]);
  }).observe(root, {attributes: true, attributeFilter: ['data-reporting']});
  keys('ArrowLeft', back);
})"""


def test_keys_pressed_while_two_reports_are_on_their_way_are_kept(app_url):
    """A busy server: two of the stage's step reports are on their way before the drawing of the first comes back.
    That drawing is the stage's own report, not a move of the server's: the keys pressed since stay. The server's
    messages are held (Playwright's WebSocket route) while the keys go, so the order is the one a busy server gives.
    (Before the fix the stage knew only its last report and went back to the first: 3 to 6 keys lost in 47.)"""
    held, holding, to_page = [], [False], []

    def route(socket):
        server = socket.connect_to_server()
        to_page.append(socket)
        server.on_message(lambda message: held.append(message) if holding[0] else socket.send(message))

    with browser_page(1280, 720) as page:
        page.set_default_timeout(SLOW_S * 1000)
        page.route_web_socket(re.compile(r"/_stcore/stream"), route)
        stage = stage_at_step_8(page, app_url)
        holding[0] = True
        assert page.evaluate(TWO_REPORTS_JS, [6, 2, 3]) == [2, 4, 7]  # two reports left; the stage is at 7
        while held:  # the server's drawings of steps 2 and 4 arrive now, in their order
            to_page[-1].send(held.pop(0))
        holding[0] = False
        expect(stage).to_have_attribute("data-step", "7")
        # the report of step 7 and its drawing: the views below followed to step 7
        wait_drawn(page, step_sentence(page, 7), timeout=SLOW_S)
        expect(stage).to_have_attribute("data-step", "7")
        no_exceptions(page)


LONG_PROMPT = ("ROMEO:\nBut soft, what light through yonder window breaks? It is the east, and Juliet is the sun. "
               "Arise, fair sun, and kill the envious moon, who is already sick and pale with grief. ") * 8


@pytest.mark.parametrize("presenter", [False, True])
def test_a_long_lesson_keeps_its_diagram_on_the_first_screen_with_readable_columns(app_url, presenter):
    """Issue 33 item 5: a prompt of some 380 tokens (a link, prefilled) filled the first screen with chips and
    drew 2 px columns below the fold. Now the chips sit in a band of three rows (two in presenter mode) scrolled
    to the newest, and the
    diagram draws the newest positions that fit at 6 px a column, its title saying which."""
    from urllib.parse import urlencode

    query = {"prompt": LONG_PROMPT, "step": "0", **({"presenter": "1"} if presenter else {})}
    with browser_page(1280, 720) as page:
        page.goto(f"{app_url}/prefill_decode?{urlencode(query)}")
        wait_drawn(page, page.locator("[data-testid='stage-cache']"), timeout=SLOW_S)
        still(page)
        no_exceptions(page)
        page.screenshot(path=str(SHOTS / f"stage_long_{'presenter' if presenter else 'normal'}_1280x720.png"))
        chips = page.locator("[data-testid='stage-chips']")
        tokens = chips.locator(".chip").count() - 1  # and the token just sampled
        assert tokens > 400  # every position has its chip, in the band
        row = chips.locator(".chip").first.bounding_box()["height"]
        box = chips.bounding_box()
        assert box["height"] <= (2.6 if presenter else 3.6) * row, (box, row)
        newest = chips.locator(".chip").last.bounding_box()  # scrolled to the newest token
        assert box["y"] <= newest["y"] and newest["y"] + newest["height"] <= box["y"] + box["height"] + 1
        cache = page.locator("[data-testid='stage-cache']")
        frame = cache.bounding_box()
        assert frame["y"] >= 0 and frame["y"] + frame["height"] <= 720, frame  # the whole diagram, first screen
        cells = cache.locator("rect.cell.k[data-layer='0']")
        assert cells.first.evaluate("r => r.width.baseVal.value") >= 5  # a 6 px column, its cell 5 px
        drawn = [int(t) for t in cells.evaluate_all("cells => cells.map(c => c.dataset.token)")]
        assert drawn == list(range(drawn[0], tokens)) and drawn[0] > 0  # the newest positions, up to the last
        assert f"for positions {drawn[0]}-{tokens - 1} of {tokens}" in cache.locator("text.title").text_content()
