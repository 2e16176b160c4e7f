"""`python -m kvviz generate`: a file of prompts through kvviz's engine, or the same job on vLLM."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from tqdm import tqdm
from transformers import AutoTokenizer

from kvviz.cli.common import check_output_path, print_summary, sampling_params, write_atomically
from kvviz.cli.engine_flags import add_engine_arguments, engine_config, given, vllm_engine_options
from kvviz.engine.engine import Engine
from kvviz.engine.sampling import SamplingParams
from kvviz.models import load_model, pick_device, pick_dtype
from kvviz.throughput import output_tokens_per_s
from kvviz.vllm import backend as vllm
from kvviz.workloads import jsonl_lines, read_prompts, request_sampling

SAMPLING_DEFAULTS = SamplingParams()


def add_generate_arguments(parser: argparse.ArgumentParser) -> None:
    """Every flag of `generate`; the engine's and the sampling's defaults are EngineConfig's and
    SamplingParams'."""
    add = parser.add_argument
    add("--model", default="bundled", help="bundled | a Hugging Face id (local cache) | a folder")
    add("--prompts", required=True, help=".txt (a prompt per line) or .jsonl ({\"prompt\": ...})")
    add("--out", default="outputs.jsonl",
        help="where the JSONL of outputs goes: a new or regular file, replaced whole once the job is done "
             "(a link, a device such as /dev/stdout, or a pipe is refused)")
    add("--max-tokens", type=int, default=64,  # more than SamplingParams' 32: a job, not a demo
        help="tokens to generate per prompt")
    add("--temperature", type=float, default=SAMPLING_DEFAULTS.temperature, help="0 is greedy")
    add("--top-k", type=int, default=SAMPLING_DEFAULTS.top_k, help="keep the k likeliest tokens (0 keeps all)")
    add("--top-p", type=float, default=SAMPLING_DEFAULTS.top_p, help="keep the smallest set of this probability")
    add("--seed", type=int, default=SAMPLING_DEFAULTS.seed, help="prompt i samples with seed + i*n (none: random)")
    add("--ignore-eos", action="store_true", help="generate --max-tokens even past the end-of-text token")
    add("--n", type=int, default=SAMPLING_DEFAULTS.n,
        help="samples per prompt; they share the prompt's blocks (parallel sampling)")
    add_engine_arguments(parser)  # a flag for every EngineConfig field
    add("--device", default=None, help="cuda | cpu (none: cuda when present)")
    add("--dtype", default=None, help="float32 | bfloat16 | float16 (none: bfloat16 on a GPU, float32 on a CPU)")
    add_vllm_arguments(parser)  # --backend vllm and vLLM's parallel settings


def cmd_generate(args) -> int:
    if args.backend == "vllm" and args.n != 1:
        raise ValueError("--n is a setting of kvviz's engine, not passed to vLLM; "
                         "drop it or run without --backend vllm.")
    check_vllm_sizes(args)
    config = engine_config(args)
    config.validate()  # first: --max-num-seqs 0 is refused as itself, not as too few for n=1 samples
    sampling_params(args).validate(max_num_seqs=config.max_num_seqs)  # a bad flag is refused before any work
    if args.backend == "vllm":  # the same job on vLLM, in its own environment
        return generate_on_vllm(args, vllm_engine_options(given(args)))
    prompts = read_prompts(Path(args.prompts))
    check_output_path(Path(args.out))
    lm = load_model(args.model, device=args.device, dtype=args.dtype)
    if args.max_tokens > lm.max_context:
        print(f"note: --max-tokens {args.max_tokens:,} is more than {lm.name}'s {lm.max_context:,}-token context; "
              "each request stops when its prompt and output fill the context.", file=sys.stderr)
    engine = Engine(lm, config)
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


def add_vllm_arguments(parser) -> None:
    """The --backend choice and vLLM's pass-through settings, on `generate`'s parser."""
    add = parser.add_argument
    add("--backend", choices=("kvviz", "vllm"), default="kvviz", help="which engine runs the job")
    add("--vllm-python", default=None, help="vLLM's interpreter (default: $KVVIZ_VLLM_PYTHON or .venv-vllm/bin/python)")
    add("--tensor-parallel-size", type=int, default=None, help="vLLM: GPUs that split each layer")
    add("--pipeline-parallel-size", type=int, default=None, help="vLLM: GPUs (or machines) that split the layers")
    add("--distributed-executor-backend", choices=("mp", "ray"), default=None,
        help="vLLM: worker processes on this machine (mp) or a Ray cluster (ray)")
    add("--kv-cache-bytes", type=int, default=None,
        help="vLLM: bytes for the KV cache (default: 1 GiB on a CPU, vLLM's own on a GPU)")
    add("--enforce-eager", action="store_true", help="vLLM: skip torch.compile (starts much sooner)")


def check_vllm_sizes(args) -> None:
    """vLLM's sizes, when given, are whole numbers from 1 up (-5 bytes or 0 GPUs were passed on silently)."""
    for flag in ("--tensor-parallel-size", "--pipeline-parallel-size", "--kv-cache-bytes"):
        value = getattr(args, flag[2:].replace("-", "_"), None)
        if value is not None and value < 1:
            raise ValueError(f"{flag} is {value}; give a whole number from 1 up, or leave it out for vLLM's default.")


def sampling(args, num_prompts: int, stop_ids: list[int]) -> list[dict]:
    """kvviz's sampling flags as vLLM SamplingParams fields; with --seed, prompt i uses seed + i (n is refused with
    vLLM)."""
    params = sampling_params(args)
    return [vllm.vllm_sampling(request_sampling(params, i), stop_ids) for i in range(num_prompts)]


def generate_on_vllm(args, engine_options: dict) -> int:
    """`generate --backend vllm`: the same prompts, flags, JSONL and summary as the kvviz backend;
    engine_options are the engine flags as vLLM's LLM(...) arguments (see vllm_engine_options)."""
    prompts = read_prompts(Path(args.prompts))
    check_output_path(Path(args.out))
    python = vllm.require_python(args.vllm_python)
    folder = vllm.model_folder(args.model)
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
    except Exception:
        raise ValueError(f"{args.model!r} has no tokenizer kvviz can read, so text prompts cannot become "
                         "token ids; give a model folder that holds its tokenizer files.") from None
    prompt_ids = [tokenizer(p)["input_ids"] for p in prompts]
    dtype = str(pick_dtype(pick_device(args.device), args.dtype)).removeprefix("torch.")
    job = {"kind": "generate", "model": folder, "llm": vllm.llm_options(args, dtype) | engine_options,
           "prompts": prompt_ids, "sampling": sampling(args, len(prompts), vllm.eos_token_ids(folder))}
    print(f"starting vLLM ({python}) on {folder} ...", file=sys.stderr)
    result = vllm.check_result(vllm.run_jobs([job], python)[0], args.model)
    records = [{"prompt": prompt, "text": tokenizer.decode(out["token_ids"]), "token_ids": out["token_ids"],
                "finish_reason": out["finish_reason"], "num_cached_tokens": out["num_cached_tokens"]}
               for prompt, out in zip(prompts, result["outputs"])]
    write_atomically(Path(args.out), [json.dumps(record) + "\n" for record in records])
    generated = sum(len(r["token_ids"]) for r in records)
    summary = {
        "requests": len(records), "prompt_tokens": sum(map(len, prompt_ids)), "generated_tokens": generated,
        "seconds": round(result["seconds"], 3), "output_tokens_per_s": round(generated / result["seconds"], 1),
        "peak_blocks_in_use": round(result["peak_kv_usage"] * result["num_blocks"]),
        "num_blocks": result["num_blocks"], "block_size": result["block_size"],
        "preemptions": result["preemptions"],
        "prefix_cache_hit_rate": round(result["prefix_cache_hits"] / max(result["prefix_cache_queries"], 1), 4),
    }
    print_summary(summary, args.out)
    return 0
