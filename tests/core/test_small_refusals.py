"""Issue 35, item 9: small command-line and Python API calls that got a wrong sentence, an
AttributeError, or nothing at all; each is now refused in one sentence (one test per cause)."""

import os

import pytest

from kvviz.cli.main import main
from kvviz.engine.engine import Engine
from kvviz.engine.errors import EngineError
from kvviz.models import ModelLoadError, load_model
from kvviz.ui import rooms
from kvviz.workloads import WorkloadError, parse_upload, read_prompts

from cli_calls import cli_error


def test_max_num_seqs_zero_is_refused_as_itself(tmp_path, capsys, prompts):
    message = cli_error(capsys, "generate", "--prompts", str(prompts), "--out", str(tmp_path / "o.jsonl"),
                        "--max-num-seqs", "0")
    assert "max_num_seqs" in message and "sample" not in message, message  # it spoke of n=1 samples


@pytest.mark.parametrize("flag, value", [("--kv-cache-bytes", "-5"), ("--tensor-parallel-size", "0"),
                                         ("--pipeline-parallel-size", "0")])
def test_vllm_sizes_below_one_are_refused(tmp_path, capsys, prompts, flag, value):
    assert f"{flag} is {value}; give a whole number from 1 up" in cli_error(
        capsys, "generate", "--prompts", str(prompts), "--out", str(tmp_path / "o.jsonl"), flag, value)


def test_bill_reads_model_bundled_as_load_model_does(capsys):
    assert main(["bill", "--model", "bundled"]) == 0  # it looked for a Hugging Face id "bundled"
    by_model = capsys.readouterr().out
    assert main(["bill"]) == 0
    assert by_model == capsys.readouterr().out


@pytest.mark.parametrize("source", [5, None, "", "   "])
def test_load_model_refuses_what_is_not_a_model_name(source):
    with pytest.raises(ModelLoadError, match="load_model takes a model name"):
        load_model(source)


@pytest.mark.parametrize("lm", [None, "bundled", 5])
def test_an_engine_of_no_model_is_refused_in_a_sentence(lm):
    with pytest.raises(TypeError, match=r"An engine runs a model from kvviz.load_model .*load_model\('bundled'\)"):
        Engine(lm)


def test_a_prompt_with_half_a_character_is_an_engine_error(bundled):
    with pytest.raises(EngineError, match="lone surrogate"):
        Engine(bundled, num_blocks=8).generate(["\ud800abc"])


@pytest.mark.parametrize("kind", ["folder", "fifo", "device"])
def test_a_prompts_path_that_is_no_file_says_what_it_is(tmp_path, kind):
    path = {"folder": tmp_path, "device": "/dev/zero"}.get(kind, tmp_path / "fifo")
    if kind == "fifo":
        os.mkfifo(path)
    with pytest.raises(ValueError, match="is a folder, a pipe or a device, not a file"):
        read_prompts(__import__("pathlib").Path(path))
    with pytest.raises(ValueError, match="There is no prompts file"):
        read_prompts(tmp_path / "missing.txt")


def test_a_nul_byte_is_called_binary_not_bad_utf8():
    with pytest.raises(WorkloadError, match=r"holds a NUL byte \(character 3\), so it is binary"):
        parse_upload("p.txt", b"abc\x00def\n")
    with pytest.raises(WorkloadError, match="is not UTF-8 text"):
        parse_upload("p.txt", b"abc\xffdef\n")


def test_fullwidth_room_codes_are_the_same_code():
    assert rooms.normalize("ｋｂ７ｑ　２ｍ") == rooms.normalize("KB7Q2M") == "KB7Q2M"
    assert rooms.normalize("K٣7") == "K7"  # other scripts' digits are not a code's characters
