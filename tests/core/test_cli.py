"""python -m kvviz generate: prompt files in, JSONL out, a summary, and clear refusals.

One test runs `python -m kvviz` in a new process; the others call the same main() in this one,
which saves a torch import and a model load per run (about 4 s each on a 2-core CPU)."""

import json
import re

from cli_calls import call_cli, run_cli


def test_generate_from_txt_and_jsonl(tmp_path, bundled):
    from kvviz import Engine, SamplingParams

    txt = tmp_path / "prompts.txt"
    txt.write_text("ROMEO:\n\nJULIET:\n")
    jsonl = tmp_path / "prompts.jsonl"
    jsonl.write_text('{"prompt": "ROMEO:"}\n{"prompt": "JULIET:"}\n')
    expected = Engine(bundled).generate(["ROMEO:", "JULIET:"], SamplingParams(max_tokens=8))
    for source, run in ((txt, run_cli), (jsonl, call_cli)):
        out = tmp_path / f"{source.suffix[1:]}.jsonl"
        result = run("generate", "--prompts", str(source), "--max-tokens", "8", "--out", str(out))
        assert result.returncode == 0, result.stderr
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert [r["token_ids"] for r in rows] == [e.token_ids for e in expected]
        assert "output_tokens_per_s" in result.stdout and "prefix_cache_hit_rate" in result.stdout


def test_bad_prompt_files_get_one_sentence(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\nnot json\n')
    result = call_cli("generate", "--prompts", str(bad), "--out", str(tmp_path / "o.jsonl"))
    assert result.returncode == 2 and "Line 2 of bad.jsonl is not valid JSON" in result.stderr
    result = call_cli("generate", "--prompts", str(tmp_path / "missing.txt"))
    assert result.returncode == 2 and "no prompts file" in result.stderr


def test_generate_with_samples_drafts_and_swap(tmp_path, bundled):
    """--n, --speculative-tokens and --preemption-mode reach the engine; the JSONL lists every sample."""
    from kvviz import Engine, SamplingParams

    txt = tmp_path / "prompts.txt"
    txt.write_text("ROMEO: I love thee, I love thee, I love thee\n")
    out = tmp_path / "out.jsonl"
    result = call_cli("generate", "--prompts", str(txt), "--max-tokens", "12", "--n", "3", "--seed", "5",
                      "--temperature", "0.8", "--out", str(out))
    assert result.returncode == 0, result.stderr
    row = json.loads(out.read_text())
    expected = Engine(bundled).generate([txt.read_text().strip()],
                                        SamplingParams(max_tokens=12, n=3, seed=5, temperature=0.8))[0]
    assert row["samples"] == expected.samples and len(row["samples"]) == 3 and len(row["texts"]) == 3
    assert re.search(r"^generated_tokens +36$", result.stdout, re.M)  # every sample's tokens count
    greedy = call_cli("generate", "--prompts", str(txt), "--max-tokens", "12", "--speculative-tokens", "3",
                      "--preemption-mode", "swap", "--out", str(out))
    assert greedy.returncode == 0, greedy.stderr
    plain = Engine(bundled).generate([txt.read_text().strip()], SamplingParams(max_tokens=12))[0]
    assert json.loads(out.read_text())["token_ids"] == plain.token_ids
    assert "draft_tokens_accepted" in greedy.stdout
    refused = call_cli("generate", "--prompts", str(txt), "--n", "2", "--backend", "vllm", "--out", str(out))
    assert refused.returncode == 2 and "--n is a setting of kvviz's engine" in refused.stderr
