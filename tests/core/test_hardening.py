"""Issue 16: what an upload, a command line or a typed model name can do; one test per cause."""

import json
import shutil

import pytest

from kvviz import SamplingParams
from kvviz.cli.common import write_atomically
from kvviz.engine.engine import Engine
from kvviz.engine.errors import EngineError
from kvviz.models import BUNDLED_DIR, ModelLoadError, allowed_source, load_model
from kvviz.workloads import (
    MAX_JOB_TOKENS,
    MAX_UPLOAD_PROMPTS,
    WorkloadError,
    parse_prompts,
    parse_upload,
    upload_workload,
)

from cli_calls import cli_error

DEEP = "[" * 100_000 + "]" * 100_000


# ---- prompt files (CLI and uploads share the parser) -----------------------------------------
def test_a_byte_order_mark_is_not_part_of_the_first_prompt():
    assert parse_prompts("\ufeffROMEO:\nJULIET:\n", "p.txt") == ["ROMEO:", "JULIET:"]
    assert parse_prompts('\ufeff{"prompt": "ROMEO:"}\n', "p.jsonl") == ["ROMEO:"]


def test_form_feeds_and_line_separators_stay_inside_a_prompt():
    text = "one\u2028still one\x0cstill one\r\ntwo\n"
    assert parse_prompts(text, "p.txt") == ["one\u2028still one\x0cstill one", "two"]
    line = json.dumps({"prompt": "a\u2028b"}, ensure_ascii=False)  # JSON allows a raw U+2028 in a string
    assert parse_prompts(line + "\n", "p.jsonl") == ["a\u2028b"]


def test_deeply_nested_json_lines_get_a_sentence():
    with pytest.raises(ValueError, match="Line 1 of p.jsonl nests lists or objects too deeply"):
        parse_prompts(DEEP + "\n", "p.jsonl")
    with pytest.raises(WorkloadError, match="nests lists or objects too deeply"):
        parse_upload("p.jsonl", DEEP.encode())


def test_uploads_are_limited_in_prompts_and_tokens(bundled):
    with pytest.raises(WorkloadError, match=f"holds {MAX_UPLOAD_PROMPTS + 1:,} prompts"):
        parse_upload("many.txt", b"a\n" * (MAX_UPLOAD_PROMPTS + 1))
    assert len(parse_upload("some.txt", b"a\n" * MAX_UPLOAD_PROMPTS)) == MAX_UPLOAD_PROMPTS
    long_prompt = ("But soft, what light through yonder window breaks? " * 40).encode()  # ~600 tokens
    with pytest.raises(WorkloadError, match=f"more than the {MAX_JOB_TOKENS:,} allowed"):
        upload_workload(bundled.tokenizer, "long.txt", (long_prompt + b"\n") * 400)


# ---- the command line --------------------------------------------------------------------------
def test_an_unwritable_out_path_is_refused_before_generating(tmp_path, capsys):
    prompts = tmp_path / "p.txt"
    prompts.write_text("ROMEO:\n")
    assert "There is no folder" in cli_error(capsys, "generate", "--prompts", str(prompts),
                                              "--out", str(tmp_path / "missing" / "o.jsonl"),
                                              "--model", "/no/such/model")  # the path is checked first
    assert "is a folder" in cli_error(capsys, "generate", "--prompts", str(prompts), "--out", str(tmp_path))


def test_a_failed_write_keeps_the_previous_file(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text('{"previous": true}\n')
    with pytest.raises(ValueError, match="the previous file is unchanged"):
        write_atomically(out, ['{"a": 1}\n', "\ud800 cannot be encoded\n"])  # fails half way through
    assert out.read_text() == '{"previous": true}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]  # no temporary file left behind
    write_atomically(out, ['{"a": 1}\n'])
    assert out.read_text() == '{"a": 1}\n'


@pytest.mark.parametrize("argv, words", [
    (["--device", "tpu"], "Unknown device 'tpu'"),
    (["--device", "cuda"], "no CUDA GPU"),
    (["--model", "m" * 5000], "5,000 characters is too long"),
])
def test_bad_devices_and_model_names_get_a_sentence(tmp_path, capsys, argv, words):
    prompts = tmp_path / "p.txt"
    prompts.write_text("ROMEO:\n")
    if words == "no CUDA GPU" and __import__("torch").cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert words in cli_error(capsys, "generate", "--prompts", str(prompts), "--out", str(tmp_path / "o.jsonl"),
                              *argv)


def test_an_infinite_memory_size_gets_a_sentence(capsys):
    assert "Unknown memory size 'infGiB'" in cli_error(capsys, "bill", "--memory=infGiB")


def damaged_checkpoint(tmp_path, **config_changes):
    folder = tmp_path / "model"
    shutil.copytree(BUNDLED_DIR, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(config_changes)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_a_negative_hidden_size_gets_a_sentence(tmp_path, capsys):
    folder = damaged_checkpoint(tmp_path, hidden_size=-64)
    prompts = tmp_path / "p.txt"
    prompts.write_text("ROMEO:\n")
    assert "hidden_size is -64" in cli_error(capsys, "generate", "--prompts", str(prompts), "--model", str(folder),
                                             "--out", str(tmp_path / "o.jsonl"))


# ---- the engine's request check ---------------------------------------------------------------
@pytest.mark.parametrize("prompt, params, words", [
    ([1, 2.5, 3], SamplingParams(max_tokens=4), "Token ids must be whole numbers"),
    (["1", "2"], SamplingParams(max_tokens=4), "Token ids must be whole numbers"),
    ([1, 2, 3], SamplingParams(max_tokens=None), "max_tokens must be a whole number"),
    ([1, 2, 3], SamplingParams(max_tokens=2.5), "not 2.5"),
])
def test_requests_of_the_wrong_type_raise_engine_errors(bundled, prompt, params, words):
    with pytest.raises(EngineError, match=words):
        Engine(bundled, num_blocks=8).check_request(prompt, params)


# ---- the model field on a shared server -------------------------------------------------------
def test_folders_are_refused_alike_whether_or_not_they_exist(tmp_path):
    messages = []
    for source in (str(tmp_path), str(tmp_path / "no-such-folder"), "/etc", "./kvviz/bundled_model"):
        with pytest.raises(ModelLoadError) as refusal:
            allowed_source(source, "bundled,hf-cache")
        messages.append(str(refusal.value))
    assert len(set(messages)) == 1 and "KVVIZ_MODELS" in messages[0]
    assert allowed_source("bundled", "bundled,hf-cache") == "bundled"
    with pytest.raises(ModelLoadError, match="only these models"):
        allowed_source("kvviz-tests/not-cached", "bundled,hf-cache")


def test_one_folder_spelled_several_ways_is_one_model(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "m")
    spellings = [str(tmp_path / "m"), str(tmp_path / "m") + "/", str(tmp_path / "m" / "." / "."),
                 str(tmp_path / "m" / ".." / "m"), str(tmp_path / "link")]
    assert {allowed_source(s, "bundled,folders") for s in spellings} == {str((tmp_path / "m").resolve())}
    assert allowed_source(str(tmp_path / "link"), f"bundled,{tmp_path / 'm'}") == str((tmp_path / "m").resolve())


def test_a_config_with_absurd_sizes_is_refused_before_building(tmp_path):
    with pytest.raises(ModelLoadError, match="100,000 layers"):
        load_model(str(damaged_checkpoint(tmp_path, num_hidden_layers=100_000)))


def test_a_checkpoint_missing_weights_is_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    folder = damaged_checkpoint(tmp_path)
    weights = load_file(folder / "model.safetensors")
    kept = {name: tensor for name, tensor in weights.items() if ".layers.5." not in name}
    assert len(kept) < len(weights)
    save_file(kept, folder / "model.safetensors")
    with pytest.raises(ModelLoadError, match="lacks .* weights"):
        load_model(str(folder))


def test_typed_model_names_show_as_text_in_the_sidebar(monkeypatch):
    from app_tests import open_lesson

    monkeypatch.setenv("KVVIZ_MODELS", "bundled,folders")  # a refusal that quotes the typed text
    at = open_lesson("lessons/home.py")
    at.sidebar.text_input(key="model_request").set_value("./![x](http://example.com/a.png) **bold**").run()
    error = at.sidebar.error[0].value
    assert "There is no folder" in error
    # escaped, and a word joiner after the colon: markdown finds no address to link in "http:⁠/example"
    assert "\\!\\[x\\]\\(http\\:\u2060/example\\.com/a\\.png\\)" in error and "\\*\\*bold\\*\\*" in error
