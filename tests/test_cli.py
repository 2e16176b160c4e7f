"""python -m kvviz generate: prompt files in, JSONL out, a summary, and clear refusals."""

import json
import subprocess
import sys

from conftest import ROOT


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "kvviz", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_generate_from_txt_and_jsonl(tmp_path, bundled):
    from kvviz import Engine, SamplingParams

    txt = tmp_path / "prompts.txt"
    txt.write_text("ROMEO:\n\nJULIET:\n")
    jsonl = tmp_path / "prompts.jsonl"
    jsonl.write_text('{"prompt": "ROMEO:"}\n{"prompt": "JULIET:"}\n')
    expected = Engine(bundled).generate(["ROMEO:", "JULIET:"], SamplingParams(max_tokens=8))
    for source in (txt, jsonl):
        out = tmp_path / f"{source.suffix[1:]}.jsonl"
        result = run_cli("generate", "--prompts", str(source), "--max-tokens", "8", "--out", str(out))
        assert result.returncode == 0, result.stderr
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert [r["token_ids"] for r in rows] == [e.token_ids for e in expected]
        assert "output_tokens_per_s" in result.stdout and "prefix_cache_hit_rate" in result.stdout


def test_bad_prompt_files_get_one_sentence(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\nnot json\n')
    result = run_cli("generate", "--prompts", str(bad), "--out", str(tmp_path / "o.jsonl"))
    assert result.returncode == 2 and "Line 2 of bad.jsonl is not valid JSON" in result.stderr
    result = run_cli("generate", "--prompts", str(tmp_path / "missing.txt"))
    assert result.returncode == 2 and "no prompts file" in result.stderr
