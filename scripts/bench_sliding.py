"""Sliding-window layers giving their blocks back: blocks held per request, and the speed cost.

    python scripts/bench_sliding.py            # a random Gemma-3-shaped model (5 sliding : 1 full)
    python scripts/bench_sliding.py --quick    # smaller and shorter, a smoke test

1. One request grown to each context length: the most blocks it held at once in the full group
   and in the sliding group (engine/layer_groups.py), beside the Memory bill's row for each layer
   type (kvviz.memory_bill.bill_breakdown, tokens held rounded up to blocks, in blocks).
2. Generated tokens per second for a batch, this engine against the engine before layer groups
   (the kvviz source of --baseline, a git revision, unpacked to a temporary folder and run in
   its own process), greedy outputs compared. Median of --runs runs, the two taking turns. The
   same for a Llama of the same size (every layer full: one group), which must not get slower.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = "886404f"  # the last commit before layer groups


def bench_model(quick: bool, arch: str = "gemma3"):
    """A random-weight model: Gemma-3-shaped (5 sliding layers : 1 full), or a Llama of the same size."""
    import torch
    import transformers as tf

    size = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=32) \
        if quick else dict(hidden_size=512, intermediate_size=1024, num_attention_heads=8, num_key_value_heads=4,
                           head_dim=64)
    common = dict(vocab_size=512, num_hidden_layers=6, max_position_embeddings=4096, bos_token_id=1,
                  eos_token_id=2, pad_token_id=0, **size)
    torch.manual_seed(0)
    if arch == "llama":
        return tf.LlamaForCausalLM(tf.LlamaConfig(**common)).eval()
    config = tf.Gemma3TextConfig(query_pre_attn_scalar=size["head_dim"], sliding_window=64 if quick else 256,
                                 **common)
    return tf.Gemma3ForCausalLM(config).eval()


def batch_prompts(count: int, length: int) -> list[list[int]]:
    import torch

    generator = torch.Generator().manual_seed(1)
    return [torch.randint(3, 512, (length,), generator=generator).tolist() for _ in range(count)]


def worker(quick: bool, arch: str, batch: int, prompt_len: int, max_tokens: int) -> None:
    """One timed batch with whichever kvviz is first on sys.path; prints JSON."""
    import time

    from kvviz import Engine, SamplingParams

    model = bench_model(quick, arch)
    engine = Engine(model, block_size=16)
    prompts = batch_prompts(batch, prompt_len)
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    engine.generate(prompts[:1], SamplingParams(max_tokens=4, ignore_eos=True))  # warm-up
    start = time.perf_counter()
    outs = engine.generate(prompts, params)
    seconds = time.perf_counter() - start
    print(json.dumps({"tokens_per_s": batch * max_tokens / seconds, "outputs": [o.token_ids for o in outs],
                      "peak_blocks": engine.stats["peak_blocks"],
                      "peak_blocks_by_group": engine.stats.get("peak_blocks_by_group")}))


def blocks_against_context(quick: bool, contexts: list[int], block_size: int = 16) -> None:
    """One request grown to the longest context; the most blocks it had held when it reached each."""
    from kvviz import Engine, SamplingParams
    from kvviz.memory_bill import bill_breakdown
    from kvviz.shapes import ModelShape

    model = bench_model(quick)
    shape = ModelShape.of_model(model)
    engine = Engine(model, block_size=block_size)
    groups = engine.layer_groups
    prompt = batch_prompts(1, 16)[0]
    engine.add_request(prompt, SamplingParams(max_tokens=max(contexts) - len(prompt) + 1, ignore_eos=True))
    peaks, at_context = [0] * len(groups), {}
    while engine.has_unfinished():
        record = engine.step()
        for g, group in enumerate(record.layer_groups):
            peaks[g] = max(peaks[g], group.num_blocks - group.num_free_blocks)
        computed = record.requests[0].num_computed_tokens
        for context in contexts:
            if computed >= context and context not in at_context:
                at_context[context] = list(peaks)
    names = [f"{g.name} ({len(g.layers)} layer{'s' * (len(g.layers) != 1)})" for g in groups]
    print(f"Gemma-3-shaped model: {shape.num_layers} layers, window {shape.sliding_window} tokens, "
          f"blocks of {block_size} tokens. Peak blocks one request held, against the Memory bill's rows:")
    print(f"| context (tokens) | {' | '.join(f'{n}: engine peak' for n in names)} | "
          f"{' | '.join(f'{n}: bill' for n in names)} |")
    print("|---:" * (1 + 2 * len(names)) + "|")
    for context in contexts:
        bill = {line.kind: line.tokens_held // block_size
                for line in bill_breakdown(shape, context, block_size=block_size)}
        bill_blocks = [bill["full_attention" if g.window is None else "sliding_attention"] for g in groups]
        print(f"| {context:,} | {' | '.join(map(str, at_context[context]))} | {' | '.join(map(str, bill_blocks))} |")


def run_worker(source: Path, arch: str, args) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", arch, "--batch", str(args.batch),
               "--prompt-len", str(args.prompt_len), "--max-tokens", str(args.max_tokens)] + ["--quick"] * args.quick
    result = subprocess.run(command, capture_output=True, text=True, check=True,
                            env={**os.environ, "PYTHONPATH": str(source)})
    return json.loads(result.stdout.strip().splitlines()[-1])


def speed_against_baseline(args) -> None:
    with tempfile.TemporaryDirectory() as folder:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.baseline, "kvviz"], capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
        engines = (("this engine", ROOT), (f"before layer groups ({args.baseline})", Path(folder)))
        cases = {(arch, engine): source for arch in ("gemma3", "llama") for engine, source in engines}
        results = {case: [] for case in cases}
        for _ in range(args.runs):
            for (arch, engine), source in cases.items():
                results[arch, engine].append(run_worker(source, arch, args))
    print(f"\nBatch of {args.batch} prompts of {args.prompt_len} tokens, {args.max_tokens} generated each, greedy; "
          f"median of {args.runs} runs taking turns (min-max):")
    print("| model | engine | generated tokens/s | peak blocks in use (per group) | ratio | same outputs |")
    print("|---|---|---:|---:|---:|---|")
    for arch in ("gemma3", "llama"):
        (new_name, new_runs), (old_name, old_runs) = [(e, r) for (a, e), r in results.items() if a == arch]
        medians = [statistics.median(r["tokens_per_s"] for r in runs) for runs in (new_runs, old_runs)]
        same = new_runs[0]["outputs"] == old_runs[0]["outputs"]
        for name, runs, median in ((new_name, new_runs, medians[0]), (old_name, old_runs, medians[1])):
            speeds = [r["tokens_per_s"] for r in runs]
            peak = runs[0]["peak_blocks_by_group"] or runs[0]["peak_blocks"]
            ratio = f"{medians[0] / medians[1]:.3f}" if runs is new_runs else ""
            print(f"| {'Gemma-3-shaped' if arch == 'gemma3' else 'Llama'} | {name} | {median:.1f} "
                  f"({min(speeds):.1f}-{max(speeds):.1f}) | {peak} | {ratio} | {same} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller model and shorter runs")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per engine (default 3)")
    parser.add_argument("--batch", type=int, default=8, help="prompts in the timed batch (default 8)")
    parser.add_argument("--prompt-len", type=int, default=64, help="tokens per prompt (default 64)")
    parser.add_argument("--max-tokens", type=int, default=192, help="tokens generated per prompt (default 192)")
    parser.add_argument("--baseline", default=BASELINE, help=f"git revision of the one-table engine ({BASELINE})")
    parser.add_argument("--worker", choices=["gemma3", "llama"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.worker:
        sys.path.insert(0, str(ROOT))  # this checkout's kvviz, whichever one is installed
    if args.worker:
        worker(args.quick, args.worker, args.batch, args.prompt_len, args.max_tokens)
        return
    if args.quick:
        args.batch, args.max_tokens = min(args.batch, 4), min(args.max_tokens, 96)
    contexts = [32, 64, 128, 256] if args.quick else [128, 256, 512, 1024]
    blocks_against_context(args.quick, contexts)
    speed_against_baseline(args)


if __name__ == "__main__":
    main()
