"""Issue 25 in a real browser: the crafted lesson files that the file readers refuse (items 2, 12 and 13;
tests/lessons/test_file_hardening.py refuses them without a page) uploaded on their own pages.

Each upload must end in one sentence in one error box that names the field, within a bound; no
exception box or traceback; nothing from the file becomes a link or an image; and the page stays
usable: its own lesson still starts (Prefill, Start) or its Run button stays enabled.
"""

import json
import re
import time

import pytest
from playwright.sync_api import expect

from app_tests import one_sentence

from kvviz.ui.app_server import ROOT

from chromium import run_finished, screenshot, stage_caption, wait_drawn

UPLOAD_S = 20  # generous: the readers refuse these in well under a second without a browser
HOST = "kvviz.invalid"
POINTING = f"""() => [...document.querySelectorAll('a, img, image, iframe, source')]
    .filter(e => [...e.attributes].some(a => a.value.includes('{HOST}'))).length"""


@pytest.fixture(scope="module")
def prefill_data(bundled) -> dict:
    from kvviz.lessons.prefill_decode.file import export_lesson
    from kvviz.lessons.prefill_decode.logic import PrefillLesson, LessonSettings, lesson_sampling

    run = PrefillLesson.start(bundled,
                              LessonSettings(prompt="ROMEO:\nBut soft", sampling=lesson_sampling(max_tokens=8)))
    run.prefill()
    while run.next_token() is not None:
        pass
    return json.loads(export_lesson(run))


def thousand_heads(data: dict) -> dict:
    """The file of test_file_hardening's reshaped(): 1,024 heads and KV heads, every trace agreeing."""
    import base64

    import numpy as np

    def encoded(shape):
        return base64.b64encode(np.full(shape, 0.5, dtype="<f4").tobytes()).decode("ascii")

    layers, heads, head_dim = 1, 1024, 2
    prompt = len(data["prompt_token_ids"])
    data["model"].update(layers=layers, heads=heads, kv_heads=heads, head_dim=head_dim, v_head_dim=head_dim,
                         max_context=2 * prompt)
    data["token_texts"] = ["a"] * len(data["token_texts"])
    for step, trace in enumerate(data["traces"]):
        new = prompt if step == 0 else 1
        trace["new_keys"] = trace["new_values"] = encoded((layers, new, heads, head_dim))
        trace["attention"] = encoded((layers, heads, prompt + step))
        trace["prompt_attention"] = None
    return data


def surrogate_name(data: dict) -> dict:
    data["model"]["name"] = f"[gpt2](http://{HOST}/) \ud800"  # json.dumps writes the escape: valid JSON
    return data


def surrogate_token(data: dict) -> dict:
    data["token_texts"][1] = "\udfff"
    return data


def lost_requests(data: dict) -> dict:
    for record in data["records"][1:]:
        record["requests"] = []
    return data


def huge_pool(data: dict) -> dict:
    data["records"][0]["memory"]["allocated_bytes"] = 2**52  # the stage would draw every block
    return data


PREFILL_FILES = [  # how the file is crafted, what the one sentence must say
    (thousand_heads, "field model.heads is 1024, outside 1 to 256"),
    (surrogate_name, "field model.name holds a lone surrogate"),
    (surrogate_token, "field token_texts[1] holds a lone surrogate"),
    (lost_requests, "field records[1].requests holds 0 requests where a lesson follows one"),
    (huge_pool, "field records[0].memory.allocated_bytes makes a pool of more than"),
]


def speculative_file(tiny_lm) -> str:
    from kvviz.lessons.speculative.file import export_speculative
    from kvviz.lessons.speculative.logic import DEFAULT_PROMPT, SpeculativeLesson

    run = SpeculativeLesson.start(tiny_lm, DEFAULT_PROMPT, 2, 4, 4)
    while run.step():
        pass
    data = json.loads(export_speculative(run, 0))
    data["settings"]["prompt"] = "KING:\ud800"
    return json.dumps(data)


def paged_file(tiny_lm) -> str:
    from kvviz.lessons.paged_batching.file import export_paged
    from kvviz.lessons.paged_batching.logic import DEFAULT_REQUESTS, PagedLesson, RequestSpec

    run = PagedLesson.start(tiny_lm, [RequestSpec(*r) for r in DEFAULT_REQUESTS[:1]], 8, 12, True)
    run.step()
    data = json.loads(export_paged(run, 0))
    data["records"][0]["__\ud800"] = 1  # an unknown key, named in the sentence: the sentence must print
    return json.dumps(data)


def strategies_file(tiny_lm) -> str:
    from kvviz.lessons.cache_strategies.file import export_strategies
    from kvviz.lessons.cache_strategies.logic import compare_strategies, lesson_specs
    from kvviz.lessons.cache_strategies.state import EXAMPLE_PROMPT, comparison

    settings = {"max_tokens": 3, "window": 4, "group_size": 8, "residual": 0, "timing_runs": 1}
    results = compare_strategies(tiny_lm, EXAMPLE_PROMPT, 3, lesson_specs(4, 8, 0, tiny_lm.max_context), 1)
    data = json.loads(export_strategies(comparison(results, "tiny", EXAMPLE_PROMPT, settings,
                                                   [["x"] * len(r.token_ids) for r in results])))
    paged = next(i for i, r in enumerate(data["results"]) if r["strategy"] == "paged")
    del data["results"][paged]["options"]["num_blocks"]
    return json.dumps(data)


def open_replay_box(browser, app_url, path, ready):
    """A context of its own with the page at `path` opened, its model loaded (its button `ready` drawn), and its
    "Export or replay a lesson" box opened: (context, page)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(180_000)
    page.goto(f"{app_url}/{path}")
    wait_drawn(page, page.get_by_role("button", name=ready, exact=True).first)
    page.get_by_text("Export or replay a lesson").click()
    return context, page


def upload_is_refused(page, path, name: str, text: str, words: str) -> float:
    """Upload the file; return the seconds until its one sentence showed and the page settled."""
    saved = ROOT / "artifacts" / "crafted" / name
    saved.parent.mkdir(parents=True, exist_ok=True)
    saved.write_text(text, encoding="ascii")  # json.dumps escapes every surrogate: the bytes are ASCII
    started = time.perf_counter()
    page.locator("[data-testid='stFileUploaderDropzoneInput']").set_input_files(str(saved))
    # the upload's run draws the sentence (the page said nothing of a file before), then ends
    expect(page.get_by_text("The lesson file's field", exact=False).first).to_be_visible(timeout=UPLOAD_S * 1000)
    run_finished(page)
    seconds = time.perf_counter() - started
    alerts = page.locator("[data-testid='stAlertContentError']")
    shown = [alerts.nth(i).inner_text().strip() for i in range(alerts.count())]
    assert len(shown) == 1, shown  # one error box
    assert words in shown[0], shown[0]
    assert one_sentence(shown[0]), shown[0]
    assert page.locator("[data-testid='stException']").count() == 0
    assert page.locator("text=Traceback").count() == 0
    for frame in page.frames:
        assert frame.evaluate(POINTING) == 0, frame.url
    assert page.get_by_text(re.compile("Replaying a recorded")).count() == 0  # nothing of the file was kept
    print(f"{path} {name}: refused in {seconds:.2f} s: {shown[0][:110]}")
    assert seconds < UPLOAD_S
    return seconds


@pytest.mark.parametrize("craft, words", PREFILL_FILES, ids=[c.__name__ for c, _ in PREFILL_FILES])
def test_a_crafted_prefill_file_gets_one_sentence_and_the_page_still_teaches(browser, app_url, prefill_data,
                                                                            craft, words):
    context, page = open_replay_box(browser, app_url, "prefill_decode", "Prefill")
    upload_is_refused(page, "prefill_decode", f"{craft.__name__}.json",
                      json.dumps(craft(json.loads(json.dumps(prefill_data)))), words)
    if craft is thousand_heads:
        screenshot(page, "crafted_prefill_thousand_heads")
    page.get_by_role("button", name="Prefill", exact=True).first.click()  # the default lesson still starts
    wait_drawn(page, stage_caption(page))  # the lesson's first step: its stage
    assert page.locator("[data-testid='stException']").count() == 0
    context.close()


OTHER_PAGES = [  # path, the button that starts its own lesson, the file, the sentence
    ("speculative", "Start", speculative_file, "field settings.prompt holds a lone surrogate"),
    ("paged_batching", "Start", paged_file, "field records[0].__\\ud800 is not one kvviz writes"),
    ("cache_strategies", "Run every strategy", strategies_file, "options.num_blocks is missing"),
]


@pytest.mark.parametrize("path, start, make_file, words", OTHER_PAGES, ids=[p[0] for p in OTHER_PAGES])
def test_a_crafted_file_on_the_other_replaying_pages_gets_one_sentence(browser, app_url, tiny_lm, path, start,
                                                                        make_file, words):
    context, page = open_replay_box(browser, app_url, path, start)
    upload_is_refused(page, path, f"{path}.json", make_file(tiny_lm), words)
    screenshot(page, f"crafted_{path}")
    button = page.get_by_role("button", name=start, exact=True).first
    assert button.is_enabled()  # no replay took the page: its own lesson can run
    if path != "cache_strategies":  # running every strategy is a minute of CPU; enabled is enough here
        button.click()
        wait_drawn(page, stage_caption(page))  # the lesson's first step: its stage
        assert page.get_by_text(re.compile(r"^Press \*?\*?Start")).count() == 0
        assert page.locator("[data-testid='stAlertContentError']").count() == 0  # the next action cleared it
        assert page.locator("[data-testid='stException']").count() == 0
    context.close()
