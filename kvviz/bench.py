"""The bench's library: kvviz against transformers, on the same model and the same prompts.

The mixed workload has the shape of nano-vllm's benchmark, scaled to a small CPU: random-token
prompts and outputs of uniformly drawn lengths, greedy, ignoring EOS. Three systems run it:

- kvviz: continuous batching over a paged KV cache (this package's engine);
- transformers `generate`, as a user writes it: static batches, left-padded, each batch
  generating to its longest request, the extra tokens thrown away;
- transformers continuous batching: the manager that `generate_batch` wraps, given each request
  its own `max_new_tokens` (`generate_batch` itself takes one length for all prompts).

Then two kvviz-only workloads: a shared system prompt (prefix caching on against off) and a pool
too small for the batch (preemption and recompute must not change the outputs).

    python -m kvviz bench                 # about 25M-parameter random Llama, 48 requests
    python -m kvviz bench --quick         # a smoke test in well under a minute

The command line (flags, printing) is kvviz.cli.bench; the workloads are kvviz.workloads.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from time import perf_counter

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from kvviz.engine.engine import Engine
from kvviz.engine.sampling import SamplingParams
from kvviz.engine.config import DEFAULTS, EngineConfig
from kvviz.engine.block_pool import blocks_needed
from kvviz.models import CustomShape, pick_device, pick_dtype
from kvviz.shapes import ModelShape
from kvviz.workloads import Workload

# about 25M parameters: 6 x 2.7M in the layers, 2 x 4.2M in the untied embedding and head
BENCH_SHAPE = CustomShape(num_layers=6, hidden_size=512, num_heads=8, num_kv_heads=2,
                          vocab_size=8192, max_context=1024)
# Wider than Llama's usual 0.02: with that, a random model repeats one token forever and an
# "outputs agree" check would compare nothing; with 0.05 greedy outputs wander over the vocabulary.
INIT_STD = 0.05


# ---- the model ---------------------------------------------------------------------------
def build_random_llama(shape: CustomShape = BENCH_SHAPE, seed: int = 0, device=None, dtype=None,
                       init_std: float = INIT_STD) -> torch.nn.Module:
    """A Llama-style model with random weights, the same for the same seed. No tokenizer needed."""
    device = pick_device(device)
    dtype = pick_dtype(device, dtype)
    config = LlamaConfig(
        vocab_size=shape.vocab_size, hidden_size=shape.hidden_size,
        intermediate_size=shape.resolved_intermediate_size(), num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads, num_key_value_heads=shape.num_kv_heads,
        head_dim=shape.resolved_head_dim(), max_position_embeddings=shape.max_context,
        tie_word_embeddings=False, initializer_range=init_std,
        bos_token_id=None, eos_token_id=None, pad_token_id=0)  # no EOS: every request runs to length
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(dtype)
    return model.eval()


def hf_copy(model: torch.nn.Module) -> torch.nn.Module:
    """An identical model for transformers' own runs: SDPA attention, no EOS, nothing shared."""
    twin = copy.deepcopy(model)
    twin.set_attn_implementation("sdpa")
    twin.generation_config.eos_token_id = None
    twin.generation_config.pad_token_id = pad_token_id(model)
    return twin


def pad_token_id(model) -> int:
    pad = getattr(model.config.get_text_config(), "pad_token_id", None)
    return int(pad) if isinstance(pad, int) else 0


def count_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


# ---- one system on one workload ----------------------------------------------------------
@dataclass
class SystemRun:
    """What one system did with a workload: outputs cut to the requested lengths, and time."""

    name: str
    outputs: list[list[int]] | None  # None when the system could not run
    seconds: float
    output_tokens: int  # requested tokens only: the useful output
    generated_tokens: int  # what the system produced, extra tokens of static batches included
    error: str | None = None
    details: dict = field(default_factory=dict)

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.seconds if self.outputs is not None and self.seconds > 0 else 0.0


def run_kvviz(model, workload: Workload, config: EngineConfig | None = None, *, name: str = "kvviz",
              **overrides) -> SystemRun:
    """Generate the workload with Engine(model, config, **overrides): its defaults unless told.

    The time counts generation, not the engine's construction (which allocates the pool).
    """
    slack_bytes, used_bytes, outside, steps = 0, 0, [], []

    def watch(num_finished, num_total, record):
        nonlocal slack_bytes, used_bytes
        slack_bytes += record.memory.slack_bytes
        used_bytes += record.memory.used_block_bytes
        outside.append(record.step_s - record.forward_s)
        steps.append(record.step_s)

    setup = perf_counter()
    engine = Engine(model, config, **overrides)
    params = [SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True) for n in workload.max_tokens]
    start = perf_counter()
    outs = engine.generate(workload.prompts, params, progress=watch)
    seconds = perf_counter() - start
    stats = engine.stats
    details = {
        "setup_s": start - setup, "steps": engine.step_index, "num_blocks": engine.num_blocks,
        "peak_blocks": stats["peak_blocks"], "preemptions": engine.scheduler.num_preemptions,
        "prompt_tokens": stats["prompt_tokens"], "cached_tokens": stats["cached_tokens"],
        "hit_rate": stats["cached_tokens"] / max(stats["prompt_tokens"], 1),
        "forward_s": stats["forward_s"],
        "slack_fraction": slack_bytes / used_bytes if used_bytes else 0.0,  # over all steps
        "step_ms": 1e3 * statistics.median(steps), "outside_forward_ms": 1e3 * statistics.median(outside),
        "settings": overrides,
    }
    return SystemRun(name, [o.token_ids for o in outs], seconds, workload.num_output_tokens,
                     stats["generated_tokens"], details=details)


def step_overhead(model, workload: Workload, num_blocks: int, num_steps: int = 24) -> dict:
    """Median time per step outside the forward pass, Engine(model, num_blocks=...) otherwise default.

    The first `num_steps` steps of the workload (prefill chunks, then decodes), after a warm-up.
    """
    engine = Engine(model, num_blocks=num_blocks)
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in workload.max_tokens]
    for prompt, sampling in zip(workload.prompts, params):
        engine.add_request(prompt, sampling)
    records = [engine.step() for _ in range(num_steps) if engine.has_unfinished()]
    outside = [r.step_s - r.forward_s for r in records[2:]]
    return {"num_blocks": num_blocks, "steps": len(outside), "preemptions": engine.scheduler.num_preemptions,
            "outside_forward_ms": 1e3 * statistics.median(outside),
            "spread_ms": [1e3 * min(outside), 1e3 * max(outside)],
            "step_ms": 1e3 * statistics.median(r.step_s for r in records[2:])}


@torch.inference_mode()
def run_hf_generate(model, workload: Workload, batch_size: int = 16) -> SystemRun:
    """Static batches in arrival order, left-padded, each generating to its longest request."""
    pad = pad_token_id(model)
    device = next(model.parameters()).device
    outputs, generated, padded_slots, useful_slots = [], 0, 0, 0
    start = perf_counter()
    for first in range(0, len(workload.prompts), batch_size):
        prompts = workload.prompts[first:first + batch_size]
        wants = workload.max_tokens[first:first + batch_size]
        width, new_tokens = max(len(p) for p in prompts), max(wants)
        input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)  # (B, T)
        attention_mask = torch.zeros(len(prompts), width, dtype=torch.long)  # (B, T)
        for row, prompt in enumerate(prompts):
            input_ids[row, width - len(prompt):] = torch.tensor(prompt)
            attention_mask[row, width - len(prompt):] = 1
        sequences = model.generate(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                                   max_new_tokens=new_tokens, do_sample=False)  # (B, T + new)
        new = sequences[:, width:].tolist()
        outputs += [row[:want] for row, want in zip(new, wants)]
        generated += sum(len(row) for row in new)
        padded_slots += len(prompts) * (width + new_tokens)  # the batch's cache at its end
        useful_slots += sum(len(p) + w for p, w in zip(prompts, wants))
    seconds = perf_counter() - start
    largest = min(batch_size, len(workload.prompts))  # the batches it ran: 4 requests are one batch of 4, not 16
    details = {"batch_size": largest, "padding_fraction": 1 - useful_slots / padded_slots}
    return SystemRun(f"hf generate (bs {largest})", outputs, seconds, workload.num_output_tokens,
                     generated, details=details)


class _ErrorLog(logging.Handler):
    """Keeps what transformers' continuous batching logs as errors, to say why a run failed."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record):
        message = record.getMessage()
        if not message.startswith("Cannot get memory breakdown"):  # harmless: we size the cache
            self.messages.append(message.splitlines()[0][:160])


def run_hf_generate_batch(model, workload: Workload, *, block_size: int = DEFAULTS.block_size,
                          num_blocks: int | None = None, max_num_seqs: int = DEFAULTS.max_num_seqs,
                          max_num_batched_tokens: int = DEFAULTS.max_num_batched_tokens) -> SystemRun:
    """transformers' continuous batching, sized like kvviz's engine; never raises.

    These are the steps of `generate_batch` (init, warm up, start, add requests, collect, stop),
    spelled out for two reasons: each request gets its own `max_new_tokens`, and the setup (cache
    allocation; CUDA graph capture on a GPU) stays outside the timed part, as kvviz's does.
    """
    name = "hf generate_batch"
    try:
        # imported here on purpose: a transformers without continuous batching gets a sentence, not an ImportError
        from transformers import ContinuousBatchingConfig, GenerationConfig
        from transformers.generation.continuous_batching.utils import WorkloadHints
    except ImportError as error:
        return SystemRun(name, None, 0.0, workload.num_output_tokens, 0, error=f"not in this transformers ({error})")
    generation_config = GenerationConfig(max_new_tokens=max(workload.max_tokens), do_sample=False,
                                         eos_token_id=-1, pad_token_id=pad_token_id(model))
    batching_config = ContinuousBatchingConfig(
        page_size=block_size, num_blocks=num_blocks or workload.blocks_needed(block_size),
        max_batch_tokens=max_num_batched_tokens, max_requests_per_batch=max_num_seqs)
    hints = WorkloadHints(max_prompt_length=max(len(p) for p in workload.prompts),
                          max_generated_length=max(workload.max_tokens), num_requests=len(workload.prompts))
    # its handlers print CPU warnings (no psutil, no flash attention); keep only the errors, quietly
    logger = logging.getLogger("ContinuousBatchingLogger")
    errors, old_handlers = _ErrorLog(), logger.handlers[:]
    logger.handlers[:] = [errors]
    results, ids, manager = {}, [], None
    setup = start = perf_counter()
    try:
        with torch.no_grad():
            manager = model.init_continuous_batching(generation_config, batching_config, hints)
            manager.warmup()
            start = perf_counter()
            manager.start()
            ids = [manager.add_request(prompt, max_new_tokens=want, eos_token_id=-1)
                   for prompt, want in zip(workload.prompts, workload.max_tokens)]
            while len(results) < len(ids):
                result = manager.get_result(timeout=1)
                if result is not None and result.is_finished():
                    results[result.request_id] = result
                elif result is None and not manager.is_running():
                    break
    except Exception as error:  # any failure of the baseline is reported, not raised
        errors.messages.append(f"{type(error).__name__}: {str(error).splitlines()[0][:160]}")
    finally:
        seconds = perf_counter() - start
        if manager is not None:
            try:
                manager.stop(block=True, timeout=30)
                manager.destroy()
            except Exception as error:
                errors.messages.append(f"stopping it failed: {type(error).__name__}: {error}"[:160])
        logger.handlers[:] = old_handlers
    failed = [r for r in results.values() if getattr(r, "error", None)]
    if len(results) < len(workload.prompts) or failed:
        why = errors.messages + [str(r.error) for r in failed] + ["no reason given"]
        reason = f"{len(results) - len(failed)} of {len(workload.prompts)} requests came back; {why[0]}"
        return SystemRun(name, None, seconds, workload.num_output_tokens, 0, error=reason)
    outputs = [list(results[i].generated_tokens)[:want] for i, want in zip(ids, workload.max_tokens)]
    generated = sum(len(r.generated_tokens) for r in results.values())
    return SystemRun(name, outputs, seconds, workload.num_output_tokens, generated,
                     details={"setup_s": start - setup, "page_size": block_size,
                              "num_blocks": batching_config.num_blocks})


# ---- checks ------------------------------------------------------------------------------
@dataclass(slots=True)
class Agreement:
    """How many requests' greedy outputs are identical, and where the others first differ."""

    num_equal: int
    num_requests: int
    first_divergence: dict[int, int]  # request index -> first differing output position

    @property
    def all_equal(self) -> bool:
        return self.num_equal == self.num_requests

    def describe(self) -> str:
        text = f"{self.num_equal}/{self.num_requests}"
        if self.first_divergence:
            positions = sorted(self.first_divergence.values())
            text += f" (others differ from output token {positions[0]}"
            text += ")" if len(positions) == 1 else f" to {positions[-1]})"
        return text


def compare_outputs(reference: list[list[int]], candidate: list[list[int]]) -> Agreement:
    divergence = {}
    for index, (want, got) in enumerate(zip(reference, candidate)):
        if want != got:
            divergence[index] = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b),
                                     min(len(want), len(got)))
    return Agreement(len(reference) - len(divergence), len(reference), divergence)


def model_flops(model, workload: Workload) -> float:
    """FLOPs the workload needs at least: weights' matmuls, attention, and sampled logits.

    Each request runs its prompt and all its outputs but the last through the model once
    (n = prompt + output - 1 tokens), and gets logits for each output. A matmul with a weight of
    P parameters costs 2P per token; attention costs 4 * heads * head_dim per query-key pair.
    """
    shape = ModelShape.of_model(model)
    embedding = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    shared = head.data_ptr() == embedding.data_ptr()
    body = count_params(model) - embedding.numel() - (0 if shared else head.numel())
    per_pair = 4 * shape.num_heads * shape.head_dim * shape.num_layers
    total = 0.0
    for prompt, want in zip(workload.prompts, workload.max_tokens):
        n = len(prompt) + want - 1
        total += 2 * body * n + 2 * head.numel() * want + per_pair * n * (n + 1) / 2
    return total


def measure_matmul_peak(device=None, dtype=None, size: int = 2048, seconds: float = 2.0) -> float:
    """This machine's dense matmul rate in FLOP/s, square `size` matrices, all threads.

    The best of five trials: another process taking the cores can only make a trial slower.
    """
    device = pick_device(device)
    dtype = pick_dtype(device, dtype)
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    out = torch.empty(size, size, device=device, dtype=dtype)
    torch.matmul(a, b, out=out)  # warm-up
    _sync(device)
    best = 0.0
    for _trial in range(5):
        count, start = 0, perf_counter()
        while count == 0 or perf_counter() - start < seconds / 5:
            torch.matmul(a, b, out=out)
            count += 1
            _sync(device)
        best = max(best, 2 * size ** 3 * count / (perf_counter() - start))
    return best


def bf16_on_cpu() -> str | None:
    """None when this CPU computes bfloat16 natively (avx512_bf16 or AMX), else why not, in words.

    Without those instructions torch emulates bfloat16 matmuls in float32 and converts every
    operand, so a bf16 run there measures the conversion, not the format."""
    try:
        with open("/proc/cpuinfo") as info:
            flags = next((line.split(":", 1)[1].split() for line in info if line.startswith("flags")), [])
    except OSError:
        return "this system does not say which instructions its CPU has"
    if "avx512_bf16" in flags or "amx_bf16" in flags:
        return None
    return f"this CPU has neither avx512_bf16 nor AMX (torch sees {torch.backends.cpu.get_cpu_capability()})"


def bench_bf16(model, workload, warmup, repeats, fp32: SystemRun) -> dict:
    """Engine(model) in bfloat16 beside float32 on the CPU, when the CPU has bf16 instructions."""
    reason = bf16_on_cpu()
    if reason is not None:
        return {"skipped": reason}
    half = copy.deepcopy(model).to(torch.bfloat16)
    run = bench_kvviz(half, workload, warmup, repeats, {}, "kvviz bf16")
    return {"tokens_per_s": run.tokens_per_s, "speedup_over_fp32": run.tokens_per_s / fp32.tokens_per_s,
            "outputs_equal_to_fp32": compare_outputs(fp32.outputs, run.outputs).describe()}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def repeated(run, repeats: int) -> SystemRun:
    """Run `repeats` times; see median_run."""
    return median_run([run() for _ in range(max(1, repeats))])


def median_run(runs: list[SystemRun]) -> SystemRun:
    """The first run's outputs with the median time of all; every run's seconds in details["all_seconds"]."""
    first = runs[0]
    if first.outputs is not None:
        first.seconds = statistics.median(r.seconds for r in runs)
        first.details["all_seconds"] = [r.seconds for r in runs]
    return first


# ---- the whole benchmark -----------------------------------------------------------------
TARGETS = {"speedup_over_generate": 2.0, "speedup_over_generate_batch": 2.0, "kv_waste": 0.04}


def bench_kvviz(model, workload, warmup, repeats, settings: dict, name: str = "kvviz") -> SystemRun:
    """kvviz on the workload, Engine(model, **settings); {} is Engine(model) as a user writes it."""
    run_kvviz(model, warmup, **settings)  # first-call costs are nobody's throughput
    return repeated(lambda: run_kvviz(model, workload, name=name, **settings), repeats)


BUSY_LOOP = "while True: pass"  # a competitor: one core's worth of work, as another busy program on the server


@contextlib.contextmanager
def busy_processes(count: int):
    """`count` processes that each keep one core busy (python -c 'while True: pass') while the block runs."""
    competitors = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP], stdin=subprocess.DEVNULL)
                   for _ in range(count)]
    try:
        yield competitors
    finally:
        for competitor in competitors:
            competitor.kill()
        for competitor in competitors:
            competitor.wait()


def requests_that_fit(workload: Workload, num_blocks: int) -> int:
    """How many of the workload's first requests fit in `num_blocks` at their full length."""
    count = 0
    while count < len(workload.prompts) and workload.head(count + 1).blocks_needed(DEFAULTS.block_size) <= num_blocks:
        count += 1
    return max(count, 1)


def bench_hf(model, workload, warmup, repeats, hf_batch_size, engine_settings) -> list[SystemRun]:
    twin = hf_copy(model)
    run_hf_generate(twin, warmup, hf_batch_size)
    runs = [repeated(lambda: run_hf_generate(twin, workload, hf_batch_size), repeats)]
    batch_twin = hf_copy(model)  # continuous batching switches the model's attention; keep it apart
    if run_hf_generate_batch(batch_twin, warmup, **engine_settings).outputs is None:
        runs.append(run_hf_generate_batch(batch_twin, workload, **engine_settings))  # keep its reason
    else:
        runs.append(repeated(lambda: run_hf_generate_batch(batch_twin, workload, **engine_settings), repeats))
    return runs  # the twins go with this function's frame


def mixed_results(workload: Workload, runs: list[SystemRun]) -> dict:
    kvviz = runs[0]
    systems = {}
    for run in runs:
        entry = {"seconds": run.seconds, "output_tokens": run.output_tokens,
                 "generated_tokens": run.generated_tokens, "output_tokens_per_s": run.tokens_per_s,
                 "error": run.error, "details": run.details}
        if run is not kvviz and run.outputs is not None:
            agreement = compare_outputs(run.outputs, kvviz.outputs)
            entry["kvviz_speedup"] = kvviz.tokens_per_s / run.tokens_per_s
            entry["outputs_equal"] = agreement.num_equal
            entry["first_divergence"] = {str(k): v for k, v in agreement.first_divergence.items()}
        systems[system_key(run.name)] = entry
    return {"requests": len(workload.prompts), "prompt_tokens": workload.num_prompt_tokens,
            "output_tokens": workload.num_output_tokens, "systems": systems}


def system_key(name: str) -> str:
    return "hf_generate" if name.startswith("hf generate (") else name.replace(" ", "_")


def flops_results(model, workload, kvviz: SystemRun, device, dtype, args) -> dict:
    flops = model_flops(model, workload)
    size = args.peak_size
    peak = measure_matmul_peak(device, dtype, size, args.peak_seconds)
    achieved = flops / kvviz.seconds
    return {"model_flops": flops, "achieved_flops_per_s": achieved, "matmul_peak_flops_per_s": peak,
            "matmul_size": size, "fraction_of_peak": achieved / peak}


def bench_shared_prefix(model, workload: Workload, repeats: int, settings: dict) -> dict:
    cached = repeated(lambda: run_kvviz(model, workload, **settings), repeats)
    uncached = repeated(lambda: run_kvviz(model, workload, **(settings | {"enable_prefix_caching": False})), repeats)
    block_size = settings.get("block_size", DEFAULTS.block_size)
    shared_blocks = min(_common_prefix(workload.prompts), min(len(p) for p in workload.prompts) - 1) // block_size
    best_hits = (len(workload.prompts) - 1) * shared_blocks * block_size  # all but the first request hit
    return {"requests": len(workload.prompts), "prompt_tokens": workload.num_prompt_tokens,
            "prefix_len": _common_prefix(workload.prompts), "hit_rate": cached.details["hit_rate"],
            "best_hit_rate": best_hits / workload.num_prompt_tokens, "seconds_cached": cached.seconds,
            "seconds_uncached": uncached.seconds, "speedup": uncached.seconds / cached.seconds,
            "outputs_equal": compare_outputs(uncached.outputs, cached.outputs).num_equal}


def _common_prefix(prompts: list[list[int]]) -> int:
    length = 0
    while all(len(p) > length and p[length] == prompts[0][length] for p in prompts):
        length += 1
    return length


def bench_tight_pool(model, mixed: Workload, roomy: SystemRun, settings: dict) -> dict:
    """Half the mixed requests (8 at least) in a quarter of the blocks they need: preempt, recompute."""
    workload = mixed.head(max(8, len(mixed.prompts) // 2))
    block_size = settings.get("block_size", DEFAULTS.block_size)
    demand = workload.blocks_needed(block_size)
    largest = max(blocks_needed(len(p) + o, block_size) for p, o in zip(workload.prompts, workload.max_tokens))
    num_blocks = max(largest, demand // 4)
    tight = run_kvviz(model, workload, **(settings | {"num_blocks": num_blocks}))
    agreement = compare_outputs(roomy.outputs[:len(workload.prompts)], tight.outputs)
    return {"requests": len(workload.prompts), "demand_blocks": demand, "num_blocks": num_blocks,
            "preemptions": tight.details["preemptions"], "seconds": tight.seconds,
            "output_tokens_per_s": tight.tokens_per_s, "outputs_equal": agreement.num_equal,
            "first_divergence": {str(k): v for k, v in agreement.first_divergence.items()}}

def targets(results: dict) -> dict:
    """The issue's targets, met or not (None where a baseline did not run)."""
    systems = results["mixed"]["systems"]

    def speedup(key):
        return systems.get(key, {}).get("kvviz_speedup")

    met = {}
    for key, name in (("hf_generate", "speedup_over_generate"), ("hf_generate_batch", "speedup_over_generate_batch")):
        met[name] = None if speedup(key) is None else speedup(key) >= TARGETS[name]
    met["kv_waste"] = results["memory"]["kvviz_slack_fraction"] < TARGETS["kv_waste"]
    return met
