"""Speculative decoding by prompt lookup against plain greedy decoding, on the bundled model.

    python scripts/bench_speculative.py [--max-tokens 96] [--runs 3]

A repetitive workload (verse with refrains, a scene whose speakers come back), each prompt alone
(batch 1: the latency case speculation is for). For plain decoding and k = 3 and 5 draft tokens:
tokens per forward pass, wall-clock tokens/s (median of the timed runs, after one warm-up), the
speed-up against plain, and whether the outputs are identical. The modes take turns in every
round, so a machine shared with others slows them alike.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from kvviz import load_model
from kvviz.lessons.speculative.logic import run_workload

WORKLOAD = [
    "When that I was and a little tiny boy,\nWith hey, ho, the wind and the rain,\n"
    "A foolish thing was but a toy,\nFor the rain it raineth every day.\n\n"
    "But when I came to man's estate,\nWith hey, ho, the wind and the rain,\n",
    "Sing willow, willow, willow;\nHer salt tears fell from her, and soften'd the stones;\n"
    "Sing willow, willow, willow;\nSing all a green willow must be my garland.\nSing willow, willow, willow;\n",
    "KING RICHARD:\nWhat is the matter?\n\nQUEEN:\nMy lord, the king.\n\n"
    "KING RICHARD:\nWhat is the matter?\n\nQUEEN:\n",
    "ROMEO:\n",
]
MODES = {"plain": 0, "k=3": 3, "k=5": 5}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--runs", type=int, default=3, help="timed runs per mode, after one warm-up")
    args = parser.parse_args()
    torch.set_num_threads(1)  # a shared two-core machine: one thread each, steadier figures
    lm = load_model("bundled")
    seconds = {mode: [] for mode in MODES}
    results = {}
    for round_index in range(args.runs + 1):  # round 0 warms up
        for mode, k in MODES.items():
            results[mode] = run_workload(lm, WORKLOAD, args.max_tokens, k)
            if round_index:
                seconds[mode].append(results[mode]["seconds"])
    plain = results["plain"]
    plain_rate = plain["tokens"] / statistics.median(seconds["plain"])
    print(f"bundled model, {len(WORKLOAD)} prompts one at a time, {args.max_tokens} tokens each, greedy; "
          f"median of {args.runs} warm runs")
    print(f"{'mode':6} {'passes':>7} {'tok/pass':>9} {'accepted':>14} {'tok/s':>8} {'speed-up':>9}  identical")
    for mode, result in results.items():
        rate = result["tokens"] / statistics.median(seconds[mode])
        accepted = f"{result['accepted']}/{result['proposed']}" if MODES[mode] else "-"
        print(f"{mode:6} {result['passes']:>7} {result['tokens'] / result['passes']:>9.2f} {accepted:>14} "
              f"{rate:>8.1f} {rate / plain_rate:>8.2f}x  {result['outputs'] == plain['outputs']}")
        print(f"{'':6} runs: {', '.join(f'{s:.2f}' for s in seconds[mode])} s")


if __name__ == "__main__":
    main()
