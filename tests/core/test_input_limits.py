"""Issue 25 items 9, 12 and 14: prompt files read with a size limit, half characters in JSON lines, and a
folder model whose tokenizer outgrows its vocabulary. One sentence each, before the work."""

import json
import shutil
import time

import pytest

from kvviz.cli.main import main
from kvviz.models import BUNDLED_DIR, ModelLoadError, load_model
from kvviz.workloads import MAX_PROMPT_CHARS, MAX_PROMPTS_FILE_BYTES, WorkloadError, parse_upload, read_prompts

from app_tests import one_sentence


def test_a_huge_prompts_file_is_refused_before_it_is_read(tmp_path):
    """A 2 GB file was read whole (28 s, 4.4 GB) before the tokenizer aborted the process."""
    huge = tmp_path / "huge.txt"
    with huge.open("wb") as file:
        file.truncate(2 * 2**30)  # sparse: two gigabytes of zeros that take no disk
    started = time.perf_counter()
    with pytest.raises(ValueError) as refusal:
        read_prompts(huge)
    assert time.perf_counter() - started < 1
    message = str(refusal.value)
    assert "is 2,048.0 MiB, more than the 64 MiB a prompts file may be" in message and one_sentence(message)


def test_the_command_line_refuses_it_in_one_sentence(tmp_path, capsys):
    huge = tmp_path / "huge.txt"
    with huge.open("wb") as file:
        file.truncate(MAX_PROMPTS_FILE_BYTES + 1)
    started = time.perf_counter()
    assert main(["generate", "--prompts", str(huge), "--out", str(tmp_path / "o.jsonl")]) == 2
    assert time.perf_counter() - started < 5
    message = capsys.readouterr().err.strip()
    assert message.startswith("error: ") and "more than the 64 MiB" in message and "\n" not in message


def test_a_prompt_longer_than_any_context_is_refused_before_the_tokenizer(tmp_path, bundled):
    """A 5 MB one-line file took 19 s and 1.5 GB before its refusal."""
    line = tmp_path / "line.txt"
    line.write_text("a" * 5_000_000 + "\n")
    started = time.perf_counter()
    with pytest.raises(ValueError) as refusal:
        read_prompts(line)
    assert time.perf_counter() - started < 2
    assert f"Line 1 of line.txt has 5,000,000 characters, more than the {MAX_PROMPT_CHARS:,}" in str(refusal.value)
    assert one_sentence(str(refusal.value))
    ok = tmp_path / "ok.txt"
    ok.write_text("ROMEO:\r\nJULIET:\n")
    assert read_prompts(ok) == ["ROMEO:", "JULIET:"]


def test_a_lone_surrogate_in_a_json_line_gets_a_sentence(bundled):
    """JSON's \\ud800 escape gave the tokenizer half a character: a TypeError on the Batch page."""
    with pytest.raises(WorkloadError) as refusal:
        parse_upload("p.jsonl", b'{"prompt": "ROMEO"}\n{"prompt": "a\\ud800"}\n')
    assert "Line 2 of p.jsonl holds a lone surrogate" in str(refusal.value) and one_sentence(str(refusal.value))
    assert parse_upload("p.jsonl", b'{"prompt": "a\\ud83d\\ude00"}\n') == ["a\U0001F600"]  # a whole pair is a character


def test_a_tokenizer_larger_than_the_vocabulary_is_refused_at_load(tmp_path):
    """Its ids past the embedding table raised IndexError in Cache strategies, the eviction lab and GQA."""
    import torch
    from transformers import AutoModelForCausalLM

    from tiny_models import tiny_config

    torch.manual_seed(0)
    folder = tmp_path / "small-vocab"
    AutoModelForCausalLM.from_config(tiny_config("llama")).save_pretrained(folder)  # 96 ids
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(BUNDLED_DIR / name, folder / name)  # 4,096 tokens
    started = time.perf_counter()
    with pytest.raises(ModelLoadError) as refusal:
        load_model(str(folder))
    assert time.perf_counter() - started < 30
    message = str(refusal.value)
    assert "has 4,096 tokens but the model's embedding table holds 96" in message and one_sentence(message)
    assert json.loads((folder / "config.json").read_text())["vocab_size"] == 96


def test_a_tokenizer_that_needs_remote_code_is_refused_saying_so(tmp_path):
    """Issue 61, minor: a checkpoint whose tokenizer is a class of its own (auto_map, run only with
    trust_remote_code) loaded with no tokenizer, and every text prompt then said "This model has no tokenizer"."""
    import torch
    from transformers import AutoModelForCausalLM

    from tiny_models import tiny_config

    torch.manual_seed(0)
    folder = tmp_path / "remote-tokenizer"
    AutoModelForCausalLM.from_config(tiny_config("llama")).save_pretrained(folder)
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "OwnTokenizer", "auto_map": {"AutoTokenizer": ["own_tokenizer.OwnTokenizer", None]}}))
    (folder / "own_tokenizer.py").write_text("raise SystemExit('kvviz ran code from a checkpoint')\n")
    with pytest.raises(ModelLoadError) as refusal:
        load_model(str(folder))
    message = str(refusal.value)
    assert "its own code to run (trust_remote_code)" in message and one_sentence(message), message
