"""Command line: python -m kvviz generate | bench | bill."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from kvviz.engine.config import DEFAULTS, EngineConfig
from kvviz.engine.sampling import SamplingParams
from kvviz.throughput import output_tokens_per_s
from kvviz.workloads import jsonl_lines, parse_prompts, read_prompts, request_sampling  # noqa: F401 (parse_prompts: its old home)

SAMPLING_DEFAULTS = SamplingParams()


def check_output_path(path: Path) -> None:
    """Refuse an output path that cannot be written, before any work is done."""
    folder = path.parent
    if path.is_dir():
        raise ValueError(f"--out {str(path)!r} is a folder; give a file name such as outputs.jsonl.")
    if not folder.is_dir():
        raise ValueError(f"There is no folder {str(folder)!r} for --out; create it or pick another path.")
    try:
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as error:
        raise ValueError(f"Cannot write in {str(folder)!r} ({error.strerror}); pick a writable --out path.") from None


def write_atomically(path: Path, lines: list[str]) -> None:
    """Write to a temporary file beside `path`, then rename it into place: a failed write keeps the old file."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.writelines(lines)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except (OSError, UnicodeError) as error:
        Path(temporary).unlink(missing_ok=True)
        reason = getattr(error, "strerror", None) or type(error).__name__
        raise ValueError(f"Writing {str(path)!r} failed ({reason}); the previous file is unchanged, "
                         "free some space or pick another --out path.") from None


def cmd_generate(args) -> int:
    kvviz_only = [flag for flag, used in (("--n", args.n != 1), ("--speculative-tokens", args.speculative_tokens),
                                          ("--preemption-mode swap", args.preemption_mode != "recompute")) if used]
    if args.backend == "vllm" and kvviz_only:
        raise ValueError(f"{kvviz_only[0]} is a setting of kvviz's engine, not passed to vLLM; "
                         "drop it or run without --backend vllm.")
    if args.backend == "vllm":  # the same job on vLLM, in its own environment
        from kvviz.vllm_backend import generate_cli
        return generate_cli(args)
    from tqdm import tqdm

    from kvviz import Engine, load_model

    prompts = read_prompts(Path(args.prompts))
    check_output_path(Path(args.out))
    lm = load_model(args.model, device=args.device, dtype=args.dtype)
    engine = Engine(lm, engine_config(args))
    # with --seed, prompt i samples with seed + i*n: reproducible, no two samples alike
    params = [request_sampling(sampling_params(args), i) for i in range(len(prompts))]
    bar = tqdm(total=len(prompts), unit="req", desc=f"{lm.name} on {lm.device}", file=sys.stderr)

    def progress(done, total, record):
        bar.update(done - bar.n)

    start = time.perf_counter()
    outputs = engine.generate(prompts, params, progress=progress)
    elapsed = time.perf_counter() - start
    bar.close()
    write_atomically(Path(args.out), jsonl_lines(prompts, outputs))
    stats = engine.stats
    generated = sum(len(sample) for o in outputs for sample in o.samples)
    prompt_tokens = sum(len(o.prompt_token_ids) for o in outputs)
    summary = {
        "requests": len(outputs), "prompt_tokens": prompt_tokens, "generated_tokens": generated,
        "seconds": round(elapsed, 3), "output_tokens_per_s": round(output_tokens_per_s(generated, elapsed), 1),
        "peak_blocks_in_use": stats["peak_blocks"], "num_blocks": engine.num_blocks, "block_size": engine.block_size,
        "preemptions": engine.scheduler.num_preemptions,
        "prefix_cache_hit_rate": round(stats["cached_tokens"] / max(prompt_tokens, 1), 4),
    }
    if engine.config.speculative_tokens:
        summary["draft_tokens_accepted"] = f"{stats['accepted_tokens']} of {stats['draft_tokens']}"
    print_summary(summary, args.out)
    return 0


def print_summary(summary: dict, out_path: str) -> None:
    """The job's figures, one a line, as both backends of `generate` print them."""
    width = max(map(len, summary))
    for key, value in summary.items():
        print(f"{key:<{width}}  {value}")
    print(f"wrote {out_path}")


def sampling_params(args) -> SamplingParams:
    """The sampling flags of `generate` (both backends) as one SamplingParams."""
    return SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, top_k=args.top_k,
                          top_p=args.top_p, seed=args.seed, ignore_eos=args.ignore_eos, n=args.n)


def engine_config(args) -> EngineConfig:
    """The engine flags of `generate` as an EngineConfig."""
    return EngineConfig(block_size=args.block_size, num_blocks=args.num_blocks,
                        enable_prefix_caching=not args.no_prefix_caching, max_num_seqs=args.max_num_seqs,
                        max_num_batched_tokens=args.max_num_batched_tokens,
                        speculative_tokens=args.speculative_tokens, preemption_mode=args.preemption_mode,
                        swap_space_blocks=args.swap_space_blocks)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m kvviz", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    generate = commands.add_parser("generate", help="generate text for a file of prompts")
    generate.add_argument("--model", default="bundled", help="bundled | a Hugging Face id (local cache) | a folder")
    generate.add_argument("--prompts", required=True, help=".txt (a prompt per line) or .jsonl ({\"prompt\": ...})")
    generate.add_argument("--max-tokens", type=int, default=64)  # more than SamplingParams' 32: a job, not a demo
    generate.add_argument("--temperature", type=float, default=SAMPLING_DEFAULTS.temperature)
    generate.add_argument("--top-k", type=int, default=SAMPLING_DEFAULTS.top_k)
    generate.add_argument("--top-p", type=float, default=SAMPLING_DEFAULTS.top_p)
    generate.add_argument("--seed", type=int, default=SAMPLING_DEFAULTS.seed)
    generate.add_argument("--ignore-eos", action="store_true")
    generate.add_argument("--n", type=int, default=SAMPLING_DEFAULTS.n,
                          help="samples per prompt; they share the prompt's blocks (parallel sampling)")
    generate.add_argument("--out", default="outputs.jsonl")
    generate.add_argument("--block-size", type=int, default=DEFAULTS.block_size)
    generate.add_argument("--num-blocks", type=int, default=DEFAULTS.num_blocks)
    generate.add_argument("--max-num-seqs", type=int, default=DEFAULTS.max_num_seqs)
    generate.add_argument("--max-num-batched-tokens", type=int, default=DEFAULTS.max_num_batched_tokens)
    generate.add_argument("--no-prefix-caching", action="store_true")
    generate.add_argument("--speculative-tokens", type=int, default=DEFAULTS.speculative_tokens,
                          help="draft tokens per greedy decode, by prompt lookup (0: off)")
    generate.add_argument("--preemption-mode", choices=("recompute", "swap"), default=DEFAULTS.preemption_mode)
    generate.add_argument("--swap-space-blocks", type=int, default=DEFAULTS.swap_space_blocks,
                          help="CPU blocks for --preemption-mode swap (default: as many as the pool)")
    generate.add_argument("--device", default=None, help="cuda | cpu (default: cuda when present)")
    generate.add_argument("--dtype", default=None, help="float32 | bfloat16 | float16")
    from kvviz.vllm_backend import add_generate_arguments
    add_generate_arguments(generate)  # --backend vllm and vLLM's parallel settings
    generate.set_defaults(func=cmd_generate)

    from kvviz.bench_cli import add_bench_arguments, run_bench
    bench = commands.add_parser("bench", help="kvviz against transformers generate and generate_batch")
    add_bench_arguments(bench)
    bench.set_defaults(func=run_bench)

    from kvviz.memory_cli import add_bill_arguments, run_bill
    bill = commands.add_parser("bill", help="the KV-cache memory bill of a model")
    add_bill_arguments(bill)
    from kvviz import vllm_backend
    vllm_backend.add_bill_arguments(bill)  # --against-vllm
    bill.set_defaults(func=lambda args: print(vllm_backend.bill_against_vllm(args) if args.against_vllm
                                              else run_bill(args)) or 0)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ValueError as error:  # every refusal in kvviz is one sentence saying what to do
        print(f"error: {error}", file=sys.stderr)
        return 2
