"""`python -m kvviz bench` (and `kvviz bench`): the bench's flags, its run and its printed tables.

The measuring is kvviz.bench; this module reads the flags, runs every workload, and prints.

    python -m kvviz bench                 # about 25M-parameter random Llama, 48 requests
    python -m kvviz bench --quick         # a smoke test in well under a minute
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from transformers.utils import logging as hf_logging

from kvviz.bench import (
    BENCH_SHAPE,
    SystemRun,
    busy_processes,
    bench_bf16,
    bench_hf,
    bench_kvviz,
    bench_shared_prefix,
    bench_tight_pool,
    build_random_llama,
    compare_outputs,
    count_params,
    flops_results,
    mixed_results,
    requests_that_fit,
    step_overhead,
    system_key,
    targets,
)
from kvviz.cli.common import check_output_path, write_atomically
from kvviz.cli.engine_flags import add_engine_arguments, engine_config, given
from kvviz.engine.device_memory import available_memory_bytes
from kvviz.engine.config import DEFAULTS
from kvviz.engine.cpu.threads import cpu_share
from kvviz.engine.kv_cache import CacheShape
from kvviz.models import ModelLoadError, load_model
from kvviz.vllm.backend import bench_against_vllm, missing_message
from kvviz.workloads import mixed_workload, shared_prefix_workload

HF_BATCH_SETTINGS = ("block_size", "num_blocks", "max_num_seqs", "max_num_batched_tokens")  # generate_batch's too
QUICK = dict(requests=8, min_len=8, max_len=32, min_out=8, max_out=32, prefix_requests=8,
             prefix_len=32, suffix_len=8, prefix_out=8, peak_size=512, peak_seconds=0.3,
             pool_sizes="128,1024")


def add_bench_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    add = parser.add_argument
    add("--model", default="random",
        help="'random' (about 25M-parameter random Llama), 'bundled', a Hugging Face id or a folder")
    add("--requests", type=int, default=48, help="requests in the mixed workload")
    add("--min-len", type=int, default=16, help="shortest prompt, tokens")
    add("--max-len", type=int, default=192, help="longest prompt, tokens")
    add("--min-out", type=int, default=16, help="fewest output tokens")
    add("--max-out", type=int, default=192, help="most output tokens")
    add("--seed", type=int, default=0, help="seed of the prompts and of the random weights")
    add("--repeats", type=int, default=1, help="time each system this many times; report the median")
    add("--hf-batch-size", type=int, default=16, help="static batch size of transformers generate")
    add("--pool-sizes", default="512,4096,65536",
        help="pool sizes (blocks) at which to time a step outside the forward pass; '' to skip")
    add("--prefix-requests", type=int, default=32, help="requests in the shared-prefix workload")
    add("--prefix-len", type=int, default=192, help="tokens of the shared system prompt")
    add("--suffix-len", type=int, default=16, help="tokens of each request's own part")
    add("--prefix-out", type=int, default=32, help="output tokens per shared-prefix request")
    add("--peak-size", type=int, default=2048, help="matrix size of the matmul peak measurement")
    add("--peak-seconds", type=float, default=2.0, help="how long to measure the matmul peak")
    add("--device", default=None, help="cpu or cuda (default: cuda when present)")
    add("--dtype", default=None, help="float32, bfloat16 or float16 (default: float32 on CPU)")
    add("--skip-hf", action="store_true", help="run kvviz only")
    add("--quick", action="store_true", help="small sizes for a smoke test (overrides the sizes above)")
    add("--json", metavar="OUT", default=None,
        help="also write the results to this JSON file: a new or regular file, replaced whole at the end "
             "(a folder, link, device or pipe is refused before the bench starts)")
    add("--against", choices=("vllm",), default=None,
        help="also run vLLM on the mixed workload (kvviz/vllm/backend.py)")
    add("--contend", default="", metavar="N[,N...]",
        help="also run the mixed workload beside N busy processes (python -c 'while True: pass'), kvviz "
             "Engine(model) and, with --against vllm, vLLM; a table puts them beside the quiet run")
    add("--vllm-python", default=None, help="vLLM's interpreter (default: $KVVIZ_VLLM_PYTHON or .venv-vllm/bin/python)")
    add_engine_arguments(parser, "The headline row runs Engine(model), every default; any of these given adds a "
                                 "'kvviz tuned' row, and the shared-prefix and tight-pool runs use them too.")
    return parser


def load_bench_model(source: str, seed: int, device=None, dtype=None):
    """(model, name, max_context): random weights by default, else through kvviz.load_model."""
    if source == "random":
        model = build_random_llama(BENCH_SHAPE, seed, device, dtype)
        shape = BENCH_SHAPE
        name = f"random Llama {shape.num_layers}L d{shape.hidden_size} {shape.num_heads}h/{shape.num_kv_heads}kv"
        return model, name, shape.max_context

    lm = load_model(source, device=device, dtype=dtype)
    return lm.model, lm.name, lm.max_context


def run_bench(args: argparse.Namespace) -> int:
    """Run every workload, print the tables, optionally write JSON. Returns an exit code."""
    if args.quick:
        for key, value in QUICK.items():
            setattr(args, key, value)
    problem = _check_args(args)
    if problem is None and args.json:
        try:
            check_output_path(Path(args.json), "--json")  # before the bench, not after it
        except ValueError as error:
            problem = str(error)
    if problem is None and args.against == "vllm":
        problem = missing_message(args.vllm_python)
    if problem:
        print(problem)
        return 2
    hf_logging.set_verbosity_error()  # generation-config chatter would bury the tables
    try:
        model, model_name, max_context = load_bench_model(args.model, args.seed, args.device, args.dtype)
    except ModelLoadError as error:
        print(error)
        return 2
    if args.max_len + args.max_out > max_context or args.prefix_len + args.suffix_len + args.prefix_out > max_context:
        print(f"The longest request would need more than the model's {max_context}-token context; "
              "lower --max-len/--max-out or the prefix sizes.")
        return 2
    device, dtype = next(model.parameters()).device, next(model.parameters()).dtype
    vocab_size = model.get_output_embeddings().weight.shape[0]
    tuned = given(args)  # what the user set; the headline keeps the defaults
    engine_settings = {key: getattr(engine_config(args), key) for key in HF_BATCH_SETTINGS}
    results = {"model": {"name": model_name, "params": count_params(model), "device": str(device),
                         "dtype": str(dtype).removeprefix("torch."), "threads": torch.get_num_threads()},
               "settings": {k: v for k, v in vars(args).items() if isinstance(v, (int, float, str, bool, type(None)))}}
    print(f"model: {model_name}, {count_params(model) / 1e6:.1f}M parameters, {results['model']['dtype']} "
          f"on {device} ({torch.get_num_threads()} threads)")

    mixed = mixed_workload(args.requests, args.min_len, args.max_len, args.min_out, args.max_out,
                           vocab_size, args.seed)
    warmup = mixed_workload(2, 8, 8, 4, 4, vocab_size, args.seed + 7)
    runs = [bench_kvviz(model, mixed, warmup, args.repeats, {})]  # Engine(model): the defaults
    if tuned:
        runs.append(bench_kvviz(model, mixed, warmup, args.repeats, tuned, "kvviz tuned"))
    if not args.skip_hf:
        runs += bench_hf(model, mixed, warmup, args.repeats, args.hf_batch_size, engine_settings)
    results["mixed"] = mixed_results(mixed, runs)
    results["flops"] = flops_results(model, mixed, runs[0], device, dtype, args)
    results["memory"] = {"kvviz_slack_fraction": runs[0].details["slack_fraction"]}
    static = next((r for r in runs if r.name.startswith("hf generate (") and r.outputs is not None), None)
    if static is not None:
        results["memory"]["static_batch_padding_fraction"] = static.details["padding_fraction"]
    print_mixed(results, runs)
    if device.type == "cpu" and dtype == torch.float32:  # bf16 beside fp32; vLLM stays fp32 against fp32
        results["bf16"] = bench_bf16(model, mixed, warmup, args.repeats, runs[0])
        bf16 = results["bf16"]
        print(f"bf16: skipped, {bf16['skipped']}" if "skipped" in bf16 else
              f"kvviz Engine(model) in bf16: {bf16['tokens_per_s']:.1f} output tok/s, "
              f"{bf16['speedup_over_fp32']:.2f}x fp32; outputs {bf16['outputs_equal_to_fp32']}")
    if args.against == "vllm":  # vLLM on the same weights and prompts, in its own environment
        results["mixed"]["systems"]["vllm"] = bench_against_vllm(model, mixed, runs[0], args.repeats, args.vllm_python)
    if args.contend:
        results["contended"] = bench_contended(model, mixed, warmup, runs[0], args)
        print_contended(results)
    sizes = pool_sizes(args.pool_sizes)
    block_bytes = DEFAULTS.block_size * CacheShape.from_model(model).bytes_per_token
    too_big = [n for n in sizes if n * block_bytes > available_memory_bytes(device) // 2]
    if too_big:
        print(f"\nskipping pools of {too_big} blocks: they would take more than half of the free memory")
        sizes = [n for n in sizes if n not in too_big]
    results["pool_sizes"] = ([step_overhead(model, mixed.head(requests_that_fit(mixed, min(sizes))), n) for n in sizes]
                             if sizes else [])
    print_pool_sizes(results["pool_sizes"])

    prefix = shared_prefix_workload(args.prefix_requests, args.prefix_len, args.suffix_len,
                                    args.prefix_out, vocab_size, args.seed)
    results["shared_prefix"] = bench_shared_prefix(model, prefix, args.repeats, tuned)
    results["tight_pool"] = bench_tight_pool(model, mixed, runs[0], tuned)
    results["targets"] = targets(results)
    print_kvviz_only(results)
    if args.json:
        write_atomically(Path(args.json), [json.dumps(results, indent=2), "\n"], "--json")
        print(f"results written to {args.json}")
    return 0


def whole_numbers(text: str, flag: str, what: str, unit: str, most: int, example: str) -> list[int]:
    """A flag's comma-separated whole numbers from 1 to `most`; raises ValueError with the sentence to show."""
    try:
        numbers = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"{flag} takes {what} separated by commas, e.g. {example}, not {text!r}.") from None
    if any(not 1 <= number <= most for number in numbers):
        raise ValueError(f"{flag} counts must lie between 1 and {most:,} {unit}; give e.g. {example}.")
    return numbers


MOST_COMPETITORS = 16


def contend_counts(text: str) -> list[int]:
    return whole_numbers(text, "--contend", "numbers of busy processes", "busy processes", MOST_COMPETITORS, "1,2")


def pool_sizes(text: str) -> list[int]:
    return whole_numbers(text, "--pool-sizes", "block counts", "blocks", 2**20, "512,4096")


def bench_contended(model, mixed, warmup, quiet: SystemRun, args) -> list[dict]:
    """The mixed workload again beside each count of busy processes: kvviz Engine(model), and vLLM with
    --against vllm; each run's outputs against the quiet kvviz run's."""
    rows = []
    for count in contend_counts(args.contend):
        with busy_processes(count):
            run = bench_kvviz(model, mixed, warmup, args.repeats, {})
            row = {"busy_processes": count, "kvviz": {
                "seconds": run.seconds, "output_tokens_per_s": run.tokens_per_s,
                "kept": run.tokens_per_s / quiet.tokens_per_s,
                "outputs_equal": compare_outputs(quiet.outputs, run.outputs).num_equal,
                "threads": cpu_share.describe()}}  # what the engine chose as the run ended
            if args.against == "vllm":
                row["vllm"] = bench_against_vllm(model, mixed, quiet, args.repeats, args.vllm_python, announce=False)
        rows.append(row)
    return rows


def _check_args(args) -> str | None:
    if min(args.requests, args.min_len, args.min_out, args.repeats, args.hf_batch_size,
           args.prefix_requests, args.prefix_len, args.suffix_len, args.prefix_out) < 1:
        return "Every count and length must be at least 1; check --requests, the lengths and --repeats."
    if args.min_len > args.max_len or args.min_out > args.max_out:
        return "A minimum length is above its maximum; give --min-len <= --max-len and --min-out <= --max-out."
    try:
        engine_config(args).validate()  # the engine flags, before the model loads
        contend_counts(args.contend)
        pool_sizes(args.pool_sizes)
    except ValueError as error:
        return str(error)
    return None


# ---- printing ----------------------------------------------------------------------------
LABELS = {"kvviz": "kvviz Engine(model)", "kvviz tuned": "kvviz tuned"}  # the headline: defaults


def print_mixed(results: dict, runs: list[SystemRun]) -> None:
    mixed = results["mixed"]
    print(f"\nmixed workload: {mixed['requests']} requests, {mixed['prompt_tokens']:,} prompt tokens, "
          f"{mixed['output_tokens']:,} output tokens requested; greedy, ignore EOS")
    print(f"{'system':<24}{'time s':>9}{'output tok/s':>14}{'kvviz is':>10}   outputs equal to kvviz")
    for run in runs:
        label = LABELS.get(run.name, run.name)
        if run.outputs is None:
            print(f"{label:<24}   unavailable ({run.error})")
            continue
        entry = mixed["systems"][system_key(run.name)]
        ratio = f"{entry['kvviz_speedup']:.2f}x" if "kvviz_speedup" in entry else "-"
        equal = "(reference)" if run is runs[0] else compare_outputs(run.outputs, runs[0].outputs).describe()
        print(f"{label:<24}{run.seconds:>9.2f}{run.tokens_per_s:>14.1f}{ratio:>10}   {equal}")
    tuned = next((r for r in runs if r.name == "kvviz tuned"), None)
    head = runs[0].details
    print(f"  kvviz Engine(model) runs every engine default ({head['num_blocks']:,} blocks); a step takes "
          f"{head['step_ms']:.1f} ms median, {head['outside_forward_ms']:.2f} ms of it outside the forward pass")
    if tuned is not None:
        print("  kvviz tuned sets " + ", ".join(f"{k}={v}" for k, v in tuned.details["settings"].items()))
    static = next((r for r in runs if r.name.startswith("hf generate (") and r.outputs is not None), None)
    if static is not None:
        print(f"  tok/s counts requested tokens only; static batches generated {static.generated_tokens:,} "
              f"tokens to give the {static.output_tokens:,} requested")
    flops = results["flops"]
    print(f"kvviz compute: {flops['model_flops'] / 1e12:.2f} TFLOP of model work, "
          f"{flops['achieved_flops_per_s'] / 1e9:.1f} GFLOP/s = {100 * flops['fraction_of_peak']:.1f}% of "
          f"this machine's {flops['matmul_size']}x{flops['matmul_size']} matmul peak "
          f"({flops['matmul_peak_flops_per_s'] / 1e9:.1f} GFLOP/s)")
    memory = results["memory"]
    line = f"KV memory waste: kvviz {100 * memory['kvviz_slack_fraction']:.1f}% (empty slots in last blocks)"
    if "static_batch_padding_fraction" in memory:
        line += (f"; static batches {100 * memory['static_batch_padding_fraction']:.1f}% "
                 "(padding and unrequested tokens)")
    print(line)


def print_contended(results: dict) -> None:
    """Quiet and contended side by side: each system's output tok/s, the share of its quiet speed it
    kept, and kvviz over vLLM at each count."""
    systems = results["mixed"]["systems"]
    quiet_kvviz, quiet_vllm = systems["kvviz"], systems.get("vllm")
    print("\nquiet and beside busy processes (python -c 'while True: pass'), the mixed workload, "
          "output tok/s")
    header = f"{'busy processes':<16}{'kvviz':>10}{'kept':>7}"
    if quiet_vllm:
        header += f"{'vLLM':>10}{'kept':>7}{'kvviz/vLLM':>12}"
    print(header + "   outputs equal to quiet kvviz")
    rows = [{"busy_processes": 0, "kvviz": {"output_tokens_per_s": quiet_kvviz["output_tokens_per_s"], "kept": 1.0},
             **({"vllm": quiet_vllm} if quiet_vllm else {})}] + results["contended"]
    for row in rows:
        kvviz = row["kvviz"]
        line = f"{str(row['busy_processes']) + (' (quiet)' if not row['busy_processes'] else ''):<16}" \
               f"{kvviz['output_tokens_per_s']:>10.1f}{100 * kvviz['kept']:>6.0f}%"
        equal = ([f"kvviz {kvviz['outputs_equal']}/{results['mixed']['requests']}"] if "outputs_equal" in kvviz
                 else ["(reference)"])
        if "vllm" in row:
            vllm = row["vllm"]
            kept = vllm["output_tokens_per_s"] / quiet_vllm["output_tokens_per_s"]
            ratio = kvviz["output_tokens_per_s"] / vllm["output_tokens_per_s"]
            line += f"{vllm['output_tokens_per_s']:>10.1f}{100 * kept:>6.0f}%{ratio:>11.2f}x"
            equal.append(f"vLLM {vllm['outputs_equal']}/{vllm['requests']}")
        print(line + "   " + ", ".join(equal))
    for row in results["contended"]:
        print(f"  beside {row['busy_processes']}: kvviz ran on {row['kvviz']['threads']}")


def print_pool_sizes(rows: list[dict]) -> None:
    if not rows:
        return
    print(f"\ntime per step outside the forward pass, Engine(model, num_blocks=N) otherwise default, "
          f"first {rows[0]['steps'] + 2} steps of the first requests that fit the smallest pool:")
    for row in rows:
        low, high = row["spread_ms"]
        print(f"  {row['num_blocks']:>7,} blocks: {row['outside_forward_ms']:6.2f} ms median "
              f"({low:.2f}-{high:.2f}) of a {row['step_ms']:.1f} ms step")


def print_kvviz_only(results: dict) -> None:
    prefix = results["shared_prefix"]
    print(f"\nshared prefix: {prefix['requests']} requests sharing a {prefix['prefix_len']}-token prefix: "
          f"hit rate {100 * prefix['hit_rate']:.1f}% of prompt tokens "
          f"(at best {100 * prefix['best_hit_rate']:.1f}%); {prefix['seconds_cached']:.2f} s cached "
          f"vs {prefix['seconds_uncached']:.2f} s uncached = {prefix['speedup']:.2f}x; "
          f"outputs equal {prefix['outputs_equal']}/{prefix['requests']}")
    tight = results["tight_pool"]
    print(f"tight pool: {tight['requests']} requests in {tight['num_blocks']} blocks "
          f"(they need {tight['demand_blocks']} at full length): {tight['preemptions']} preemptions, "
          f"outputs equal to the roomy pool {tight['outputs_equal']}/{tight['requests']}")
    met = results["targets"]
    words = {True: "met", False: "MISSED", None: "not run"}
    print(f"targets: kvviz >= 2x generate {words[met['speedup_over_generate']]}, >= 2x generate_batch "
          f"{words[met['speedup_over_generate_batch']]}, KV waste < 4% {words[met['kv_waste']]}")


def main(argv: list[str] | None = None) -> int:
    parser = add_bench_arguments(argparse.ArgumentParser(prog="python -m kvviz bench",
                                                         description=__doc__.splitlines()[0]))
    return run_bench(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
