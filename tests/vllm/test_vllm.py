"""kvviz beside real vLLM (its own venv, made by scripts/setup_vllm.sh); no mocks.

vLLM takes 15-25 s to start an engine, so one worker process runs every engine job of this
module (module-scoped fixture); the CLI tests start it twice more. Without vLLM's environment
the vLLM tests are skipped with the reason; the refusals that need no vLLM always run.
"""
from __future__ import annotations

import json
import re
import shutil

import pytest
import torch

from kvviz import Engine, SamplingParams, load_model, shapes
from kvviz.cli.bill import format_comparison
from kvviz.cli.main import main as cli_main
from kvviz.models import BUNDLED_DIR
from kvviz.vllm import backend as vllm_backend

VLLM_MISSING = vllm_backend.missing_message()
needs_vllm = pytest.mark.skipif(VLLM_MISSING is not None, reason=f"vLLM tests skipped: {VLLM_MISSING}")
KV_BYTES = 8 * 2**20  # the KV space both allocation checks give vLLM
CONTEXT = 256


def tiny_folder(arch: str, folder) -> str:
    """A random-weight decoder saved as vLLM loads it (head size 32: vLLM's CPU kernels need 32k)."""
    import transformers as tf

    common = dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=32, max_position_embeddings=CONTEXT, initializer_range=0.05,
                  bos_token_id=1, eos_token_id=2, pad_token_id=0)
    config = tf.LlamaConfig(**common) if arch == "llama" else tf.Qwen3Config(**common)
    torch.manual_seed(0)
    tf.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return str(folder)


def prompts(seed: int, vocab: int, count: int = 6) -> list[list[int]]:
    rng = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (int(n),), generator=rng).tolist()
            for n in torch.randint(4, 40, (count,), generator=rng)]


def kvviz_greedy(folder: str, prompt_ids, max_tokens: int, eos_stop: bool) -> list[list[int]]:
    engine = Engine(load_model(folder, device="cpu", dtype="float32"))
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=not eos_stop)
    return [o.token_ids for o in engine.generate(prompt_ids, params)]


@pytest.fixture(scope="module")
def vllm_runs(tmp_path_factory):
    """One vLLM worker: greedy jobs on a tiny Llama and the bundled model, then two allocations."""
    if VLLM_MISSING:
        pytest.skip(f"vLLM tests skipped: {VLLM_MISSING}")
    root = tmp_path_factory.mktemp("vllm_models")
    folders = {"llama": tiny_folder("llama", root / "llama"), "qwen3": tiny_folder("qwen3", root / "qwen3"),
               "bundled": vllm_backend.model_folder("bundled")}
    work = {"llama": (prompts(0, 512), 24), "bundled": (prompts(1, 4096), 32)}
    jobs = []
    for name, (prompt_ids, max_tokens) in work.items():
        greedy = [{"max_tokens": max_tokens, "temperature": 0.0,
                   "stop_token_ids": vllm_backend.eos_token_ids(folders[name])}]
        jobs.append({"kind": "generate", "model": folders[name], "prompts": prompt_ids,
                     "sampling": greedy * len(prompt_ids),
                     "llm": {"dtype": "float32", "enforce_eager": True, "kv_cache_memory_bytes": KV_BYTES}})
    jobs += [vllm_backend.allocation_job(folders[name], "float32", KV_BYTES, CONTEXT) for name in ("llama", "qwen3")]
    results = vllm_backend.run_jobs(jobs)
    return {"folders": folders, "work": work, "generate": dict(zip(work, results[:2])),
            "allocate": dict(zip(("llama", "qwen3"), results[2:]))}


@needs_vllm
@pytest.mark.parametrize("name", ["llama", "bundled"])
def test_greedy_token_ids_identical(vllm_runs, name):
    result = vllm_backend.check_result(vllm_runs["generate"][name], name)
    prompt_ids, max_tokens = vllm_runs["work"][name]
    ours = kvviz_greedy(vllm_runs["folders"][name], prompt_ids, max_tokens, eos_stop=True)
    theirs = [o["token_ids"] for o in result["outputs"]]
    assert theirs == ours
    assert any(len(set(ids)) > 3 for ids in ours)  # the outputs vary: the comparison compares something


@needs_vllm
@pytest.mark.parametrize("name", ["llama", "qwen3"])
def test_bill_predicts_vllm_allocation(vllm_runs, name):
    result = vllm_backend.check_result(vllm_runs["allocate"][name], name)
    shape = shapes.shape_from_pretrained(vllm_runs["folders"][name])
    compared = vllm_backend.compare_allocation(shape, 4, KV_BYTES, CONTEXT, result)
    assert result["reported"]["kv_cache_tokens"] == result["num_blocks"] * result["block_size"]  # log == config
    assert compared["token_gap"] == 0, compared["explanation"]
    assert compared["kvviz"]["num_blocks"] == compared["vllm"]["num_blocks"]
    assert compared["kvviz"]["max_concurrency"] == pytest.approx(compared["vllm"]["max_concurrency"], abs=0.01)
    text = format_comparison(shape.name, "float32", KV_BYTES, CONTEXT, result["block_size"], compared)
    assert f"{compared['vllm']['kv_cache_tokens']:,}" in text and "agree" in text


@needs_vllm
def test_cli_vllm_backend_writes_kvviz_schema(tmp_path, capsys):
    prompt_file = tmp_path / "prompts.txt"
    prompt_file.write_text("To be, or not to be\nROMEO:\n")
    # engine flags reach both engines: vLLM's pool is 8 usable blocks plus its empty null block
    common = ["generate", "--prompts", str(prompt_file), "--max-tokens", "12", "--num-blocks", "8",
              "--max-num-seqs", "2"]
    assert cli_main(common + ["--out", str(tmp_path / "kvviz.jsonl")]) == 0
    kvviz_summary = capsys.readouterr().out
    assert cli_main(common + ["--out", str(tmp_path / "vllm.jsonl"), "--backend", "vllm", "--enforce-eager",
                              "--kv-cache-bytes", str(KV_BYTES)]) == 0
    vllm_summary = capsys.readouterr().out
    ours = [json.loads(line) for line in (tmp_path / "kvviz.jsonl").read_text().splitlines()]
    theirs = [json.loads(line) for line in (tmp_path / "vllm.jsonl").read_text().splitlines()]
    assert [list(r) for r in theirs] == [list(r) for r in ours]  # field for field, in order
    assert [r["token_ids"] for r in theirs] == [r["token_ids"] for r in ours]
    assert [r["text"] for r in theirs] == [r["text"] for r in ours]
    fields = [[line.split()[0] for line in summary.splitlines()] for summary in (kvviz_summary, vllm_summary)]
    assert fields[0] == fields[1] and "prefix_cache_hit_rate" in fields[0]
    assert re.search(r"^num_blocks +8$", kvviz_summary, re.M) and re.search(r"^num_blocks +9$", vllm_summary, re.M)


@needs_vllm
def test_cli_model_vllm_cannot_load(tmp_path, capsys):
    folder = tmp_path / "broken"
    tiny_folder("llama", folder)
    (folder / "model.safetensors").write_bytes(b"not a checkpoint")
    for name in ("tokenizer.json", "tokenizer_config.json"):  # kvviz can tokenize; vLLM cannot load the weights
        shutil.copy(BUNDLED_DIR / name, folder / name)
    (tmp_path / "p.txt").write_text("1 2 3\n")
    out = tmp_path / "out.jsonl"
    code = cli_main(["generate", "--backend", "vllm", "--enforce-eager", "--model", str(folder),
                     "--prompts", str(tmp_path / "p.txt"), "--out", str(out)])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert code != 0 and not out.exists() and not list(tmp_path.glob(".out.jsonl*"))
    assert error.startswith("error: vLLM could not run") and error.count(". ") <= 1


def test_cli_vllm_missing_and_empty_prompts(tmp_path, capsys):
    prompt_file, out = tmp_path / "p.txt", tmp_path / "out.jsonl"
    prompt_file.write_text("hello\n")
    code = cli_main(["generate", "--backend", "vllm", "--vllm-python", str(tmp_path / "nowhere" / "python"),
                     "--prompts", str(prompt_file), "--out", str(out)])
    error = capsys.readouterr().err
    assert code == 2 and not out.exists() and "bash scripts/setup_vllm.sh" in error and error.count("\n") == 1
    prompt_file.write_text("\n  \n")
    code = cli_main(["generate", "--backend", "vllm", "--prompts", str(prompt_file), "--out", str(out)])
    error = capsys.readouterr().err
    assert code == 2 and not out.exists() and "holds no prompts" in error


def test_bench_against_vllm_missing_says_how(capsys, tmp_path):
    from kvviz.cli.bench import main as bench_main

    assert bench_main(["--quick", "--against", "vllm", "--vllm-python", str(tmp_path / "python")]) == 2
    assert "bash scripts/setup_vllm.sh" in capsys.readouterr().out


@needs_vllm
def test_batch_page_runs_the_same_batch_on_vllm():
    from app_tests import open_lesson

    at = open_lesson("lessons/batch_generation.py")
    at.slider(key="batch_count").set_value(4)
    at.slider(key="batch_prompt_len").set_value((4, 8))
    at.slider(key="batch_output_len").set_value((3, 6)).run()
    next(b for b in at.button if b.label == "Run the batch").click().run()
    next(b for b in at.button if b.label == "Run on vLLM and compare").click().run(timeout=900)
    assert not at.exception and "batch_vllm_error" not in at.session_state
    theirs, ours = at.session_state["batch_vllm_run"], at.session_state["batch_run"]
    assert theirs["outputs"] == [o.token_ids for o in ours.outputs]  # greedy: token for token
    shown = {m.label: m.value for m in at.metric}
    assert shown["Outputs identical to kvviz"] == "4 of 4"
    assert shown["Preemptions"] == str(theirs["preemptions"])
