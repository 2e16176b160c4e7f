"""Issue 25: what a flag or an output path can do to `python -m kvviz generate` and `bench`;
one sentence each, given before any work."""

import argparse
import os
import stat
import time

import pytest

from kvviz.cli.bench import add_bench_arguments, run_bench
from kvviz.cli.common import check_output_path, write_atomically
from kvviz.cli.main import main

from cli_calls import cli_error

NO_MODEL = ("--model", "/no/such/model")  # a refusal that names the flag came before the model was loaded


# ---- output paths: a regular file or a new one, nothing else -----------------------------------
def test_a_symbolic_link_as_out_is_refused_and_left_alone(tmp_path, prompts, capsys):
    target = tmp_path / "target.txt"
    target.write_text("keep me\n")
    link = tmp_path / "out.jsonl"
    link.symlink_to(target)
    message = cli_error(capsys, "generate", "--prompts", str(prompts), "--out", str(link), *NO_MODEL)
    assert "is a symbolic link, not a regular file, and writing would replace it" in message
    with pytest.raises(ValueError, match="is a symbolic link"):  # the writer checks again, after the work
        write_atomically(link, ['{"a": 1}\n'])
    assert link.is_symlink() and target.read_text() == "keep me\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl", "p.txt", "target.txt"]  # no temporary left


@pytest.mark.parametrize("path, kind", [("/dev/stdout", "a symbolic link"), ("/dev/full", "a device"),
                                        ("/dev/null", "a device")])
def test_device_paths_as_out_are_refused(prompts, capsys, path, kind):
    if not os.path.lexists(path):
        pytest.skip(f"no {path} here")
    before = os.lstat(path)
    message = cli_error(capsys, "generate", "--prompts", str(prompts), "--out", path, *NO_MODEL)
    assert f"--out '{path}' is {kind}, not a regular file" in message
    after = os.lstat(path)
    assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)  # the node or link is untouched


def test_a_pipe_as_out_is_refused(tmp_path, prompts, capsys):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert "is a pipe, not a regular file" in cli_error(capsys, "generate", "--prompts", str(prompts),
                                                         "--out", str(fifo), *NO_MODEL)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_replaced_file_keeps_its_permissions_and_a_new_one_follows_the_umask(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text("old\n")
    out.chmod(0o640)
    write_atomically(out, ["new\n"])
    assert out.read_text() == "new\n" and stat.S_IMODE(out.stat().st_mode) == 0o640  # mkstemp alone gave 0600
    umask = os.umask(0o027)
    try:
        write_atomically(tmp_path / "fresh.jsonl", ["x\n"])
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "fresh.jsonl").stat().st_mode) == 0o640


def test_the_help_says_what_out_accepts(capsys):
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "a new or regular file, replaced whole once the job is done" in text
    assert "(a link, a device such as /dev/stdout, or a pipe is refused)" in text


def test_bench_json_to_a_folder_is_refused_before_the_bench(tmp_path, capsys):
    parser = add_bench_arguments(argparse.ArgumentParser())
    start = time.perf_counter()
    assert run_bench(parser.parse_args(["--quick", "--json", str(tmp_path)])) == 2
    assert time.perf_counter() - start < 2  # the quick bench itself takes about a minute
    out = capsys.readouterr().out.strip()
    assert out == f"--json {str(tmp_path)!r} is a folder; give a file name such as results.json."
    with pytest.raises(ValueError, match="is a device"):
        check_output_path(__import__("pathlib").Path("/dev/null"), "--json")


# ---- flags that size work: refused before the model loads ---------------------------------------
@pytest.mark.parametrize("flags, words", [
    (["--n", "1000000"], "n=1000000 samples would run as 1000000 sequences at once but the engine runs at most "
                         "max_num_seqs=64"),
    (["--num-blocks", "100000000"], "num_blocks must be None (size the pool from free memory) or a whole number "
                                    "from 1 to 1,048,576"),
    (["--max-num-seqs", "1000000"], "max_num_seqs must be a whole number from 1 to 1,024"),
    (["--swap-space-blocks", "1000000000", "--preemption-mode", "swap"], "swap_space_blocks must be None"),
    (["--seed", str(2**64)], "seed must be None (random) or a whole number from 0 to 2**63 - 1"),
    (["--top-k", "-3"], "top_k must be 0 (off)"),
])
def test_flags_that_size_work_are_refused_before_loading_the_model(prompts, tmp_path, capsys, flags, words):
    start = time.perf_counter()
    message = cli_error(capsys, "generate", "--prompts", str(prompts), "--out", str(tmp_path / "o.jsonl"),
                        *flags, *NO_MODEL)
    assert words in message
    assert time.perf_counter() - start < 2


def test_a_prompts_file_that_is_not_utf8_is_named_with_advice(tmp_path, capsys):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("ROMEO:\nJULIETTE \xe9t\xe9\n".encode("latin-1"))
    message = cli_error(capsys, "generate", "--prompts", str(bad), "--out", str(tmp_path / "o.jsonl"))
    assert message == (f"error: {str(bad)!r} is not UTF-8 text (byte 0xe9 at offset 16 cannot be read); save it as "
                       "UTF-8, one prompt per line or one {\"prompt\": ...} object per line.")
