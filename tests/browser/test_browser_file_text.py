"""Issue 25 item 3 in a real browser: text from a lesson file shows as text on every replaying page.

Each file names its model `![p](http://kvviz.invalid/x.png) [Log in again](http://kvviz.invalid/login)`
and puts markdown and HTML links into the texts its page draws (generated texts, strategy labels,
token texts) and, as a file written in a room keeps them, into its room answers' questions and
units. After the replay no element of the page (Plotly's SVG included) may be a link or an
image pointing at the file's address, the model name must be readable as typed, and every view
must draw in bounded time.
"""

import json
import re
import time

import pytest
from playwright.sync_api import expect

from app_reads import metric_box
from chromium import open_tab, wait_drawn

HOST = "kvviz.invalid"
NAME = f"![p](http://{HOST}/x.png) [Log in again](http://{HOST}/login) www.{HOST} admin@{HOST}"
LINK_TEXT = f"[click](http://{HOST}/md) <a href=\"http://{HOST}/html\">here</a> <img src=\"http://{HOST}/i.png\">"
# anything the page drew that points at the file's address: a link, an image, an SVG link or image
# a room's answers, as a file written in a room (issue 27) keeps them: its question and unit are the file's text
ROOM_ANSWERS = [{"room": "K7QW2MXP", "question": NAME, "unit": LINK_TEXT, "step": 1, "engine": 9.0,
                 "answers": [4.0, 9.0], "exact": False},
                {"room": "K7QW2MXP", "question": LINK_TEXT, "unit": "bytes", "step": 1, "engine": None,
                 "answers": [1.0], "exact": False}]
POINTING = f"""() => [...document.querySelectorAll('a, img, image, iframe, source')]
    .filter(e => [...e.attributes].some(a => a.value.includes('{HOST}'))).map(e => e.outerHTML.slice(0, 120))"""


def prefill_file(bundled) -> str:
    from kvviz.lessons.prefill_decode.file import export_lesson
    from kvviz.lessons.prefill_decode.logic import PrefillLesson, LessonSettings, lesson_sampling

    run = PrefillLesson.start(bundled, LessonSettings(prompt="ROMEO:", sampling=lesson_sampling(max_tokens=3)))
    run.prefill()
    while run.next_token() is not None:
        pass
    data = json.loads(export_lesson(run))
    data["model"]["name"] = NAME
    data["token_texts"] = [LINK_TEXT] * len(data["token_texts"])  # chips, the stage and the charts' axes
    data["room_answers"] = ROOM_ANSWERS
    return json.dumps(data)


def paged_file(bundled) -> str:
    from kvviz.lessons.paged_batching.file import export_paged
    from kvviz.lessons.paged_batching.logic import DEFAULT_REQUESTS, PagedLesson, RequestSpec

    run = PagedLesson.start(bundled, [RequestSpec(*r) for r in DEFAULT_REQUESTS[:2]], 8, 40, True)
    for _ in range(3):
        run.step()
    data = json.loads(export_paged(run, 2))
    data["model_name"] = NAME
    data["texts"] = [[[rid, LINK_TEXT] for rid, _ in texts] for texts in data["texts"]]
    for record in data["records"]:
        for chunk in record["chunks"]:
            chunk["kind"] = LINK_TEXT if chunk["kind"] == "prefill" else chunk["kind"]  # drawn in the schedule chart
    data["room_answers"] = ROOM_ANSWERS
    return json.dumps(data)


def speculative_file(bundled) -> str:
    from kvviz.lessons.speculative.file import export_speculative
    from kvviz.lessons.speculative.logic import DEFAULT_PROMPT, SpeculativeLesson

    run = SpeculativeLesson.start(bundled, DEFAULT_PROMPT, 4, 8, 4)
    while run.step():
        pass
    data = json.loads(export_speculative(run, 1))
    data["model_name"] = NAME
    data["texts"] = [[ids, LINK_TEXT] for ids, _ in data["texts"]]
    data["room_answers"] = ROOM_ANSWERS
    return json.dumps(data)


def strategies_file(bundled) -> str:
    from kvviz.lessons.cache_strategies.file import export_strategies
    from kvviz.lessons.cache_strategies.logic import compare_strategies, lesson_specs
    from kvviz.lessons.cache_strategies.state import EXAMPLE_PROMPT, comparison

    results = compare_strategies(bundled, EXAMPLE_PROMPT, 4, lesson_specs(4, 8, 0, bundled.max_context), 1)
    pieces = [[bundled.tokenizer.decode([t]) for t in r.token_ids] for r in results]
    data = json.loads(export_strategies(comparison(results, bundled.name, EXAMPLE_PROMPT,
                                                   {"max_tokens": 4, "window": 4, "group_size": 8, "residual": 0,
                                                    "timing_runs": 1}, pieces)))
    data["model_name"], data["prompt"] = NAME, LINK_TEXT
    for result in data["results"]:
        result["label"] = f"{result['label']} {LINK_TEXT}"  # legends, axes, titles
        for item in result["final_bill"]["differences"]:
            item["name"] = LINK_TEXT  # the waterfall's rows
    data["pieces"] = [[LINK_TEXT] * len(text) for text in data["pieces"]]
    return json.dumps(data)


PAGES = [  # path, the button that shows the page is ready, the file, the views to open after the replay
    ("prefill_decode", "Prefill", prefill_file,
     ["Cache per layer", "Keys and values", "Attention", "Inside attention", "Why decode is memory-bound",
      "Work saved", "Memory bill"]),
    ("paged_batching", "Start", paged_file, []),
    ("speculative", "Start", speculative_file, []),
    ("cache_strategies", "Run every strategy", strategies_file,
     ["Memory", "Time", "Texts", "Error and KL", "Measured vs formula", "Table"]),
]


# what each of Prefill and decode's views draws and no other view does (the views are one radio: a run each)
PREFILL_VIEWS = {
    "Cache per layer": lambda page: page.get_by_text("Every position costs"),
    "Keys and values": lambda page: page.get_by_role("combobox", name="KV head"),
    "Attention": lambda page: page.get_by_text("heads in one group read the same cached keys"),
    "Inside attention": lambda page: page.get_by_text("Where q, k and v come from"),
    "Why decode is memory-bound": lambda page: metric_box(page, "Bytes read"),
    "Work saved": lambda page: metric_box(page, "Tokens run, with cache"),
    "Memory bill": lambda page: metric_box(page, "Last block's slack"),
}


def charts_drawn(page) -> None:
    """Expect every Plotly chart on the page drawn, its SVG in place (a chart draws after the run that sent it;
    the file's text would become a link or an image in its SVG)."""
    expect(page.locator("[data-testid='stPlotlyChart']:not(:has(.main-svg))")).to_have_count(0)


def nothing_points_at_the_file(page) -> None:
    for frame in page.frames:
        assert frame.evaluate(POINTING) == [], frame.url
    assert page.locator("[data-testid='stException']").count() == 0


@pytest.mark.parametrize("path, ready, make_file, views", PAGES, ids=[p[0] for p in PAGES])
def test_a_files_text_never_becomes_a_link_or_an_image(browser, app_url, bundled, tmp_path, path, ready,
                                                       make_file, views):
    saved = tmp_path / "crafted.json"
    saved.write_text(make_file(bundled))
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(180_000)
    page.goto(f"{app_url}/{path}")
    wait_drawn(page, page.get_by_role("button", name=ready, exact=True).first)
    page.get_by_text("Export or replay a lesson").click()
    page.locator("[data-testid='stFileUploaderDropzoneInput']").set_input_files(str(saved))
    banner = page.get_by_text(re.compile("Replaying a recorded")).first
    # the upload's run: the banner, or a sentence refusing the file (which the assert below reports)
    wait_drawn(page, banner.or_(page.get_by_text("lesson file's")))
    assert page.get_by_text("lesson file's").count() == 0  # the file replays: its text is refused nowhere
    banner.wait_for()
    assert "[Log in again](http://" in banner.inner_text().replace("\u2060", "")  # the name, as typed
    nothing_points_at_the_file(page)
    if "room_answers" in json.loads(saved.read_text()):  # the room's answers panel, opened
        page.get_by_text(re.compile(r"The room's answers \(2 questions")).first.click()
        page.get_by_text(re.compile("answered within 1%")).first.wait_for()
        nothing_points_at_the_file(page)
    for view in views:
        started = time.perf_counter()
        if path == "prefill_decode":  # the first view is the one shown: choosing it runs nothing
            page.locator("[data-testid='stRadio']").get_by_text(view, exact=True).first.click()
            wait_drawn(page, PREFILL_VIEWS[view](page))
        else:  # a tab: every tab's content came with the replay's run; the switch runs nothing (open_tab)
            open_tab(page, view, exact=True)
        charts_drawn(page)
        assert time.perf_counter() - started < 60, view  # each view draws in bounded time
        nothing_points_at_the_file(page)
    context.close()
