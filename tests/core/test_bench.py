"""`python -m kvviz bench --quick` end to end: it runs, kvviz agrees with transformers, it reports."""

import argparse
import json

import pytest

from kvviz import bench
from kvviz.cli.bench import add_bench_arguments, run_bench


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    parser = add_bench_arguments(argparse.ArgumentParser())
    code = run_bench(parser.parse_args(["--quick", "--json", str(out)]))
    return code, json.loads(out.read_text())


@pytest.mark.slow
def test_quick_bench_agrees_with_hf_generate(quick_run, capsys):
    code, results = quick_run
    assert code == 0
    mixed = results["mixed"]
    hf = mixed["systems"]["hf_generate"]
    assert hf["outputs_equal"] == mixed["requests"], hf["first_divergence"]
    assert hf["kvviz_speedup"] > 0


@pytest.mark.slow
def test_quick_bench_reports_every_figure(quick_run):
    _, results = quick_run
    assert set(results) >= {"model", "settings", "mixed", "flops", "memory", "shared_prefix", "tight_pool",
                            "pool_sizes"}
    systems = results["mixed"]["systems"]
    assert set(systems) == {"kvviz", "hf_generate", "hf_generate_batch"}
    for name in ("kvviz", "hf_generate"):
        assert systems[name]["output_tokens_per_s"] > 0, name
    batch = systems["hf_generate_batch"]  # may be unavailable on some machines; then it says why
    assert batch["output_tokens_per_s"] > 0 or batch["error"]
    from kvviz.bench import bf16_on_cpu
    bf16 = results["bf16"]  # measured beside fp32 where the CPU has bf16 instructions, else why not
    if bf16_on_cpu() is None:
        assert bf16["tokens_per_s"] > 0 and bf16["speedup_over_fp32"] > 0
    else:
        assert "avx512_bf16" in bf16["skipped"] or "does not say" in bf16["skipped"]
    flops = results["flops"]
    assert flops["model_flops"] > 0 and flops["matmul_peak_flops_per_s"] > 0
    assert 0 < flops["fraction_of_peak"]
    assert 0 <= results["memory"]["kvviz_slack_fraction"] < 1
    prefix = results["shared_prefix"]
    assert prefix["prefix_len"] > 0 and prefix["speedup"] > 0 and 0 <= prefix["hit_rate"] <= 1
    assert systems["kvviz"]["details"]["settings"] == {}  # the headline is Engine(model) as a user writes it
    pool_sizes = results["pool_sizes"]
    assert [row["num_blocks"] for row in pool_sizes] == [128, 1024]
    assert all(0 < row["outside_forward_ms"] < row["step_ms"] and row["preemptions"] == 0 for row in pool_sizes)
    tight = results["tight_pool"]
    assert tight["num_blocks"] < tight["demand_blocks"]
    assert tight["outputs_equal"] == tight["requests"]


def test_compare_outputs_finds_first_divergence():
    agreement = bench.compare_outputs([[1, 2, 3], [4, 5, 6], [7]], [[1, 2, 3], [4, 9, 6], [7, 8]])
    assert (agreement.num_equal, agreement.first_divergence) == (1, {1: 1, 2: 1})
    assert agreement.describe().startswith("1/3")


def test_bad_lengths_end_in_one_sentence(capsys):
    parser = add_bench_arguments(argparse.ArgumentParser())
    assert run_bench(parser.parse_args(["--min-len", "300", "--max-len", "20"])) == 2
    assert "--min-len" in capsys.readouterr().out


def test_model_flops_count_prompt_outputs_and_attention():
    model = bench.build_random_llama(bench.CustomShape(num_layers=1, hidden_size=64, num_heads=4,
                                                       num_kv_heads=2, vocab_size=128, max_context=64))
    one = bench.Workload("one", [[1, 2, 3]], [2])  # runs 4 tokens, samples 2 logits rows
    body = bench.count_params(model) - 2 * 128 * 64
    attention = 4 * 4 * 16 * 1 * (4 * 5 / 2)
    assert bench.model_flops(model, one) == 2 * body * 4 + 2 * 128 * 64 * 2 + attention


def test_engine_flags_are_reported_as_tuned(capsys):
    parser = add_bench_arguments(argparse.ArgumentParser())
    args = parser.parse_args(["--quick", "--skip-hf", "--max-num-batched-tokens", "64", "--pool-sizes", ""])
    assert run_bench(args) == 0
    out = capsys.readouterr().out
    assert "kvviz Engine(model)" in out and "kvviz tuned sets max_num_batched_tokens=64" in out


@pytest.mark.parametrize("requests, batch_size, shown", [(4, 16, 4), (5, 2, 2)])
def test_hf_generate_is_named_by_the_batch_it_ran(bundled, requests, batch_size, shown):
    """Issue 50: the comparison chart said "bs 16" for 4 requests run as one batch of 4."""
    workload = bench.Workload("four", [[1, 2, 3 + i] for i in range(requests)], [2] * requests)
    run = bench.run_hf_generate(bench.hf_copy(bundled.model), workload, batch_size)
    assert run.name == f"hf generate (bs {shown})" and len(run.outputs) == requests
