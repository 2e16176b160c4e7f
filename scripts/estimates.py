"""How close each click's estimate lands to the time it then takes, on this server, as a teacher clicks.

    python scripts/estimates.py                          # the bundled model, a quiet machine
    python scripts/estimates.py --model smollm2 --contend 1
    python scripts/estimates.py --calibrate bundled.json
    python scripts/estimates.py --model smollm2 --calibrate smollm2.json
    python scripts/estimates.py --fit bundled.json smollm2.json       # kvviz.lessons.budget.QUIET_PACE

One process plays a teacher's session on one model, calling the functions each page's click runs (no
browser), in this order: Prefill and eight Next tokens; a link to step 40; Prefill of a 1,000-token
prompt (496 on the bundled model) and three Next tokens; Cache strategies' Run every strategy and the eviction
lab; Batch generation's Run and Run both and compare; Model lab's Measure; and a second link to step 40. Before
each click it prints the estimate at the quiet machine's RATES and the one the server would show now
(kvviz.lessons.budget.Pace, learned from the clicks before it), then the measured seconds and
measured / estimate. --contend N runs N busy processes beside it (kvviz.bench.busy_processes).
--calibrate FILE keeps every click's quiet parts and measured seconds in FILE; --fit FILE... fits each
kind's quiet pace to them all (kvviz.lessons.budget.fit_pace) and prints QUIET_PACE. Not part of CI;
docs/benchmarks.md has its tables.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

import torch

from kvviz.bench import busy_processes
from kvviz.lessons import budget
from kvviz.lessons.batch_generation import logic as batch
from kvviz.lessons.batch_generation.state import DEFAULTS as BATCH, PAGE_ENGINE
from kvviz.lessons.cache_strategies import logic as strategies
from kvviz.lessons.cache_strategies.eviction_view import DEFAULTS as EVICTION
from kvviz.lessons.cache_strategies.state import DEFAULTS as STRATEGIES, EXAMPLE_PROMPT, TIMING_RUNS
from kvviz.lessons.model_lab import logic as lab
from kvviz.lessons.prefill_decode.logic import PrefillLesson, LessonSettings, lesson_sampling, lesson_work
from kvviz.lessons.prefill_decode.state import EXAMPLE_PROMPTS
from kvviz.models import CustomShape, default_heldout_text, load_model
from kvviz.strategies.eviction import eviction_lab
from kvviz.strategies.run import tokenize
from kvviz.workloads import synthetic_workload

CPU = torch.device("cpu")
TIMED: list[tuple[budget.Work, float]] = []  # each row's work and measured seconds, for --calibrate


def row(name: str, work: budget.Work, click) -> tuple[str, float, float, float]:
    quiet = sum(work.quiet_seconds(CPU))
    estimate = work.seconds(CPU)
    started = time.perf_counter()
    click()
    measured = time.perf_counter() - started
    TIMED.append((work, measured))
    print(f"| {name} | {quiet:,.2f} | {estimate:,.2f} | {measured:,.2f} | {measured / estimate:,.2f} |", flush=True)
    return name, quiet, estimate, measured


def teacher(lm) -> list:
    rows, prompt = [], EXAMPLE_PROMPTS[0]
    settings = LessonSettings(prompt=prompt, sampling=lesson_sampling(max_tokens=48))
    lesson = PrefillLesson.start(lm, settings)
    tokens = len(lesson.prompt_token_ids)
    rows.append(row("Prefill (default prompt)", lesson_work(lm, tokens, 0), lesson.prefill))
    for _ in range(8):
        rows.append(row("Next token", lesson.step_work(lesson.twin_runs_next()), lesson.next_token))

    def link():
        run = PrefillLesson.start(lm, settings)
        run.prefill()
        for _ in range(40):
            run.next_token()
    rows.append(row("Link to step 40", lesson_work(lm, tokens, 40), link))

    length = min(1000, lm.max_context - 16)  # the bundled model holds 512
    long = lm.tokenizer.decode(lm.tokenizer(default_heldout_text())["input_ids"][:length])
    long_lesson = PrefillLesson.start(lm, LessonSettings(prompt=long, sampling=lesson_sampling(max_tokens=8)))
    rows.append(row(f"Prefill ({len(long_lesson.prompt_token_ids):,}-token prompt)",
                    lesson_work(lm, len(long_lesson.prompt_token_ids), 0), long_lesson.prefill))
    for _ in range(3):
        rows.append(row("Next token (after it)", long_lesson.step_work(long_lesson.twin_runs_next()),
                        long_lesson.next_token))

    specs = strategies.lesson_specs(STRATEGIES["strategies_window"], STRATEGIES["strategies_group_size"],
                                    STRATEGIES["strategies_residual"], lm.max_context)
    prompt_tokens = len(tokenize(EXAMPLE_PROMPT, lm.tokenizer))
    most, _ = budget.tokens_that_fit(  # as the page does: the most tokens one click may run
        lambda tokens: strategies.comparison_seconds(lm, EXAMPLE_PROMPT, tokens, specs, TIMING_RUNS),
        STRATEGIES["strategies_max_tokens"], "every strategy")
    rows.append(row(f"Run every strategy ({most} tokens)",
                    strategies.comparison_work(lm, prompt_tokens, most, specs, TIMING_RUNS),
                    lambda: strategies.compare_strategies(lm, EXAMPLE_PROMPT, most, specs, TIMING_RUNS)))
    most, _ = budget.tokens_that_fit(lambda tokens: strategies.eviction_seconds(lm, EXAMPLE_PROMPT, tokens),
                                     STRATEGIES["strategies_max_tokens"], "the lab")
    eviction = strategies.eviction_work(lm, prompt_tokens, most)

    def lab_run():  # as eviction_view.run times it
        with budget.timed(eviction, CPU):
            eviction_lab(lm, EXAMPLE_PROMPT, most, EVICTION["strategies_eviction_budget"],
                         EVICTION["strategies_eviction_sinks"])
    rows.append(row(f"Eviction lab ({most} tokens)", eviction, lab_run))

    work = synthetic_workload(lm.tokenizer, len(lm.tokenizer), BATCH["batch_count"], BATCH["batch_prompt_len"],
                              BATCH["batch_output_len"], BATCH["batch_prefix"], BATCH["batch_seed"])
    page = batch.BatchSettings(PAGE_ENGINE)
    rows.append(row("Batch: Run", batch.batch_work(lm, work, page), lambda: batch.run_batch(lm, work, page)))
    both = replace(batch.batch_work(lm, work.head(2), page) + batch.generate_work(lm.model, work.head(2), 16)
                   + (batch.batch_work(lm, work, page) + batch.generate_work(lm.model, work, 16))
                   * batch.COMPARE_REPEATS,
                   click="compare")
    rows.append(row("Batch: Run both and compare", both,  # the warm-up counted at its full length: a little over
                    lambda: batch.compare_with_transformers(lm, work, page, 16)))

    shape = CustomShape(num_layers=4, hidden_size=256, num_heads=8, num_kv_heads=2, max_context=512)
    built = lab.build_lab_model(shape)

    def measure():
        with budget.timed(lab.measurement_work(shape, lab.LAB_REPEATS), CPU):
            lab.measure(built, lab.lab_contexts(built.max_context), repeats=lab.LAB_REPEATS)
    rows.append(row("Model lab: Measure (page's shape)", lab.measurement_work(shape, lab.LAB_REPEATS), measure))
    rows.append(row("Link to step 40, again", lesson_work(lm, tokens, 40), link))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="bundled")
    parser.add_argument("--contend", type=int, default=0, help="busy processes beside it")
    parser.add_argument("--calibrate", type=Path, help="keep the session's timed clicks in this JSON file")
    parser.add_argument("--fit", type=Path, nargs="+", help="print QUIET_PACE fitted to these --calibrate files")
    args = parser.parse_args()
    if args.fit:
        reports: dict[str, list] = {}
        for path in args.fit:
            for click, kept in json.loads(path.read_text()).items():
                reports.setdefault(click, []).extend(kept)
        print("QUIET_PACE = {" + ", ".join(
            f'("cpu", "{click}"): ({compute:.3g}, {fixed:.3g})'
            for click, (compute, fixed) in ((click, budget.fit_pace(kept)) for click, kept in sorted(reports.items())))
            + "}")
        return
    if args.calibrate:
        budget.QUIET_PACE.clear()  # each kind's reports are fitted from RATES
    lm = load_model(args.model)
    print(f"{Path(__file__).name}: {args.model}, {args.contend} busy process(es) beside it\n")
    print("| click | at RATES (s) | estimated now (s) | measured (s) | measured / estimated |")
    print("|---|---:|---:|---:|---:|")
    with busy_processes(args.contend) if args.contend else contextlib.nullcontext():
        rows = teacher(lm)
    if args.calibrate:
        clicks: dict[str, list] = {}
        for work, measured in TIMED:
            clicks.setdefault(work.click, []).append((*work.quiet_seconds(CPU), measured))
        args.calibrate.write_text(json.dumps(clicks))
    ratios = [measured / estimate for _, _, estimate, measured in rows]
    quiet = [measured / q for _, q, _, measured in rows]
    within = sum(1 / 1.5 <= r <= 1.5 for r in ratios)
    print(f"\nmeasured / estimated: median {statistics.median(ratios):.2f}, range {min(ratios):.2f}-{max(ratios):.2f}, "
          f"{within} of {len(rows)} within 1.5x; at RATES alone: median {statistics.median(quiet):.2f}, "
          f"range {min(quiet):.2f}-{max(quiet):.2f}, {sum(1 / 1.5 <= r <= 1.5 for r in quiet)} within 1.5x")


if __name__ == "__main__":
    main()
