"""Issue 51's command-line cases: a folder's code never runs, a crafted header is never read whole,
flags that would waste a bench are refused first, a read-only --out is kept, and a --max-tokens past
the context gets a sentence."""

import json
import os
import subprocess
import sys
import time

import pytest

from kvviz.cli.main import main
from kvviz.engine.cpu.threads import CpuShare, threads_for
from kvviz.shapes import shape_from_pretrained

EVIL_MODULE = "import pathlib\npathlib.Path({marker!r}).write_text('ran')\n" \
              "from transformers import PretrainedConfig\n" \
              "class EvilConfig(PretrainedConfig):\n    model_type = 'evil'\n"


def custom_code_folder(tmp_path):
    """A checkpoint folder whose config.json asks transformers to run the folder's own module."""
    folder, marker = tmp_path / "evil", tmp_path / "ran.txt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "evil", "auto_map": {"AutoConfig": "evil.EvilConfig"},
                                                    "num_hidden_layers": 2, "hidden_size": 64,
                                                    "num_attention_heads": 4}))
    (folder / "evil.py").write_text(EVIL_MODULE.format(marker=str(marker)))
    return folder, marker


def test_bill_on_a_folder_with_custom_code_refuses_even_when_told_yes(tmp_path):
    """The real command, answering y at any prompt: before the fix transformers asked "Do you wish to
    run the custom code? [y/N]" and the y ran evil.py."""
    folder, marker = custom_code_folder(tmp_path)
    run = subprocess.run([sys.executable, "-m", "kvviz", "bill", "--model", str(folder)], input="y\ny\ny\n",
                         capture_output=True, text=True, timeout=120, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert not marker.exists()
    assert run.returncode == 2, run.stdout + run.stderr
    assert "never runs a checkpoint's code" in run.stderr and "Traceback" not in run.stderr


def safetensors_folder(tmp_path, header_length: int):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
                                                    "num_attention_heads": 4, "num_key_value_heads": 2,
                                                    "intermediate_size": 128, "vocab_size": 100}))
    (folder / "model.safetensors").write_bytes(header_length.to_bytes(8, "little") + b"{}")
    return folder


@pytest.mark.parametrize("header_length", [2**62, 2**40, 0])
def test_a_safetensors_header_claiming_huge_sizes_is_not_read(tmp_path, header_length):
    """A header length of 2^62 bytes was read whole: MemoryError. Now the count of parameters is left out."""
    shape = shape_from_pretrained(str(safetensors_folder(tmp_path, header_length)))
    assert shape.num_layers == 2 and shape.num_params is None


def test_bench_refuses_bad_pool_sizes_and_contend_counts_before_running(capsys):
    for flags, words in ((["--pool-sizes", "abc"], "--pool-sizes takes block counts"),
                         (["--contend", "x"], "--contend takes numbers of busy processes"),
                         (["--contend", "0"], "--contend counts must lie between 1 and 16")):
        start = time.perf_counter()
        assert main(["bench", "--model", "/no/such/model", *flags]) == 2
        assert words in capsys.readouterr().out
        assert time.perf_counter() - start < 2  # before the model, let alone the bench


def test_a_read_only_out_file_is_refused_and_kept(tmp_path, capsys):
    prompts, out = tmp_path / "p.txt", tmp_path / "out.jsonl"
    prompts.write_text("ROMEO:\n")
    out.write_text("keep me\n")
    out.chmod(0o444)
    if os.access(out, os.W_OK):
        pytest.skip("running as a user who can write any file (root)")
    assert main(["generate", "--prompts", str(prompts), "--out", str(out)]) == 2
    assert "is read-only" in capsys.readouterr().err
    assert out.read_text() == "keep me\n"


def test_max_tokens_past_the_context_gets_a_sentence(tmp_path, capsys):
    prompts, out = tmp_path / "p.txt", tmp_path / "out.jsonl"
    prompts.write_text("ROMEO:\n")
    assert main(["generate", "--prompts", str(prompts), "--out", str(out), "--max-tokens", "1000000000000",
                 "--num-blocks", "40", "--block-size", "16"]) == 0
    assert "is more than bundled's" in capsys.readouterr().err


# ---- the engine's thread policy (kvviz/engine/cpu/threads.py) --------------------------------------------
def test_threads_follow_the_free_cores():
    assert [threads_for(free, 2) for free in (2.0, 1.7, 1.5, 1.0, 0.3, -1.0)] == [2, 2, 1, 1, 1, 1]
    assert threads_for(7.7, 8) == 8 and threads_for(3.2, 8) == 3


def test_beside_busy_processes_the_engine_takes_fewer_threads():
    """Real competitors: as many busy processes as cores leave no core free, and the share drops to one
    thread within a second of stepping; a fixed KVVIZ_THREADS is kept whatever the load."""
    cores = len(os.sched_getaffinity(0))
    share, fixed = CpuShare(ceiling=max(2, cores)), CpuShare(fixed=2)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and share.choose() > 1:
            time.sleep(0.05)
        assert share.choose() == 1 and share.others >= cores - 1
        assert fixed.choose() == 2
    finally:
        for process in busy:
            process.kill()
            process.wait()
