"""MLA's latent cache in the engine: bytes per token, and speed against transformers generate.

    python scripts/bench_mla.py            # kvviz.models.build_tiny_mla (4.3M parameters)
    python scripts/bench_mla.py --quick    # fewer, shorter requests

1. Bytes per token and layer the engine's cache holds (measured from its tensors) beside the
   memory bill's MLA row and the bill's MHA row for the same heads.
2. The bench's mixed workload (kvviz.bench) on the engine and on transformers `generate`
   (static batches of 16, left-padded), greedy: outputs compared token for token, output tokens
   per second as the median of --runs runs after one warm-up, the two systems taking turns.
"""

from __future__ import annotations

import argparse
import json
import statistics

from kvviz import bench
from kvviz.engine.engine import Engine
from kvviz.memory_bill import compare_attention_variants, kv_bytes_per_token
from kvviz.models import build_tiny_mla
from kvviz.workloads import mixed_workload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    lm = build_tiny_mla()
    model, shape = lm.model, lm.shape
    layers = shape.num_layers

    engine = Engine(model, num_blocks=64)
    variants = {v.name.split()[0]: v for v in compare_attention_variants(shape, shape.dtype_bytes)}
    memory = {
        "engine_bytes_per_token_per_layer": engine.cache.nbytes // (engine.num_blocks * engine.block_size * layers),
        "bill_mla_bytes_per_token_per_layer": kv_bytes_per_token(shape, shape.dtype_bytes) // layers,
        "bill_mha_bytes_per_token_per_layer": variants["MHA"].bytes_per_token // layers,
        "mha_row": variants["MHA"].name, "mla_row": variants["MLA"].name, "dtype": str(lm.dtype),
    }
    del engine

    count, low, high = (8, 8, 32) if args.quick else (32, 16, 128)
    workload = mixed_workload(count, low, high, low, high // 2, shape.vocab_size, seed=0)
    twin = bench.hf_copy(model)  # transformers' own attention, nothing shared with the engine
    systems = {"kvviz": lambda: bench.run_kvviz(model, workload),
               "hf generate": lambda: bench.run_hf_generate(twin, workload, batch_size=16)}
    runs = {name: [] for name in systems}
    for round_ in range(args.runs + 1):  # round 0 warms up
        for name, run in systems.items():
            result = run()
            if round_:
                runs[name].append(result)
    speed = {name: statistics.median(r.tokens_per_s for r in results) for name, results in runs.items()}
    agreement = bench.compare_outputs(runs["hf generate"][0].outputs, runs["kvviz"][0].outputs)
    print(json.dumps({
        "memory": memory,
        "workload": {"requests": count, "prompt_tokens": sum(map(len, workload.prompts)),
                     "output_tokens": workload.num_output_tokens},
        "tokens_per_s_median": speed,
        "tokens_per_s_runs": {name: [round(r.tokens_per_s, 1) for r in results] for name, results in runs.items()},
        "kvviz_over_hf": speed["kvviz"] / speed["hf generate"],
        "outputs_equal_to_hf": agreement.describe(),
    }, indent=2, default=str))


if __name__ == "__main__":
    main()
