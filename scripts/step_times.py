"""Median step, forward and outside-the-forward times of one checkout's engine on the mixed workload.

    python scripts/step_times.py TREE STEPS [default|NUM_BLOCKS ...]

TREE is a kvviz checkout (this one: .), so an older engine can be timed beside the current one
on the same machine at the same moment. Steps 3..STEPS of 48 requests (prompts and outputs of
16-192 tokens, the bench's random 25M Llama); one JSON line per pool size.
"""

import json
import statistics
import sys

tree, steps = sys.argv[1], int(sys.argv[2])
sys.path.insert(0, tree)

from kvviz import bench  # noqa: E402
from kvviz.engine.engine import Engine  # noqa: E402
from kvviz.engine.sampling import SamplingParams  # noqa: E402

try:
    from kvviz.workloads import mixed_workload  # noqa: E402
except ImportError:  # an older checkout kept it in bench
    mixed_workload = bench.mixed_workload

model = bench.build_random_llama()
workload = mixed_workload(48, 16, 192, 16, 192, model.config.vocab_size, 0)
Engine(model).generate([[1, 2, 3]], SamplingParams(max_tokens=3))  # warm up
for size in sys.argv[3:] or ["default"]:
    engine = Engine(model) if size == "default" else Engine(model, num_blocks=int(size))
    for prompt, max_tokens in zip(workload.prompts, workload.max_tokens):
        engine.add_request(prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True))
    records = [engine.step() for _ in range(steps)][3:]
    print(json.dumps({"tree": tree, "num_blocks": engine.num_blocks,
                      "step_ms": 1e3 * statistics.median(r.step_s for r in records),
                      "forward_ms": 1e3 * statistics.median(r.forward_s for r in records),
                      "outside_ms": 1e3 * statistics.median(r.step_s - r.forward_s for r in records)}), flush=True)
