"""The 8-bit paged cache against the model's own dtype, on the bundled model.

    python scripts/bench_kv_dtype.py            # every figure below
    python scripts/bench_kv_dtype.py --quick    # fewer requests, prompts and runs; no vLLM
    python scripts/bench_kv_dtype.py --vllm-only   # bytes per token and the comparison with vLLM only

For kv_cache_dtype "auto", "int8", "fp8" and "fp8_per_tensor" (EngineConfig.kv_cache_dtype; the
last is vLLM's fp8 scheme, one scale of 1.0 and values rounded toward zero, not timed in 3):
1. bytes per token, measured on a PagedKVCache (values and scales), and the formula beside it;
2. the pool's capacity in tokens for 1 GiB: whole blocks of 16 tokens, without and with each
   block's bookkeeping (about 460 bytes of host memory);
3. generated tokens per second on a default batch (mixed prompt and output lengths, greedy),
   the median of --runs runs, the three dtypes taking turns within a round, and the ratio to "auto",
   by the wall clock and by the process's CPU time; on the CPU the compiled kernel reads every dtype
   in place, and "int8" with attention="sdpa" (gather, dequantize, SDPA) runs beside them;
4. quality: the mean and largest per-step KL divergence of next-token distributions against the
   "auto" cache (teacher-forced along "auto"'s greedy continuation), and the first generated token
   where the greedy outputs part, over a set of Shakespeare-like prompts.
Then, if vLLM's venv works (kvviz/vllm/), vLLM on the same model and prompts (token ids), greedy,
with kv_cache_dtype "auto" and "fp8": its own report of its cache capacity for 1 GiB beside ours,
and how many prompts' greedy outputs are identical, pair by pair (vLLM fp8 / vLLM auto, kvviz fp8 /
kvviz auto, kvviz fp8 / vLLM fp8, kvviz fp8_per_tensor / vLLM fp8, kvviz auto / vLLM auto), with
the first differing token of each prompt (null: identical).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from kvviz import load_model
from kvviz.bench import compare_outputs
from kvviz.engine.cache_dtype import cache_dtype_quality, measured_bytes_per_token
from kvviz.engine.engine import Engine
from kvviz.engine.sampling import SamplingParams
from kvviz.engine.block_pool import BLOCK_BOOKKEEPING_BYTES
from kvviz.engine.kv_cache import KV_CACHE_DTYPES
from kvviz.shapes import ModelShape
from kvviz.workloads import mixed_workload

GiB = 2**30
BLOCK_SIZE = 16
PROMPTS = ["ROMEO:", "JULIET:\nO Romeo, Romeo, wherefore art thou", "First Citizen:\nBefore we proceed any further",
           "KING RICHARD III:\nNow is the winter of our discontent", "MENENIUS:\nI tell you, friends,",
           "LADY CAPULET:", "GLOUCESTER:\nWhat, will the aspiring blood of Lancaster", "Nurse:\nFaith, I can tell"]


# int8 on the gather + SDPA path, which dequantizes gathered copies, against the kernel reading codes in place
SPEED_CASES = {"auto": {}, "int8": {"kv_cache_dtype": "int8"}, "fp8": {"kv_cache_dtype": "fp8"},
               "int8, attention='sdpa'": {"kv_cache_dtype": "int8", "attention": "sdpa"}}


def speed(lm, workload, runs: int) -> dict:
    """Generated tokens per second of each dtype on the workload (median and all runs, turns taken),
    by the wall clock and by this process's CPU time (which other programs on a shared machine
    disturb far less)."""
    greedy = [SamplingParams(max_tokens=n, ignore_eos=True) for n in workload.max_tokens]
    seconds = {name: [] for name in SPEED_CASES}
    cpu_seconds = {name: [] for name in SPEED_CASES}
    for round_ in range(runs + 1):  # round 0 warms up
        for name, settings in SPEED_CASES.items():
            engine = Engine(lm, **settings)
            start, cpu_start = time.perf_counter(), time.process_time()
            engine.generate(workload.prompts, greedy)
            if round_:
                seconds[name].append(time.perf_counter() - start)
                cpu_seconds[name].append(time.process_time() - cpu_start)
    tokens = workload.num_output_tokens
    return {name: {"tokens_per_s": tokens / statistics.median(seconds[name]),
                   "all_tokens_per_s": [round(tokens / x, 1) for x in seconds[name]],
                   "tokens_per_cpu_s": tokens / statistics.median(cpu_seconds[name]),
                   "all_tokens_per_cpu_s": [round(tokens / x, 1) for x in cpu_seconds[name]]}
            for name in SPEED_CASES}


def vllm_comparison(lm, prompts: list[str], max_tokens: int, kvviz_tokens_per_gib) -> dict:
    """vLLM's CPU build on the bundled model, kv_cache_dtype "auto" and "fp8": its capacity for 1 GiB
    beside kvviz's (kvviz_tokens_per_gib(dtype, block_size)), and greedy agreement with kvviz's."""
    from kvviz.vllm import backend

    if backend.find_python() is None:
        return {"error": backend.missing_message()}
    token_ids = [lm.tokenizer(prompt)["input_ids"] for prompt in prompts]
    try:
        vllm = backend.greedy_by_cache_dtype(backend.model_folder("bundled"), token_ids, max_tokens, kv_bytes=GiB)
    except (ValueError, OSError) as error:
        return {"error": str(error)}
    greedy = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    outputs = {f"vLLM {name}": run["outputs"] for name, run in vllm.items()}
    for name in ("auto", "fp8", "fp8_per_tensor"):
        outputs[f"kvviz {name}"] = [o.token_ids for o in Engine(lm, kv_cache_dtype=name).generate(token_ids, greedy)]
    agreement = {}
    for a, b in [("vLLM fp8", "vLLM auto"), ("kvviz fp8", "kvviz auto"), ("kvviz fp8", "vLLM fp8"),
                 ("kvviz fp8_per_tensor", "vLLM fp8"), ("kvviz auto", "vLLM auto")]:
        compared = compare_outputs(outputs[b], outputs[a])
        agreement[f"{a} / {b}"] = {"identical": f"{compared.num_equal} of {compared.num_requests}",
                                   "first_difference": [compared.first_divergence.get(i) for i in range(len(prompts))]}
    block_size = vllm["fp8"]["block_size"]
    capacity = {f"vLLM {name}": run["kv_cache_tokens"] for name, run in vllm.items()}
    for name in ("auto", "fp8", "fp8_per_tensor"):
        capacity[f"kvviz {name}, blocks of {block_size}"] = kvviz_tokens_per_gib(name, block_size)
        capacity[f"kvviz {name}, blocks of {BLOCK_SIZE}"] = kvviz_tokens_per_gib(name, BLOCK_SIZE)
    return {"vllm_version": vllm["fp8"]["vllm_version"], "vllm_block_size": block_size,
            "greedy": f"{len(prompts)} prompts x {max_tokens} tokens, EOS ignored",
            "tokens_in_1_GiB": capacity, "agreement": agreement}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int, default=None, help="timed runs per dtype (default 3; quick 1)")
    parser.add_argument("--max-tokens", type=int, default=None, help="greedy tokens per prompt (default 48)")
    parser.add_argument("--no-vllm", action="store_true", help="skip the comparison with vLLM")
    parser.add_argument("--speed-only", action="store_true", help="bytes and speed only: no quality, no vLLM")
    parser.add_argument("--vllm-only", action="store_true", help="bytes and the vLLM comparison only")
    args = parser.parse_args()
    lm = load_model("bundled")
    shape = ModelShape.of_model(lm.model)
    report = {"model": f"bundled ({shape.num_layers} layers, {shape.num_kv_heads} KV heads, head size "
                       f"{shape.head_dim}, weights {str(lm.dtype).removeprefix('torch.')})", "dtypes": {}}
    element = {"auto": lm.model.dtype.itemsize, "int8": 1, "fp8": 1, "fp8_per_tensor": 1}
    for name in KV_CACHE_DTYPES:
        per_token = measured_bytes_per_token(shape, name, lm.model.dtype)
        report["dtypes"][name] = {
            "bytes_per_token": per_token,
            "formula_values_only": 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * element[name],
            # the cache tensors alone, as vLLM counts its kv_cache_memory_bytes; then with each block's
            # bookkeeping (host memory), as kvviz sizes a pool on the CPU
            "tokens_in_1_GiB": GiB // (BLOCK_SIZE * per_token) * BLOCK_SIZE,
            "tokens_in_1_GiB_with_bookkeeping": GiB // (BLOCK_SIZE * per_token + BLOCK_BOOKKEEPING_BYTES) * BLOCK_SIZE}
    print(json.dumps(report, indent=1), flush=True)
    if args.vllm_only:
        print_vllm_comparison(lm, report, PROMPTS, args.max_tokens or 48)
        return

    runs = args.runs or (1 if args.quick else 3)
    workload = mixed_workload(8 if args.quick else 32, 16, 128, 16, 64 if args.quick else 128, shape.vocab_size)
    tokens_per_s = speed(lm, workload, runs)
    for name, figures in tokens_per_s.items():
        figures["ratio_to_auto"] = figures["tokens_per_s"] / tokens_per_s["auto"]["tokens_per_s"]
        figures["cpu_ratio_to_auto"] = figures["tokens_per_cpu_s"] / tokens_per_s["auto"]["tokens_per_cpu_s"]
    print(json.dumps({"batch": f"{len(workload)} requests, {workload.num_prompt_tokens} prompt and "
                               f"{workload.num_output_tokens} output tokens, greedy; median of {runs}",
                      "speed": tokens_per_s}, indent=1), flush=True)

    if args.speed_only:
        return
    prompts = PROMPTS[:3] if args.quick else PROMPTS
    max_tokens = args.max_tokens or (16 if args.quick else 48)
    quality = cache_dtype_quality(lm, prompts, ["int8", "fp8", "fp8_per_tensor"], max_tokens=max_tokens)
    print(json.dumps({"quality": f"{len(prompts)} prompts x {max_tokens} greedy tokens, KL(auto || dtype) in nats",
                      **{name: {"mean_kl": q.mean_kl, "max_kl": q.max_kl, "first_difference": q.first_difference}
                         for name, q in quality.items()}}, indent=1), flush=True)

    if not (args.quick or args.no_vllm):
        print_vllm_comparison(lm, report, prompts, max_tokens)


def print_vllm_comparison(lm, report: dict, prompts: list[str], max_tokens: int) -> None:
    def tokens_per_gib(name: str, block_size: int) -> int:  # the cache tensors alone, whole blocks
        return GiB // (block_size * report["dtypes"][name]["bytes_per_token"]) * block_size

    print(json.dumps({"vllm": vllm_comparison(lm, prompts, max_tokens, tokens_per_gib)}, indent=1), flush=True)


if __name__ == "__main__":
    main()
