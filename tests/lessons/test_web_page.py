"""Issue 60: a lesson as one web page (kvviz/page). The page carries the app's own stage, its text stays text
whatever a prompt holds, it says its true size, and it is made only from a lesson file an upload would pass.
Each page here is made from a real, short run on the bundled model (tests/browser/test_browser_page.py opens
whole ones in Chromium)."""

import json
import re

import pytest

from kvviz.lessons.files import MAX_LESSON_BYTES, LessonFileError
from kvviz.page.build import STAGE_ENTRY, STAGE_EXPORT, markdown_to_text, page_or_refusal, web_page
from kvviz.page.record import STEPPED_BY_KEY, record_lesson
from kvviz.ui.stage import HERE as STAGE_FOLDER, JS_PARTS
from kvviz.ui.text import plain

PREFILL = STEPPED_BY_KEY["prefill_decode"]
LINK = "http://localhost:8501/prefill_decode"
MARKUP = "<img src=x onerror=alert(1)></script><script>alert(2)</script>&amp; <!-- \u2028"


def lesson_data(page: str) -> dict:
    """The lesson's JSON as the page holds it."""
    text = re.search(r'<script type="application/json" id="kvviz-lesson">(.*?)</script>', page, re.S).group(1)
    return json.loads(text)


@pytest.fixture(scope="module")
def markup_lesson(bundled) -> str:
    return record_lesson(PREFILL, bundled, prompt=MARKUP, tokens=3)


def test_the_pages_stage_is_the_apps_own_files(markup_lesson):
    page = web_page(PREFILL, markup_lesson, LINK)
    css = (STAGE_FOLDER / "stage.css").read_text(encoding="utf-8")
    assert f"<style>\n{css}\n</style>" in page  # in the stage's template, as the app's component holds it
    script = re.search(r'<script type="module">\n(.*)\n</script>', page, re.S).group(1)
    stage_js = "\n".join((STAGE_FOLDER / part).read_text(encoding="utf-8") for part in JS_PARTS)
    assert stage_js.count(STAGE_EXPORT) == 1
    page_js = (STAGE_FOLDER.parents[1] / "page" / "page.js").read_text(encoding="utf-8")
    assert script == stage_js.replace(STAGE_EXPORT, STAGE_ENTRY) + "\n" + page_js
    # nothing loads from anywhere: no element that fetches, no stylesheet import, and a policy that refuses any
    fetching = r"<(script|img|link|iframe|source|video|audio|object|embed)\b[^>]*\b(src|href|data)="
    assert not re.search(fetching, page, re.I)
    assert "@import" not in page and "url(" not in page and "default-src 'none'" in page


def test_a_prompt_of_markup_is_text_in_the_page(markup_lesson):
    page = web_page(PREFILL, markup_lesson, LINK)
    assert "<img" not in page and "alert(2)</script>" not in page and "&amp;" not in page
    assert page.count("</script>") == 2  # the lesson's JSON and the stage's script end where they should
    data = lesson_data(page)
    assert data["prompts"] == [{"label": "Prompt", "text": MARKUP}]


def test_the_page_says_its_own_size_in_bytes(markup_lesson):
    page = web_page(PREFILL, markup_lesson, LINK)
    said = re.search(r"This page is [\d.]+ KiB \(([\d,]+) bytes\)", page).group(1)
    assert int(said.replace(",", "")) == len(page.encode("utf-8"))


def test_a_page_is_made_only_from_a_file_an_upload_would_pass(markup_lesson):
    payload = json.loads(markup_lesson)
    payload["records"][0]["requests"][0]["block_table"] = [10**6]
    with pytest.raises(LessonFileError, match="records\\[0\\].requests\\[0\\].block_table"):
        web_page(PREFILL, json.dumps(payload), LINK)
    with pytest.raises(LessonFileError, match=f"over the {MAX_LESSON_BYTES // 2**20} MiB limit"):
        web_page(PREFILL, " " * (MAX_LESSON_BYTES + 1), LINK)
    with pytest.raises(LessonFileError, match="holds the “Speculative decoding” lesson"):
        web_page(PREFILL, json.dumps({"format": "kvviz-lesson/4", "lesson": "speculative"}), LINK)
    with pytest.raises(ValueError, match="http or https"):
        web_page(PREFILL, markup_lesson, "javascript:alert(1)")
    refusal = page_or_refusal(PREFILL, " " * (MAX_LESSON_BYTES + 1), LINK)  # the app's download: a page that says why
    assert "This lesson has no web page" in refusal and "over the 20 MiB limit" in refusal


def test_every_step_says_its_sentence_as_plain_text(markup_lesson):
    steps = lesson_data(web_page(PREFILL, markup_lesson, LINK))["stage"]["steps"]
    assert [step["sentence"].split(".")[0] for step in steps] == ["Prefill", "Decode step 1", "Done"]
    assert not any("**" in step["sentence"] or "\\" in step["sentence"] for step in steps)
    assert markdown_to_text(f"**Done.** It ended with “{plain('<|im_end|> a.b@c')}”.") == \
        "Done. It ended with “<|im_end|> a.b@c”."


def test_each_lesson_says_its_answer_at_every_step(bundled):
    for key, lesson in STEPPED_BY_KEY.items():
        text = record_lesson(lesson, bundled, tokens=8) if key == "speculative" else record_lesson(lesson, bundled)
        data = lesson_data(web_page(lesson, text, LINK))
        assert len(data["answers"]) == len(data["stage"]["steps"]) and data["model"].startswith("bundled")
        assert all(line["text"] for line in data["answers"][-1]), key  # by the end, every request said something
