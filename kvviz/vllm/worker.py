"""vLLM's side of kvviz's vLLM backend: run by vLLM's own Python, never imported by kvviz.

    .venv-vllm/bin/python -P kvviz/vllm/worker.py JOBS.json RESULTS.json

JOBS.json holds a list of jobs; each builds one `LLM` and either generates token-id prompts
("generate") or only reports the KV cache vLLM allocated ("allocate"). RESULTS.json gets one
result per job, with "error" set (one sentence) when the job failed. Imports only the standard
library and vLLM: kvviz's own dependencies are not installed here. vLLM is imported inside the
functions that use it, on purpose: main() sets vLLM's environment variables first, and vLLM reads
them when it is imported.
"""
from __future__ import annotations

import gc
import json
import os
import re
import statistics
import sys
import time
import traceback

# vLLM's log lines the bill is checked against, e.g. "CPU KV cache size: 21,760 tokens"
KV_TOKENS = re.compile(r"KV cache size: ([\d,]+) tokens")
CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")


class KVWatch:
    """A vLLM stat logger: peak KV usage, preemptions and prefix-cache counts, from vLLM's own stats."""

    def __init__(self):
        self.peak_usage, self.preemptions, self.queries, self.hits = 0.0, 0, 0, 0

    def record(self, scheduler_stats, iteration_stats, *args, **kwargs):
        if scheduler_stats is not None:
            self.peak_usage = max(self.peak_usage, scheduler_stats.kv_cache_usage)
            prefix = scheduler_stats.prefix_cache_stats
            if prefix is not None:
                self.queries += prefix.queries
                self.hits += prefix.hits
        if iteration_stats is not None:
            self.preemptions += getattr(iteration_stats, "num_preempted_reqs", 0)

    def log(self):  # vLLM's periodic logging: nothing to print
        pass

    def reset(self):
        self.__init__()


def build_llm(job: dict, watch: KVWatch):
    from vllm import LLM

    options = {k: v for k, v in job.get("llm", {}).items() if v is not None}
    if options.get("tensor_parallel_size", 1) * options.get("pipeline_parallel_size", 1) == 1:
        options.setdefault("distributed_executor_backend", "uni")  # one process: starts far sooner
    llm = LLM(model=job["model"], skip_tokenizer_init=True, disable_log_stats=False, **options)
    llm.llm_engine.logger_manager.stat_loggers.append(watch)  # called with every step's stats
    return llm


def generate(llm, job: dict, watch: KVWatch) -> dict:
    from vllm import SamplingParams, TokensPrompt

    prompts = [TokensPrompt(prompt_token_ids=ids) for ids in job["prompts"]]
    params = [SamplingParams(detokenize=False, **p) for p in job["sampling"]]
    if job.get("warmup"):
        llm.generate(prompts[:2], [SamplingParams(max_tokens=4, detokenize=False, ignore_eos=True)] * 2,
                     use_tqdm=False)
    seconds, outputs = [], None
    for _ in range(max(1, job.get("repeats", 1))):
        llm.reset_prefix_cache()  # each run starts cold, as a fresh kvviz engine does
        watch.reset()
        start = time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        seconds.append(time.perf_counter() - start)
    return {"outputs": [{"token_ids": list(o.outputs[0].token_ids), "finish_reason": o.outputs[0].finish_reason,
                         "num_cached_tokens": o.num_cached_tokens or 0} for o in outputs],
            "seconds": statistics.median(seconds), "all_seconds": [round(s, 3) for s in seconds],
            "peak_kv_usage": watch.peak_usage, "preemptions": watch.preemptions,
            "prefix_cache_queries": watch.queries, "prefix_cache_hits": watch.hits}


def run_job(job: dict, log_path: str) -> dict:
    """One job, its LLM's log (engine processes included) going to log_path."""
    saved = os.dup(1), os.dup(2)
    with open(log_path, "w") as log:  # file descriptors, so vLLM's child processes write here too
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    watch, llm, result = KVWatch(), None, {}
    try:
        llm = build_llm(job, watch)
        config = llm.llm_engine.vllm_config
        cache = config.cache_config
        result = {"num_blocks": cache.num_gpu_blocks, "block_size": cache.block_size,
                  "max_model_len": config.model_config.max_model_len, "vllm_version": _version(),
                  # what vLLM logs as "KV cache size: N tokens, Maximum concurrency ...: Cx"
                  "reported": {"kv_cache_tokens": getattr(cache, "kv_cache_size_tokens", None),
                               "concurrency_context": config.model_config.max_model_len,
                               "max_concurrency": getattr(cache, "kv_cache_max_concurrency", None)}}
        if job["kind"] == "generate":
            result.update(generate(llm, job, watch))
    except Exception as error:  # reported to kvviz, which says it in one sentence
        traceback.print_exc()
        result["error"] = (f"{type(error).__name__}: "
                           f"{str(error).strip().splitlines()[0][:300] if str(error).strip() else ''}")
    finally:
        if llm is not None:
            _shutdown(llm)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
    with open(log_path) as log:
        text = log.read()
    tokens, concurrency = KV_TOKENS.findall(text), CONCURRENCY.findall(text)
    if tokens and concurrency and not (result.get("reported") or {}).get("kv_cache_tokens"):
        # engine core in another process: its log line (printed once per process) is the report
        result["reported"] = {"kv_cache_tokens": int(tokens[-1].replace(",", "")),
                              "concurrency_context": int(concurrency[-1][0].replace(",", "")),
                              "max_concurrency": float(concurrency[-1][1])}
    if "error" in result:
        result["log_tail"] = text[-3000:]
    return result


def _shutdown(llm) -> None:
    """Stop the engine and free its process group, so the next job can build its own LLM."""
    from vllm.distributed import cleanup_dist_env_and_memory

    try:
        llm.llm_engine.engine_core.shutdown()
    except Exception:
        pass
    del llm
    gc.collect()
    cleanup_dist_env_and_memory()


def _version() -> str:
    import vllm

    return vllm.__version__


def main(jobs_path: str, results_path: str) -> int:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine core in this process
    with open(jobs_path) as f:
        jobs = json.load(f)
    results = [run_job(job, f"{results_path}.{i}.log") for i, job in enumerate(jobs)]
    with open(results_path, "w") as f:
        json.dump(results, f)
    return 0


if __name__ == "__main__":  # vLLM's engine starts worker processes: build LLMs only here
    raise SystemExit(main(*sys.argv[1:3]))
