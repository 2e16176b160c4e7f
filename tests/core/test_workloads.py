"""One workload type, one prompt parser, one JSONL writer: the command line, the bench and the batch page share them."""

import json

import pytest

from kvviz.cli import main as cli
from kvviz.engine.config import EngineConfig
from kvviz.engine.sampling import SamplingParams
from kvviz.engine.config import DEFAULTS
from kvviz.lessons.batch_generation.logic import BatchSettings, run_batch
from kvviz.workloads import (
    Workload,
    WorkloadError,
    jsonl_lines,
    mixed_workload,
    parse_upload,
    request_sampling,
    synthetic_workload,
)


def test_one_workload_serves_the_bench_and_the_batch_page(bundled):
    page = synthetic_workload(bundled.tokenizer, 4096, 4, (4, 8), (3, 6), shared_prefix=8, seed=2)
    bench_work = mixed_workload(4, 4, 8, 3, 6, 4096, seed=2)
    for work in (page, bench_work):
        assert isinstance(work, Workload) and len(work) == 4
        head = work.head(2)
        assert head.prompts == work.prompts[:2] and head.max_tokens == work.max_tokens[:2]
        assert head.blocks_needed(4) == sum(-(-(len(p) + n) // 4) for p, n in zip(head.prompts, head.max_tokens))
    assert page.texts[0] == bundled.tokenizer.decode(page.prompts[0]) and bench_work.texts is None
    assert page.head(1).texts == page.texts[:1]


def test_batch_results_and_the_command_line_write_the_same_lines(bundled, tmp_path):
    work = synthetic_workload(bundled.tokenizer, 4096, 2, (4, 6), (2, 3), seed=0)
    result = run_batch(bundled, work, BatchSettings(EngineConfig(block_size=4)))
    assert result.to_jsonl() == "".join(jsonl_lines(work.texts, result.outputs))
    prompts = tmp_path / "p.txt"
    prompts.write_text("ROMEO:\nJULIET:\n")
    out = tmp_path / "out.jsonl"
    assert cli.main(["generate", "--prompts", str(prompts), "--out", str(out), "--max-tokens", "3"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["prompt"] for r in rows] == ["ROMEO:", "JULIET:"]
    assert set(rows[0]) == set(json.loads(result.to_jsonl().splitlines()[0]))


def test_settings_are_an_engine_config_and_sampling_params():
    settings = BatchSettings()
    assert settings.engine == EngineConfig() and settings.engine.block_size == DEFAULTS.block_size
    base = SamplingParams(max_tokens=9, temperature=0.7, top_k=5, seed=10)
    second = request_sampling(base, 2, max_tokens=4)
    assert (second.seed, second.max_tokens, second.temperature, second.top_k) == (12, 4, 0.7, 5)
    assert request_sampling(SamplingParams(), 3).seed is None  # no seed: no per-request seed either
    assert BatchSettings(sampling_params=base).sampling(4, 2) == second


def test_an_upload_of_another_kind_is_refused():
    with pytest.raises(WorkloadError, match="not a .txt or .jsonl"):
        parse_upload("prompts.csv", b"a,b")


def test_no_two_samples_of_a_seeded_job_share_a_seed():
    base = SamplingParams(temperature=0.8, seed=10, n=3)
    seeds = [request_sampling(base, i).seed + j for i in range(4) for j in range(base.n)]
    assert seeds == list(range(10, 22))  # request i owns 10 + 3i .. 10 + 3i + 2
    assert request_sampling(SamplingParams(seed=10), 2).seed == 12  # n=1: seed + i, as before
