"""Parallel sampling against separate requests, and swap against recompute, in one run.

    python scripts/bench_fork.py            # the bench's random 25M Llama (kvviz.bench)
    python scripts/bench_fork.py --quick    # a small random Llama, a smoke test

1. One prompt, n=8 samples (seeds s..s+7) against 8 separate requests with those seeds, with the
   prefix cache on and off: peak blocks held, generated tokens per second, outputs equal.
2. A pool too small for the batch, preemption_mode "recompute" against "swap" (greedy): bytes
   moved to and from CPU memory, tokens recomputed, generated tokens per second, outputs equal.
Every figure is the median of --runs runs (after one warm-up), with min and max beside it;
the cases of a comparison take turns, so a shared machine's load falls on each alike.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

from kvviz import bench
from kvviz.engine.engine import Engine
from kvviz.engine.sampling import SamplingParams
from kvviz.engine.block_pool import blocks_needed
from kvviz.models import CustomShape

BLOCK_SIZE = 16  # tokens per block, in every engine here
QUICK_SHAPE = CustomShape(num_layers=2, hidden_size=128, num_heads=4, num_kv_heads=2, vocab_size=512,
                          max_context=512)


def timed(cases: dict, runs: int) -> dict[str, tuple[dict, list[float]]]:
    """Warm each case up once, then time `runs` rounds, the cases taking turns within a round
    (so that a shared machine's load falls on all of them alike): name -> (facts, seconds)."""
    facts = {name: run() for name, run in cases.items()}
    seconds = {name: [] for name in cases}
    for _ in range(runs):
        for name, run in cases.items():
            start = time.perf_counter()
            facts[name] = run()
            seconds[name].append(time.perf_counter() - start)
    return {name: (facts[name], seconds[name]) for name in cases}


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def fork_case(model, prompt: list[int], n: int, max_tokens: int, runs: int) -> dict:
    sampled = dict(max_tokens=max_tokens, temperature=0.8, top_k=50, ignore_eos=True)

    def fork():
        engine = Engine(model, block_size=BLOCK_SIZE)
        out = engine.generate([prompt], SamplingParams(n=n, seed=100, **sampled))[0]
        return {"samples": out.samples, "peak_blocks": engine.stats["peak_blocks"]}

    def separate(prefix_caching: bool):
        def run():
            engine = Engine(model, block_size=BLOCK_SIZE, enable_prefix_caching=prefix_caching)
            outs = engine.generate([prompt] * n, [SamplingParams(seed=100 + i, **sampled) for i in range(n)])
            return {"samples": [o.token_ids for o in outs], "peak_blocks": engine.stats["peak_blocks"]}
        return run

    result = {"prompt_tokens": len(prompt), "n": n, "max_tokens": max_tokens}
    cases = {"fork": fork, "separate, prefix cache on": separate(True), "separate, prefix cache off": separate(False)}
    for name, (facts, seconds) in timed(cases, runs).items():
        result[name] = {"peak_blocks": facts["peak_blocks"],
                        "tokens_per_s": spread([n * max_tokens / s for s in seconds]), "samples": facts["samples"]}
    result["outputs_equal"] = all(result[k]["samples"] == result["fork"]["samples"]
                                  for k in result if k.startswith("sep"))
    for key in ("fork", "separate, prefix cache on", "separate, prefix cache off"):
        del result[key]["samples"]
    return result


def swap_case(model, prompts: list[list[int]], max_tokens: int, num_blocks: int, runs: int) -> dict:
    greedy = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    result = {"requests": len(prompts), "num_blocks": num_blocks, "block_size": BLOCK_SIZE}
    outputs = {}

    def case(mode: str):
        def run():
            engine = Engine(model, block_size=BLOCK_SIZE, num_blocks=num_blocks, preemption_mode=mode)
            ids = [engine.add_request(p, greedy) for p in prompts]
            events = []
            while engine.has_unfinished():
                events += engine.step().events
            return {"outputs": [engine.output(i).token_ids for i in ids],
                    "preemptions": engine.scheduler.num_preemptions,
                    "recomputed_tokens": sum(r.num_recomputed_tokens for r in engine.requests.values()),
                    "bytes_out": sum(e.num_bytes for e in events if e.kind == "swap_out"),
                    "bytes_in": sum(e.num_bytes for e in events if e.kind == "swap_in"),
                    "swap_full": sum(e.kind == "swap_full" for e in events)}
        return run

    for mode, (facts, seconds) in timed({mode: case(mode) for mode in ("recompute", "swap")}, runs).items():
        outputs[mode] = facts.pop("outputs")
        result[mode] = dict(facts, tokens_per_s=spread([len(prompts) * max_tokens / s for s in seconds]))
    result["outputs_equal"] = outputs["swap"] == outputs["recompute"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=None, help="per sample / request (default 64; quick 16/32)")
    args = parser.parse_args()
    model = bench.build_random_llama(QUICK_SHAPE if args.quick else bench.BENCH_SHAPE)
    vocab = model.config.vocab_size
    rng = random.Random(0)
    prompt = [rng.randrange(1, vocab) for _ in range(40 if args.quick else 200)]
    fork = fork_case(model, prompt, n=8, max_tokens=args.max_tokens or (16 if args.quick else 64), runs=args.runs)
    print(json.dumps({"parallel_sampling": fork}, indent=1), flush=True)
    prompts = [[rng.randrange(1, vocab) for _ in range(rng.randint(32, 96))] for _ in range(12 if args.quick else 16)]
    max_tokens = args.max_tokens or (32 if args.quick else 64)
    # a pool for about a third of the batch at full length: preemption is certain
    per_request = blocks_needed(96 + max_tokens, BLOCK_SIZE)
    swap = swap_case(model, prompts, max_tokens, num_blocks=per_request * len(prompts) // 3, runs=args.runs)
    print(json.dumps({"swap_vs_recompute": swap}, indent=1), flush=True)


if __name__ == "__main__":
    main()
