"""`python -m kvviz page`: a stepped lesson as one web page that opens from disk (kvviz/page).

    kvviz page --lesson prefill_decode --model smollm2 --out prefill.html    # recorded on the model
    kvviz page --file kvviz-lesson.json --out lesson.html                   # from an exported lesson file
    kvviz page --lecture --out lecture/                                     # every stepped lesson, and index.html

Bad input (an unknown lesson, a bad file, a model that cannot load) raises ValueError with one sentence;
kvviz/cli/main.py prints it and exits with 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from kvviz.cli.common import check_output_path, write_atomically
from kvviz.lessons.lecture import by_key
from kvviz.lessons.files import MAX_LESSON_BYTES, load_json
from kvviz.models import load_model
from kvviz.page.build import checked_link, describe_size, web_page
from kvviz.page.record import STEPPED_BY_KEY, check_settings, lecture_pages, record_lesson
from kvviz.ui.common import default_source

LOCAL_APP = "http://localhost:8501"  # where `streamlit run app.py` opens


def add_page_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--lesson", help=f"record this lesson on --model: {', '.join(STEPPED_BY_KEY)}")
    source.add_argument("--file", help="a lesson file saved with Export lesson (checked as the app checks an upload)")
    source.add_argument("--lecture", action="store_true", help="every stepped lesson at its defaults on --model, "
                                                               "and an index.html, into the folder --out")
    parser.add_argument("--model", default=None,
                        help="bundled | smollm2 | a Hugging Face id (local cache) | a folder (default: the app's: "
                             "KVVIZ_DEFAULT_MODEL, else smollm2 once fetched, else bundled)")
    parser.add_argument("--prompt", help="the prompt, in place of the page's example")
    parser.add_argument("--tokens", type=int, help="tokens to generate, in place of the page's 48")
    parser.add_argument("--chat", action=argparse.BooleanOptionalAction, default=None,
                        help="Prefill and decode: apply the model's chat template (default: when it has one)")
    parser.add_argument("--link", default=None,
                        help=f"the kvviz server the page links back to (default: KVVIZ_PUBLIC_URL, else {LOCAL_APP})")
    parser.add_argument("--out", required=True, help="the .html file to write; with --lecture, a folder")


def cmd_page(args) -> int:
    public = os.environ.get("KVVIZ_PUBLIC_URL", "").strip()
    if public and "://" not in public:  # it may name only the host, as a room's address reads it
        public = f"http://{public}"
    base = checked_link((args.link or public or LOCAL_APP).rstrip("/"))
    if args.lecture:
        return _lecture(args, base)
    out = Path(args.out)
    check_output_path(out)
    if args.file is not None:
        if args.prompt is not None or args.tokens is not None or args.chat is not None or args.model is not None:
            raise ValueError("A lesson file holds its model and settings; leave out --model, --prompt, --tokens "
                             "and --chat with --file.")
        data, tokenizer = _read_file(Path(args.file)), None
        lesson = STEPPED_BY_KEY[_lesson_of(data)]
    else:
        lesson = _stepped(args.lesson)
        check_settings(lesson.page, args.prompt, args.tokens, args.chat)  # before the model loads
        lm = load_model(args.model or default_source())
        print(f"recording {by_key(lesson.page).title} on {lm.name}", file=sys.stderr)
        data, tokenizer = record_lesson(lesson, lm, args.prompt, args.tokens, args.chat), lm.tokenizer
    text = web_page(lesson, data, f"{base}/{lesson.page}", tokenizer=tokenizer)
    write_atomically(out, [text])
    print(f"wrote {out} ({describe_size(len(text.encode('utf-8')))})")
    return 0


def _lecture(args, base: str) -> int:
    """Each stepped lesson at its page's defaults on one model, in lecture order, and the index linking them."""
    if args.prompt is not None or args.tokens is not None or args.chat is not None:
        raise ValueError("A lecture pack records every lesson at its page's defaults; leave out --prompt, --tokens "
                         "and --chat with --lecture.")
    folder = Path(args.out)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--out {str(folder)!r} is a file; with --lecture give a folder (made if missing).")
    if not folder.parent.is_dir():
        raise ValueError(f"There is no folder {str(folder.parent)!r} to make {folder.name!r} in; create it first.")
    folder.mkdir(exist_ok=True)
    lm = load_model(args.model or default_source())
    pages = lecture_pages(lm, base, lambda done, total, title: print(f"recording {title} on {lm.name}",
                                                                     file=sys.stderr))
    for name, text in pages:
        write_atomically(folder / name, [text])
    print(f"wrote {folder / 'index.html'} and {len(pages) - 1} lesson pages")
    return 0


def _stepped(key: str):
    if key not in STEPPED_BY_KEY:
        raise ValueError(f"There is no stepped lesson {key[:60]!r}; choose one of {', '.join(STEPPED_BY_KEY)}.")
    return STEPPED_BY_KEY[key]


def _read_file(path: Path) -> bytes:
    """The file's bytes, refused in a sentence when it is missing or past the lesson-file limit."""
    if not path.is_file():
        raise ValueError(f"There is no lesson file at {str(path)!r}; give a file saved with Export lesson.")
    if path.stat().st_size > MAX_LESSON_BYTES:
        raise ValueError(f"{str(path)!r} is {path.stat().st_size / 2**20:.1f} MiB, over the "
                         f"{MAX_LESSON_BYTES // 2**20} MiB limit of a lesson file; export a shorter lesson.")
    return path.read_bytes()


def _lesson_of(data: bytes) -> str:
    """Which stepped lesson a file holds (its `lesson` field; the first lesson's files may have none). The
    lesson's own reading of the file then checks all of it, this field again included."""
    try:
        payload = load_json(data, "This file")
    except ValueError as error:
        raise ValueError(f"{str(error).rstrip('.')}; give a file saved with Export lesson.") from None
    key = payload.get("lesson", "prefill_decode") if isinstance(payload, dict) else None
    if not isinstance(key, str) or key not in STEPPED_BY_KEY:
        raise ValueError("This file holds no lesson that has a web page (its lesson field names none of "
                         f"{', '.join(STEPPED_BY_KEY)}); give a file saved with Export lesson.")
    return key
