"""Sliding-window layers giving their blocks back: blocks held per request, and the speed cost.

    python scripts/bench_sliding.py            # a random Gemma-3-shaped model (5 sliding : 1 full)
    python scripts/bench_sliding.py --quick    # smaller and shorter, a smoke test
    python scripts/bench_sliding.py --same-memory-only   # only part 3

1. One request grown to each context length: the most blocks it held at once in the full group
   and in the sliding group (engine/layer_groups.py), beside the Memory bill's row for each layer
   type (kvviz.memory_bill.bill_breakdown, tokens held rounded up to blocks, in blocks).
2. Generated tokens per second for a batch, this engine against the engine before layer groups
   (the kvviz source of --baseline, a git revision, unpacked to a temporary folder and run in
   its own process), greedy outputs compared. Median of --runs runs, the two taking turns. The
   same for a Llama of the same size (every layer full: one group), which must not get slower.
3. The same cache memory (the bytes of --budget-blocks blocks of every layer), this engine, whose
   sliding pools give the bytes they do not need to the full group (layer_groups.pool_sizes),
   against the engine before that (--budget-baseline, where every group's pool had num_blocks
   blocks): the most requests running at once, preemptions, generated tokens per second, for
   tiny-gemma3 (load_model), a Gemma-2-shaped model of its size (sliding and full layers 1:1)
   and a Llama of its size (one group: the same pool both times, must not get slower).
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
BUDGET_BASELINE = "ba95e4e"  # the last commit where every layer group's pool had num_blocks blocks
# part 3: more requests than the pool's bytes hold at their full length, each 6 blocks of 16 at the end
BUDGET_REQUESTS, BUDGET_PROMPT_LEN, BUDGET_MAX_TOKENS, BUDGET_STEP_TOKENS = 16, 32, 64, 64


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


def budget_model(arch: str):
    """tiny-gemma3 as the app loads it, or a random model of its size: Gemma-2-shaped or a Llama."""
    import torch
    import transformers as tf

    from kvviz.models import load_model

    gemma3 = load_model("tiny-gemma3", device="cpu")
    if arch == "tiny-gemma3":
        return gemma3.model
    config = gemma3.model.config
    common = dict(vocab_size=config.vocab_size, hidden_size=config.hidden_size, num_hidden_layers=6,
                  intermediate_size=config.intermediate_size, num_attention_heads=config.num_attention_heads,
                  num_key_value_heads=config.num_key_value_heads, head_dim=config.head_dim,
                  max_position_embeddings=512, bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id,
                  pad_token_id=config.pad_token_id)
    torch.manual_seed(0)
    if arch == "llama":
        return tf.LlamaForCausalLM(tf.LlamaConfig(**common)).eval()
    gemma2 = tf.Gemma2Config(query_pre_attn_scalar=config.head_dim, sliding_window=config.sliding_window,
                             layer_types=["sliding_attention", "full_attention"] * 3, **common)
    return tf.Gemma2ForCausalLM(gemma2).eval()


def budget_worker(arch: str, args) -> None:
    """One batch in the bytes of args.budget_blocks blocks of every layer, with whichever kvviz is
    first on sys.path; prints JSON."""
    import time

    from kvviz import Engine, SamplingParams

    model = budget_model(arch)
    settings = dict(block_size=16, num_blocks=args.budget_blocks, max_num_seqs=BUDGET_REQUESTS,
                    max_num_batched_tokens=BUDGET_STEP_TOKENS)
    prompts = batch_prompts(BUDGET_REQUESTS, BUDGET_PROMPT_LEN)
    Engine(model, **settings).generate(prompts[:1], SamplingParams(max_tokens=4, ignore_eos=True))  # warm-up
    engine = Engine(model, **settings)
    for prompt in prompts:
        engine.add_request(prompt, SamplingParams(max_tokens=BUDGET_MAX_TOKENS, ignore_eos=True))
    most_running, running_per_step, start = 0, [], time.perf_counter()
    while engine.has_unfinished():
        engine.step()
        most_running = max(most_running, len(engine.scheduler.running))
        running_per_step.append(len(engine.scheduler.running))
    seconds = time.perf_counter() - start
    print(json.dumps({"tokens_per_s": BUDGET_REQUESTS * BUDGET_MAX_TOKENS / seconds, "most_running": most_running,
                      "preemptions": engine.scheduler.num_preemptions, "steps": engine.step_index,
                      "mean_running": sum(running_per_step) / len(running_per_step),
                      "peak_full_blocks": engine.stats["peak_blocks"],  # the first (full) group's pool
                      "pool_blocks": [g.pool.num_blocks for g in engine.layer_groups] or [engine.num_blocks],
                      "cache_bytes": engine.cache.nbytes,
                      "outputs": [engine.output(i).token_ids for i in range(BUDGET_REQUESTS)]}))


def same_memory_against_baseline(args) -> None:
    with tempfile.TemporaryDirectory() as folder:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.budget_baseline, "kvviz"],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
        engines = (("shared bytes (this engine)", ROOT), (f"a pool of num_blocks per group ({args.budget_baseline})",
                                                          Path(folder)))
        archs = ("tiny-gemma3", "gemma2", "llama")
        results = {(arch, name): [] for arch in archs for name, _ in engines}
        for _ in range(args.runs):
            for arch in archs:
                for name, source in engines:
                    command = [sys.executable, str(Path(__file__).resolve()), "--budget-worker", arch,
                               "--budget-blocks", str(args.budget_blocks)]
                    done = subprocess.run(command, capture_output=True, text=True, check=True,
                                          env={**os.environ, "PYTHONPATH": str(source)})
                    result = json.loads(done.stdout.strip().splitlines()[-1])
                    results[arch, name].append(result)
                    print(arch, name, {k: v for k, v in result.items() if k != "outputs"}, flush=True)  # as it comes
    print(f"\nThe same cache memory: {args.budget_blocks} blocks of 16 tokens of every layer. {BUDGET_REQUESTS} "
          f"requests of {BUDGET_PROMPT_LEN} + {BUDGET_MAX_TOKENS} tokens (each "
          f"{-(-(BUDGET_PROMPT_LEN + BUDGET_MAX_TOKENS) // 16)} full blocks at the end), max_num_seqs "
          f"{BUDGET_REQUESTS}, max_num_batched_tokens {BUDGET_STEP_TOKENS}, greedy; median of {args.runs} runs "
          "taking turns (min-max):")
    print("| model | engine | pool blocks (full, sliding) | cache bytes | most full blocks in use | requests running "
          "(most; mean per step) | preemptions | steps | generated tokens/s | ratio | same outputs |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    names = [name for name, _ in engines]
    for arch in archs:
        new_runs, old_runs = results[arch, names[0]], results[arch, names[1]]
        medians = [statistics.median(r["tokens_per_s"] for r in runs) for runs in (new_runs, old_runs)]
        same = all(new["outputs"] == old["outputs"] for new, old in zip(new_runs, old_runs))
        for name, runs, median in ((names[0], new_runs, medians[0]), (names[1], old_runs, medians[1])):
            speeds = [r["tokens_per_s"] for r in runs]
            ratio = f"{medians[0] / medians[1]:.3f}" if runs is new_runs else ""
            print(f"| {arch} | {name} | {runs[0]['pool_blocks']} | {runs[0]['cache_bytes']:,} "
                  f"| {runs[0]['peak_full_blocks']} | {runs[0]['most_running']}; {runs[0]['mean_running']:.1f} "
                  f"| {runs[0]['preemptions']} | {runs[0]['steps']} "
                  f"| {median:.1f} ({min(speeds):.1f}-{max(speeds):.1f}) | {ratio} | {same} |")


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
    parser.add_argument("--budget-baseline", default=BUDGET_BASELINE,
                        help=f"git revision whose groups' pools each had num_blocks ({BUDGET_BASELINE})")
    parser.add_argument("--budget-blocks", type=int, default=64,
                        help="part 3: the cache's bytes, in blocks of every layer (default 64)")
    parser.add_argument("--same-memory-only", action="store_true", help="run part 3 only")
    parser.add_argument("--worker", choices=["gemma3", "llama"], help=argparse.SUPPRESS)
    parser.add_argument("--budget-worker", choices=["tiny-gemma3", "gemma2", "llama"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.worker and not args.budget_worker:
        sys.path.insert(0, str(ROOT))  # this checkout's kvviz, whichever one is installed
    if args.worker:
        worker(args.quick, args.worker, args.batch, args.prompt_len, args.max_tokens)
        return
    if args.budget_worker:
        budget_worker(args.budget_worker, args)
        return
    if args.same_memory_only:
        same_memory_against_baseline(args)
        return
    if args.quick:
        args.batch, args.max_tokens = min(args.batch, 4), min(args.max_tokens, 96)
    contexts = [32, 64, 128, 256] if args.quick else [128, 256, 512, 1024]
    blocks_against_context(args.quick, contexts)
    speed_against_baseline(args)
    same_memory_against_baseline(args)


if __name__ == "__main__":
    main()
