"""Command line: python -m kvviz generate | bench | bill."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path


def read_prompts(path: Path) -> list[str]:
    """A .txt file gives one prompt per non-empty line; a .jsonl file one {"prompt": ...} per line."""
    if not path.is_file():
        raise ValueError(f"There is no prompts file at {str(path)!r}; give a .txt or .jsonl file.")
    return parse_prompts(path.read_text(encoding="utf-8", errors="strict"), path.name)


def parse_prompts(text: str, name: str) -> list[str]:
    """The prompts in the text of a file called `name` (.jsonl: JSON lines; anything else: lines).

    Lines end at \\n (or \\r\\n) only: a form feed or U+2028 inside a prompt stays in that prompt.
    """
    lines = [line.removesuffix("\r") for line in text.removeprefix("\ufeff").split("\n")]
    if name.lower().endswith(".jsonl"):
        prompts = []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError:
                raise ValueError(f"Line {number} of {name} is not valid JSON; "
                                 "write one object like {\"prompt\": \"...\"} per line.") from None
            except RecursionError:
                raise ValueError(f"Line {number} of {name} nests lists or objects too deeply to read; "
                                 "write one object like {\"prompt\": \"...\"} per line.") from None
            prompt = item.get("prompt") if isinstance(item, dict) else item if isinstance(item, str) else None
            if not isinstance(prompt, str):
                raise ValueError(f"Line {number} of {name} has no \"prompt\" string; "
                                 "write one object like {\"prompt\": \"...\"} per line.")
            prompts.append(prompt)
    else:
        prompts = [line for line in lines if line.strip()]
    if not prompts:
        raise ValueError(f"{name} holds no prompts; write at least one non-empty line.")
    return prompts


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
    if args.backend == "vllm":  # the same job on vLLM, in its own environment
        from kvviz.vllm_backend import generate_cli
        return generate_cli(args)
    from tqdm import tqdm

    from kvviz import Engine, SamplingParams, load_model

    prompts = read_prompts(Path(args.prompts))
    check_output_path(Path(args.out))
    lm = load_model(args.model, device=args.device, dtype=args.dtype)
    engine = Engine(lm, block_size=args.block_size, num_blocks=args.num_blocks,
                    enable_prefix_caching=not args.no_prefix_caching, max_num_seqs=args.max_num_seqs,
                    max_num_batched_tokens=args.max_num_batched_tokens)
    # with --seed, prompt i samples with seed + i: reproducible, and not every prompt alike
    params = [SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, top_k=args.top_k,
                             top_p=args.top_p, seed=None if args.seed is None else args.seed + i,
                             ignore_eos=args.ignore_eos) for i in range(len(prompts))]
    bar = tqdm(total=len(prompts), unit="req", desc=f"{lm.name} on {lm.device}", file=sys.stderr)

    def progress(done, total, record):
        bar.update(done - bar.n)

    start = time.perf_counter()
    outputs = engine.generate(prompts, params, progress=progress)
    elapsed = time.perf_counter() - start
    bar.close()
    write_atomically(Path(args.out), [
        json.dumps({"prompt": prompt, "text": output.text, "token_ids": output.token_ids,
                    "finish_reason": output.finish_reason, "num_cached_tokens": output.num_cached_tokens}) + "\n"
        for prompt, output in zip(prompts, outputs)])
    stats = engine.stats
    generated = sum(len(o.token_ids) for o in outputs)
    prompt_tokens = sum(len(o.prompt_token_ids) for o in outputs)
    summary = {
        "requests": len(outputs), "prompt_tokens": prompt_tokens, "generated_tokens": generated,
        "seconds": round(elapsed, 3), "output_tokens_per_s": round(generated / elapsed, 1),
        "peak_blocks_in_use": stats["peak_blocks"], "num_blocks": engine.num_blocks, "block_size": engine.block_size,
        "preemptions": engine.scheduler.num_preemptions,
        "prefix_cache_hit_rate": round(stats["cached_tokens"] / max(prompt_tokens, 1), 4),
    }
    width = max(map(len, summary))
    for key, value in summary.items():
        print(f"{key:<{width}}  {value}")
    print(f"wrote {args.out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m kvviz", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    generate = commands.add_parser("generate", help="generate text for a file of prompts")
    generate.add_argument("--model", default="bundled", help="bundled | a Hugging Face id (local cache) | a folder")
    generate.add_argument("--prompts", required=True, help=".txt (a prompt per line) or .jsonl ({\"prompt\": ...})")
    generate.add_argument("--max-tokens", type=int, default=64)
    generate.add_argument("--temperature", type=float, default=0.0)
    generate.add_argument("--top-k", type=int, default=0)
    generate.add_argument("--top-p", type=float, default=1.0)
    generate.add_argument("--seed", type=int, default=None)
    generate.add_argument("--ignore-eos", action="store_true")
    generate.add_argument("--out", default="outputs.jsonl")
    from kvviz.engine.config import DEFAULTS
    generate.add_argument("--block-size", type=int, default=DEFAULTS.block_size)
    generate.add_argument("--num-blocks", type=int, default=DEFAULTS.num_blocks)
    generate.add_argument("--max-num-seqs", type=int, default=DEFAULTS.max_num_seqs)
    generate.add_argument("--max-num-batched-tokens", type=int, default=DEFAULTS.max_num_batched_tokens)
    generate.add_argument("--no-prefix-caching", action="store_true")
    generate.add_argument("--device", default=None, help="cuda | cpu (default: cuda when present)")
    generate.add_argument("--dtype", default=None, help="float32 | bfloat16 | float16")
    from kvviz.vllm_backend import add_generate_arguments
    add_generate_arguments(generate)  # --backend vllm and vLLM's parallel settings
    generate.set_defaults(func=cmd_generate)

    from kvviz.bench import add_bench_arguments, run_bench
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
