"""Issue 60: `python -m kvviz page` writes a lesson's web page from a run on the bundled model or from a lesson
file, and a lecture pack; bad input gets one sentence and exit code 2, no traceback. One test runs the command
in a new process; the refusals call the same main() in this one (test_cli.py's helpers)."""

import json
import re

from kvviz.page.record import STEPPED_BY_KEY, record_lesson

from cli_calls import call_cli, run_cli


def test_a_page_from_a_run_and_from_its_file_in_a_new_process(tmp_path, bundled):
    out = tmp_path / "speculative.html"
    result = run_cli("page", "--lesson", "speculative", "--model", "bundled", "--tokens", "8", "--out", str(out))
    assert result.returncode == 0, result.stderr
    page = out.read_text(encoding="utf-8")
    assert re.search(r"wrote .*speculative\.html \([\d.]+ KiB \([\d,]+ bytes\)\)", result.stdout)
    assert page.startswith("<!doctype html>") and "<title>Speculative decoding · kvviz</title>" in page
    lesson_file = tmp_path / "paged.json"
    lesson_file.write_text(record_lesson(STEPPED_BY_KEY["paged_batching"], bundled))
    result = call_cli("page", "--file", str(lesson_file), "--out", str(tmp_path / "paged.html"))
    assert result.returncode == 0, result.stderr
    assert "<title>Paged cache and batching · kvviz</title>" in (tmp_path / "paged.html").read_text(encoding="utf-8")


def test_a_lecture_pack_holds_every_stepped_lesson_and_an_index(tmp_path):
    folder = tmp_path / "lecture"
    result = call_cli("page", "--lecture", "--model", "bundled", "--out", str(folder))
    assert result.returncode == 0, result.stderr
    names = ["kvviz-lesson.html", "kvviz-paged-batching.html", "kvviz-speculative.html"]
    assert sorted(path.name for path in folder.iterdir()) == sorted(names + ["index.html"])
    index = (folder / "index.html").read_text(encoding="utf-8")
    assert [index.index(f'href="{name}"') for name in names] == sorted(index.index(f'href="{name}"') for name in names)
    assert 'href="index.html"' in (folder / names[0]).read_text(encoding="utf-8")


def test_bad_input_gets_one_sentence_and_exit_code_2(tmp_path):
    out = str(tmp_path / "page.html")
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{not json")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": "kvviz-lesson/4", "lesson": "cache_strategies"}))
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps({"format": "kvviz-lesson/4", "lesson": "speculative", "settings": {}}))
    cases = [
        (("--lesson", "no_such_lesson", "--model", "bundled"), "There is no stepped lesson 'no_such_lesson'"),
        (("--lesson", "prefill_decode", "--model", "/no/such/folder"), "There is no folder at '/no/such/folder'"),
        (("--file", str(bad_json)), "This file is not JSON text; give a file saved with Export lesson."),
        (("--file", str(other)), "This file holds no lesson that has a web page"),
        (("--file", str(tampered)), "The lesson file's field "),
        (("--file", str(tmp_path / "missing.json")), "There is no lesson file at"),
        (("--lesson", "paged_batching", "--model", "bundled", "--tokens", "5"), "leave out --prompt, --tokens"),
        (("--lesson", "prefill_decode", "--model", "bundled", "--tokens", "0"), "generates 1 to 256 tokens"),
        (("--lesson", "speculative", "--model", "bundled", "--tokens", "500"), "generates 8 to 128 tokens"),
        (("--lesson", "speculative", "--model", "bundled", "--link", "javascript:alert(1)"), "http or https"),
    ]
    for arguments, sentence in cases:
        result = call_cli("page", *arguments, "--out", out)
        assert result.returncode == 2 and sentence in result.stderr, (arguments, result.stderr)
        said = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
        assert "Traceback" not in result.stderr and said == [result.stderr.splitlines()[-1]], result.stderr
    assert not (tmp_path / "page.html").exists()
