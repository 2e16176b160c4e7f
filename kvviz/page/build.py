"""A stepped lesson as one web page: the stage the app draws, stepped in the browser with no server.

    text = web_page(LESSON, lesson_file, link="http://localhost:8501/prefill_decode")

`LESSON` is a lesson's Stepped (kvviz.lessons.stepped): a page is made from the lesson's file, read as
an upload is (every check, and its size limit; LessonFileError says what is wrong), then drawn by the
same stage-data function the app calls, so the page shows what the app's replay of that file shows.

One file, nothing fetched: page.css and page.html's markup; the lesson as JSON inside
<script type="application/json"> with <, > and & written as \\u003c, \\u003e and \\u0026, so no text in
it can end the script; the stage's own JavaScript and CSS (kvviz.ui.stage, the very strings the app's
component loads); and page.js, which calls the stage as Streamlit does and writes every text with
textContent. A Content-Security-Policy lets the page load nothing from anywhere.
"""

from __future__ import annotations

import html
import json
import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from string import Template
from urllib.parse import urlsplit

from kvviz.lessons.lecture import by_key
from kvviz.lessons.files import MAX_LESSON_BYTES, LessonFileError
from kvviz.page.facts import FACTS
from kvviz.shapes import format_bytes
from kvviz.ui.stage import STAGE_CSS, STAGE_HTML, STAGE_JS

HERE = Path(__file__).resolve().parent
MAX_PAGE_BYTES = MAX_LESSON_BYTES  # a page holds less than its lesson file (no K and V): the same limit
# the stage's default export, which Streamlit imports; inline, the page's script calls it by this name
STAGE_EXPORT, STAGE_ENTRY = "export default function (component)", "function mountStage(component)"


def web_page(lesson, lesson_file: bytes | str, link: str, up: str | None = None, tokenizer=None) -> str:
    """The page's HTML for a lesson file of `lesson` (a Stepped). `link`: the kvviz server the page links back
    to (http or https); `up`: the lecture's index, for a page of a lecture pack; `tokenizer`: the run's model's,
    where the page is made beside the run, so that a chat template's special tokens are drawn as the app draws
    them live (a file keeps no tokenizer). Raises LessonFileError."""
    run, _ = lesson.read_file(lesson_file)
    if tokenizer is not None and hasattr(run, "tokenizer"):
        run.tokenizer = tokenizer
    lesson.reveal(run, len(run.records) - 1)  # a replay shows every step it holds
    stage = lesson.stage_data(run, 0, False)
    for step, shown in enumerate(stage["steps"]):  # Prefill and decode says its sentence over the stage, in markdown
        sentence = lesson.sentence(run, step)
        if sentence:
            shown["sentence"] = markdown_to_text(sentence)
    title = by_key(lesson.page).title
    data = {"lesson": lesson.page, "title": title, **FACTS[lesson.page](run), "stage": stage}
    return _sized(title, data, checked_link(link), up)


def page_or_refusal(lesson, lesson_file: bytes | str, link: str, tokenizer=None) -> str:
    """web_page's page, or one that says in a sentence why there is none (a file past its limit): the app's
    download gives it, where a raised error would give no file and no word."""
    try:
        return web_page(lesson, lesson_file, link, tokenizer=tokenizer)
    except LessonFileError as error:
        return refusal_page(str(error))


def _sized(title: str, data: dict, link: str, up: str | None) -> str:
    """The page, which says its own size: filled in until the size it says is the size it is."""
    size, text = "", ""
    for _ in range(5):
        text = _fill(title, data, link, up, size)
        said = describe_size(len(text.encode("utf-8")))
        if said == size:
            break
        size = said
    if len(text.encode("utf-8")) > MAX_PAGE_BYTES:
        raise LessonFileError(f"The page would be {size}, over the {MAX_PAGE_BYTES // 2**20} MiB a lesson file may "
                              "hold; record a shorter lesson.")
    return text


def _fill(title: str, data: dict, link: str, up: str | None, size: str) -> str:
    lecture = f'<a href="{html.escape(up)}">The lecture: every lesson</a> · ' if up else ""
    return Template(_read("page.html")).substitute(
        head=_head(f"{title} · kvviz"), version=html.escape(kvviz_version()), size=size, link=html.escape(link),
        lecture=lecture, stage_css=_inline(STAGE_CSS, "style"), stage_html=STAGE_HTML,
        lesson_json=script_json(data), stage_js=_inline(stage_module(), "script"))


def stage_module() -> str:
    """The page's one script: the app's stage (its default export named, to be called inline) and page.js."""
    if STAGE_JS.count(STAGE_EXPORT) != 1:
        raise RuntimeError(f"kvviz/ui/stage/stage.js must hold `{STAGE_EXPORT}` once: the page calls it")
    return STAGE_JS.replace(STAGE_EXPORT, STAGE_ENTRY) + "\n" + _read("page.js")


def script_json(data: dict) -> str:
    """JSON to sit inside <script type="application/json">: <, > and & escaped, so nothing in it ends the
    script or starts markup, whatever a prompt or a token held."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def markdown_to_text(sentence: str) -> str:
    """A step's sentence as the app writes it in markdown (bold, kvviz.ui.text.plain's escapes and word
    joiners) as the plain text it reads as."""
    return re.sub(r"\\(.)|\*\*", lambda match: match.group(1) or "", sentence).replace("\u2060", "")


def checked_link(link: str) -> str:
    """The address the page links back to, which must be a web address (never a script's)."""
    if urlsplit(link).scheme not in ("http", "https") or not urlsplit(link).netloc:
        raise ValueError(f"The link back to kvviz must be an http or https address, not {link[:80]!r}.")
    return link


def describe_size(num_bytes: int) -> str:
    return f"{format_bytes(num_bytes)} ({num_bytes:,} bytes)"


def kvviz_version() -> str:
    try:
        return version("kvviz")
    except PackageNotFoundError:  # a checkout that was never installed
        return "(not installed)"


def refusal_page(sentence: str) -> str:
    """A page that says in one sentence why the lesson's page could not be made (the app's download gives it)."""
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>No page · kvviz</title></head>\n'
            f"<body><main><h1>This lesson has no web page</h1><p>{html.escape(sentence)}</p></main></body></html>\n")


def lecture_index(pages: list[tuple[str, str, int]], model: str) -> str:
    """The lecture pack's index.html: (lesson key, file name, bytes) of each page, in lecture order."""
    items = "\n".join(f'<li><a href="{html.escape(name)}">{html.escape(by_key(key).title)}</a>: '
                      f"{html.escape(by_key(key).summary)} <span class=\"size\">({describe_size(size)})</span></li>"
                      for key, name, size in pages)
    return Template(_read("index.html")).substitute(head=_head("The KV cache, a lecture · kvviz"),
                                                    model=html.escape(model), items=items,
                                                    version=html.escape(kvviz_version()))


def _head(title: str) -> str:
    """Both pages' <head>: their look, and a policy that lets them load nothing from anywhere."""
    return Template(_read("head.html")).substitute(title=html.escape(title), version=html.escape(kvviz_version()),
                                                   page_css=_read("page.css"))


def _read(name: str) -> str:
    return (HERE / name).read_text(encoding="utf-8")


def _inline(text: str, tag: str) -> str:
    """Text for a <script> or <style> element, checked to hold nothing that would end it early."""
    if re.search(rf"</{tag}|<!--", text, re.IGNORECASE):
        raise RuntimeError(f"Text inlined in a <{tag}> holds </{tag} or <!--; the page would break there")
    return text
