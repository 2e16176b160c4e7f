"""Batch generation against transformers generate: warm, repeated, interleaved runs and their spread."""

import random
import statistics

import pytest

from kvviz.bench import Agreement, SystemRun
from kvviz.lessons.batch_generation.logic import (COMPARE_REPEATS, BatchSettings, TransformersComparison,
                                                  compare_with_transformers)
from kvviz.throughput import busy_note
from kvviz.workloads import synthetic_workload


def test_the_comparison_is_the_ratio_of_medians_of_repeated_runs(bundled):
    workload = synthetic_workload(bundled.tokenizer, 4096, 4, (4, 8), (3, 5), 0, 0)
    compared = compare_with_transformers(bundled, workload, BatchSettings(), hf_batch_size=2)
    ours, theirs = compared.kvviz.details["all_seconds"], compared.transformers.details["all_seconds"]
    assert len(ours) == len(theirs) == COMPARE_REPEATS
    assert compared.kvviz.seconds == statistics.median(ours)
    assert compared.transformers.seconds == statistics.median(theirs)
    assert compared.speedup == pytest.approx(compared.transformers.seconds / compared.kvviz.seconds)
    low, high = compared.speedup_range
    assert low <= compared.speedup <= high
    assert compared.agreement.all_equal
    rows = compared.rows()
    assert all(r["slowest run tokens/s"] <= r["output tokens/s"] <= r["fastest run tokens/s"] for r in rows)


def test_a_busy_machine_is_named():
    assert busy_note([[1.0, 1.05, 1.1], [2.0, 2.1, 2.0]], load_before=0.5, cores=2) is None
    assert "differed by up to 60%" in busy_note([[1.0, 1.6, 1.1], [2.0, 2.1, 2.0]], load_before=0.5, cores=2)
    assert "load 5.0 on 2 cores" in busy_note([[1.0, 1.0], [2.0, 2.0]], load_before=5.0, cores=2)


def test_the_median_ratio_lies_inside_the_range_for_any_times():
    """CI once saw 2.3236833754053876 > 2.323683375405387: the range then divided seconds while the
    ratio divided tokens per second. Random times and token counts must never put it outside."""
    rng = random.Random(0)

    def run(name, tokens, seconds):
        return SystemRun(name, [[1]], statistics.median(seconds), tokens, tokens, details={"all_seconds": seconds})

    for _ in range(20_000):
        tokens = rng.randint(1, 5000)
        # few distinct times, so the median often equals the fastest or slowest run, as in CI
        ours = [rng.choice((0.31, 0.7213, 1.05)) * rng.uniform(0.5, 2) ** (rng.random() < 0.3)
                for _ in range(COMPARE_REPEATS)]
        theirs = [rng.choice((0.83, 1.6649, 2.9)) for _ in range(COMPARE_REPEATS)]
        compared = TransformersComparison(run("kvviz", tokens, ours), run("transformers", tokens, theirs),
                                          Agreement(1, 1, {}), hf_batch_size=1)
        low, high = compared.speedup_range
        assert low <= compared.speedup <= high
