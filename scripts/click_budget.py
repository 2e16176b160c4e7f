"""What the costliest click, link or upload of each page costs the server, with the defaults.

    python scripts/click_budget.py                # every case, each in a fresh process: a Markdown table
    python scripts/click_budget.py --case link    # one case

Each case calls the kvviz functions the click runs (no browser), with the bundled model and the
page's largest settings, or, where kvviz.lessons.budget bounds the click, settings just under the budget.
A case runs in a process of its own, after its model and inputs are ready; it reports the CPU
seconds of the process (all threads) and how far the process's peak resident memory rose during
the click. README.md's "Per-click budget" table comes from this script. Not part of CI.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def long_prompt(tokenizer, tokens: int) -> str:
    from kvviz.models import default_heldout_text

    return tokenizer.decode(tokenizer(default_heldout_text())["input_ids"][:tokens])


def case_link(lm):
    """A link to Prefill and decode at its last step (255) with a prompt of 250 tokens: the lesson
    opens at the furthest step under the budget, as the page's run_to_step does."""
    import torch

    from kvviz.lessons.prefill_decode.logic import PrefillLesson, LessonSettings, furthest_step, lesson_sampling

    settings = LessonSettings(prompt=long_prompt(lm.tokenizer, 250), sampling=lesson_sampling(max_tokens=256))
    reachable = furthest_step(lm, len(lm.tokenizer(settings.prompt)["input_ids"]), 255, torch.device("cpu"))

    def click():
        lesson = PrefillLesson.start(lm, settings)
        lesson.prefill()
        for _ in range(reachable):
            lesson.next_token()
        return len(lesson.records) - 1
    return click


def case_lesson_file(lm):
    """A Prefill and decode file at the model limits (128 layers, 4,094 tokens, 11 MiB), replayed and
    every view of its last step drawn."""
    import base64

    import numpy as np

    from kvviz.lessons.prefill_decode import figures
    from kvviz.lessons.prefill_decode.file import export_lesson, import_lesson
    from kvviz.lessons.prefill_decode.logic import PrefillLesson, LessonSettings, lesson_sampling
    from kvviz.lessons.prefill_decode.stage import stage_data

    run = PrefillLesson.start(lm, LessonSettings(prompt="ROMEO:", sampling=lesson_sampling(max_tokens=2)))
    run.prefill()
    run.next_token()
    data = json.loads(export_lesson(run))
    layers, prompt = 128, 4094
    data["model"].update(layers=layers, heads=1, kv_heads=1, head_dim=1, v_head_dim=1, max_context=2 * prompt)
    sampled = len(data["token_texts"]) - len(data["prompt_token_ids"])
    data["prompt_token_ids"], data["token_texts"] = [1] * prompt, ["a"] * (prompt + sampled)
    for step, trace in enumerate(data["traces"]):
        encoded = lambda shape: base64.b64encode(np.full(shape, 0.5, "<f4").tobytes()).decode()  # noqa: E731
        trace["new_keys"] = trace["new_values"] = encoded((layers, prompt if step == 0 else 1, 1, 1))
        trace["attention"], trace["prompt_attention"] = encoded((layers, 1, prompt + step)), None
    text = json.dumps(data).encode()

    def click():
        replay = import_lesson(text)
        step = len(replay.records) - 1
        trace, tokens = replay.trace(step), replay.num_tokens_at(step)
        for fig in (figures.cache_growth(replay.entered_step(step), layers),
                    figures.kv_heatmap(trace.keys[0, :, 0], "K", 0, 0, 1, 0, replay.token_texts[:tokens]),
                    figures.attention_by_head(trace.attention[0], 1, replay.token_texts, 0),
                    figures.work_saved(replay.work())):
            fig.to_json()
        json.dumps(stage_data(replay, step))
        return len(text)
    return click


def case_model_lab(lm):
    """Model lab's Measure on the widest 16-layer shape estimated under the budget, to 512 tokens."""
    import torch

    from kvviz.lessons.budget import click_seconds
    from kvviz.lessons.model_lab import logic as lab
    from kvviz.models import CustomShape

    shape = next(shape for hidden in range(2048, 63, -64)
                 if lab.measurement_work(shape := CustomShape(num_layers=16, hidden_size=hidden, max_context=512),
                                         lab.LAB_REPEATS).seconds(torch.device("cpu")) <= click_seconds())
    print(f"Model lab: 16 layers, hidden {shape.hidden_size}", file=sys.stderr)

    def click():
        model = lab.build_lab_model(shape)
        return lab.measure(model, lab.lab_contexts(model.max_context), repeats=lab.LAB_REPEATS)
    return click


def batch_at_the_budget(lm, compare: bool):
    """The page's settings (16 running at once, 256 tokens a step) with the most prompts under the budget:
    prompts of 200-256 tokens generating 256 for a run; for a comparison, which runs each side four
    times, the page's default lengths (a 32-token shared prefix and 8-32 tokens, 16-32 to generate)."""
    import torch

    from kvviz.lessons.budget import click_seconds
    from kvviz.lessons.batch_generation import logic
    from kvviz.lessons.batch_generation.state import PAGE_ENGINE
    from kvviz.workloads import synthetic_workload

    settings = logic.BatchSettings(PAGE_ENGINE)
    for count in range(256, 0, -1):
        work = (synthetic_workload(lm.tokenizer, 4096, count, (8, 32), (16, 32), 32, 0) if compare
                else synthetic_workload(lm.tokenizer, 4096, count, (200, 256), (256, 256), 0, 0))
        if compare:
            cost = (logic.batch_work(lm, work, settings) + logic.generate_work(lm.model, work, 16)) * 4
        else:
            cost = logic.batch_work(lm, work, settings)
        if cost.seconds(torch.device("cpu")) <= click_seconds():
            return work, settings
    raise RuntimeError("no batch fits the budget")


def case_batch_run(lm):
    """Batch generation's Run with the most prompts (200-256 tokens, 256 to generate) under the budget."""
    from kvviz.lessons.batch_generation.logic import run_batch

    work, settings = batch_at_the_budget(lm, compare=False)
    return lambda: run_batch(lm, work, settings)


def case_batch_compare(lm):
    """Batch generation's "Run both and compare" with the most prompts of the default lengths under the budget."""
    from kvviz.lessons.batch_generation.logic import compare_with_transformers

    work, settings = batch_at_the_budget(lm, compare=True)
    return lambda: compare_with_transformers(lm, work, settings, 16)


def case_strategies(lm):
    """Cache strategies' "Run every strategy" after a 380-token prompt, at the most tokens under the budget."""
    import torch

    from kvviz.lessons.budget import click_seconds
    from kvviz.lessons.cache_strategies.logic import compare_strategies, comparison_work, lesson_specs
    from kvviz.lessons.cache_strategies.state import TIMING_RUNS

    prompt, specs = long_prompt(lm.tokenizer, 380), lesson_specs(24, 32, 0, lm.max_context)
    tokens = len(lm.tokenizer(prompt)["input_ids"])
    most = max(t for t in range(2, 129)
               if comparison_work(lm, tokens, t, specs, TIMING_RUNS).seconds(torch.device("cpu")) <= click_seconds())
    return lambda: (compare_strategies(lm, prompt, most, specs, TIMING_RUNS), most)[1]


def case_strategies_default(lm):
    """Cache strategies' "Run every strategy" at the page's defaults (the example prompt, 32 tokens)."""
    from kvviz.lessons.cache_strategies.logic import comparison_seconds, lesson_specs
    from kvviz.lessons.cache_strategies.state import DEFAULTS, EXAMPLE_PROMPT, TIMING_RUNS, measured

    specs = lesson_specs(DEFAULTS["strategies_window"], DEFAULTS["strategies_group_size"],
                         DEFAULTS["strategies_residual"], lm.max_context)
    tokens = DEFAULTS["strategies_max_tokens"]

    def click():
        from kvviz.lessons.cache_strategies.logic import compare_strategies

        results = compare_strategies(lm, EXAMPLE_PROMPT, tokens, specs, TIMING_RUNS)
        return len(measured(lm, results, EXAMPLE_PROMPT, {"group_size": DEFAULTS["strategies_group_size"]})["table"])
    click.estimate_s = comparison_seconds(lm, EXAMPLE_PROMPT, tokens, specs, TIMING_RUNS)
    return click


def eviction_case(lm, prompt: str, tokens: int):
    from kvviz.lessons.cache_strategies.eviction_view import DEFAULTS
    from kvviz.lessons.cache_strategies.logic import eviction_seconds
    from kvviz.strategies.eviction import eviction_lab

    def click():
        budget, sinks = DEFAULTS["strategies_eviction_budget"], DEFAULTS["strategies_eviction_sinks"]
        return len(eviction_lab(lm, prompt, tokens, budget, sinks).runs)
    click.estimate_s = eviction_seconds(lm, prompt, tokens)
    return click


def case_eviction_default(lm):
    """Cache strategies' "Run the eviction lab" at the page's defaults (the example prompt, 32 tokens)."""
    from kvviz.lessons.cache_strategies.state import EXAMPLE_PROMPT

    return eviction_case(lm, EXAMPLE_PROMPT, 32)


def case_eviction(lm):
    """Cache strategies' "Run the eviction lab" after a 380-token prompt, 128 tokens (issue 35's case)."""
    return eviction_case(lm, long_prompt(lm.tokenizer, 380), 128)


def case_speculative(lm):
    """Speculative decoding's Start, then Run to the end: 128 tokens, 8 drafts a pass."""
    from kvviz.lessons.speculative.logic import DEFAULT_PROMPT, SpeculativeLesson

    def click():
        lesson = SpeculativeLesson.start(lm, DEFAULT_PROMPT, 8, 128, 4)
        while lesson.step():
            pass
        return lesson
    return click


def case_prompt_upload(lm):
    """A prompt file at the upload limits (1,024 prompts, just under 2 MiB), parsed and tokenized."""
    from kvviz.workloads import MAX_UPLOAD_BYTES, MAX_UPLOAD_PROMPTS, upload_workload

    line = ("a " * ((MAX_UPLOAD_BYTES // MAX_UPLOAD_PROMPTS - 2) // 2)).encode() + b"\n"
    data = line * MAX_UPLOAD_PROMPTS

    def click():
        try:
            return upload_workload(lm.tokenizer, "prompts.txt", data)
        except ValueError as refusal:  # too many tokens: refused after tokenizing, the most an upload costs
            return str(refusal)
    return click


CASES = {"link": case_link, "lesson-file": case_lesson_file, "model-lab": case_model_lab,
         "batch-run": case_batch_run, "batch-compare": case_batch_compare, "strategies": case_strategies,
         "strategies-default": case_strategies_default, "eviction-default": case_eviction_default,
         "eviction": case_eviction, "speculative": case_speculative, "prompt-upload": case_prompt_upload}


def run_case(name: str) -> dict:
    from kvviz import load_model

    lm = load_model("bundled")
    click = CASES[name](lm)
    before_peak = peak_mib()
    cpu, wall = time.process_time(), time.perf_counter()
    result = click()
    return {"case": name, "result": repr(result)[:80], "what": " ".join(CASES[name].__doc__.split()),
            "estimate_s": getattr(click, "estimate_s", None), "load": os.getloadavg(),
            "cpu_s": time.process_time() - cpu,
            "wall_s": time.perf_counter() - wall, "peak_rise_mib": peak_mib() - before_peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", choices=list(CASES))
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case)))
        return
    print("| click | CPU s | wall s | peak memory rise |\n|---|---:|---:|---:|")
    for name in CASES:
        out = subprocess.run([sys.executable, __file__, "--case", name], capture_output=True, text=True, cwd=ROOT)
        row = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"| {row['what']} | {row['cpu_s']:.1f} | {row['wall_s']:.1f} | {row['peak_rise_mib']:,.0f} MiB |",
              flush=True)


if __name__ == "__main__":
    main()
