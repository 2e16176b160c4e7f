"""Run one prompt under one cache strategy, step by step, and record what each step held and cost.

    run = run_strategy(lm, "ROMEO:", "sliding_window", max_tokens=32, window=16)
    run.steps[-1].bill.measured_bytes, run.steps[-1].forward_s, run.text

A step is one forward pass: the prompt (prefill), then one token at a time (decode). Greedy
picks the next token. With `forced_tokens`, the step feeds those tokens instead of its own picks
(teacher forcing), so that two strategies can be compared on the very same sequence.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from kvviz.engine.engine import Engine
from kvviz.engine.sampling import SamplingParams
from kvviz.engine.model_parts import model_parts
from kvviz.strategies.bill import ByteBill, cache_bill, engine_bill, formula_text, full_attention_shape
from kvviz.strategies.options import ENGINE_STRATEGIES, ModelFacts, StrategySpec, make_cache, resolve_options


@dataclass(slots=True)
class StrategyStep:
    step: int
    kind: str  # "prefill" | "decode"
    num_tokens_run: int  # tokens through the model: the prompt, then 1 (without a cache: all of them)
    context_tokens: int  # tokens in context after the step, whose K and V a full cache would hold
    cached_tokens: int  # of those, tokens whose K and V the cache keeps
    token: int  # the greedy pick from this step's logits
    forward_s: float
    bill: ByteBill  # measured bytes (per layer) beside the formula, differences named
    logprobs: np.ndarray = field(repr=False)  # (vocab,) log-softmax of the next-token logits
    # max |K - K_reference| over what the next step reads (no cache: what this step recomputed),
    # when run with a reference
    max_key_error: float | None = None
    max_value_error: float | None = None


@dataclass(slots=True)
class StrategyRun:
    strategy: str
    label: str
    options: dict  # with every default filled in
    prompt_token_ids: list[int]
    token_ids: list[int]  # the greedy pick of each step
    fed_token_ids: list[int]  # the token each decode step ran: the pick, or the forced token
    forced: bool
    text: str | None  # the picks as text (a story only when not forced)
    formula: str  # kvviz.memory_bill's formula at the last step, filled in
    steps: list[StrategyStep]
    # the last step's readable K and V, (layers, tokens, kv_heads, head_dim), and their positions
    final_keys: np.ndarray | None = field(default=None, repr=False)
    final_values: np.ndarray | None = field(default=None, repr=False)
    final_positions: list[int] = field(default_factory=list, repr=False)

    def to_dict(self, include_logprobs: bool = False) -> dict:
        """Plain JSON-ready data; log-probabilities (a vocabulary per step) only when asked."""
        data = {name: getattr(self, name) for name in (
            "strategy", "label", "options", "prompt_token_ids", "token_ids", "fed_token_ids", "forced",
            "text", "formula")}
        data["steps"] = []
        for step in self.steps:
            row = {name: getattr(step, name) for name in (
                "step", "kind", "num_tokens_run", "context_tokens", "cached_tokens", "token", "forward_s",
                "max_key_error", "max_value_error")}
            row["bill"] = asdict(step.bill)
            if include_logprobs:
                row["logprobs"] = step.logprobs.tolist()
            data["steps"].append(row)
        return data




def step_reporters(runs: list[str], max_tokens: int, progress, measured):
    """One on_step for run_strategy per run of `runs` (what each is), in order, each calling
    progress(steps done, steps in all, text) after every step: the run, its token and measured()'s words;
    None each when progress is None."""
    for done, doing in enumerate(runs):
        def on_step(steps: int, done=done, doing=doing) -> None:
            progress(done * max_tokens + steps, len(runs) * max_tokens,
                     f"{doing}, token {steps} of {max_tokens} · {measured()}")
        yield None if progress is None else on_step


def tokenize(prompt, tokenizer) -> list[int]:
    if isinstance(prompt, str):
        if tokenizer is None:
            raise ValueError("This model has no tokenizer; give the prompt as a list of token ids.")
        prompt = tokenizer(prompt)["input_ids"]
    token_ids = [int(t) for t in prompt]
    if not token_ids:
        raise ValueError("The prompt is empty; give at least one token.")
    return token_ids


def run_strategy(lm, prompt: str | list[int], strategy: str | StrategySpec, max_tokens: int = 32, *,
                 forced_tokens: list[int] | None = None, reference: StrategyRun | None = None,
                 on_step=None, **options) -> StrategyRun:
    """Generate `max_tokens` greedy tokens under one strategy, recording every step.

    strategy: a name of kvviz.strategies.STRATEGIES (its options as keywords), or a StrategySpec.
    forced_tokens: feed these (at least max_tokens - 1) instead of the own picks: teacher forcing.
    reference: a run that keeps every token (dynamic) and ran the same tokens; each step's kept K
        and V are measured against its K and V at the same positions (no_cache: the recomputed ones).
    on_step: called with the number of steps done after each step (a page moves its progress bar).
    """
    spec = StrategySpec.of(strategy)
    spec = StrategySpec(spec.name, {**spec.options, **options})
    model, tokenizer, max_context = model_parts(lm)
    if getattr(model.config.get_text_config(), "kv_lora_rank", None) is not None:
        raise ValueError("The cache strategies drop or squeeze K and V per head, but this MLA model caches one "
                         "latent row per token for all heads; load the bundled model (or another without MLA) "
                         "for this lesson.")
    facts = ModelFacts.of(model, max_context)
    prompt_ids = tokenize(prompt, tokenizer)
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, not {max_tokens!r}.")
    resolved = resolve_options(spec.name, spec.options, facts, len(prompt_ids) + max_tokens)
    if reference is not None and reference.final_positions != list(range(len(reference.final_positions))):
        raise ValueError("The reference run must keep every token; use a dynamic run as the reference.")
    if forced_tokens is not None and len(forced_tokens) < max_tokens - 1:
        raise ValueError(f"Teacher forcing needs {max_tokens - 1} tokens to feed, got {len(forced_tokens)}.")
    context = Context(spec.name, resolved, model, facts, full_attention_shape(model), prompt_ids,
                      forced_tokens, reference, on_step)
    if spec.name in ENGINE_STRATEGIES:
        _run_in_engine(lm, context, max_tokens)
    else:
        _run_in_transformers(context, max_tokens)
    picks = [s.token for s in context.steps]
    last = context.steps[-1].context_tokens
    return StrategyRun(
        spec.name, spec.label, resolved, prompt_ids, picks,
        context.fed, forced_tokens is not None,
        tokenizer.decode(picks) if tokenizer is not None else None,
        formula_text(spec.name, resolved, context.shape, last, context.dtype_bytes), context.steps,
        *context.final_kv)


@dataclass
class Context:
    """What a run carries from step to step."""

    name: str
    options: dict
    model: torch.nn.Module
    facts: ModelFacts
    shape: object  # kvviz.shapes.ModelShape
    prompt_ids: list[int]
    forced: list[int] | None
    reference: StrategyRun | None
    on_step: object = None  # called with the steps done after each one, or None
    steps: list = field(default_factory=list)
    fed: list = field(default_factory=list)
    final_kv: tuple = (None, None, [])

    @property
    def dtype_bytes(self) -> int:
        return torch.empty((), dtype=self.facts.dtype).element_size()

    def next_token(self, pick: int) -> int:
        """The token the next step runs: the own pick, or the forced one."""
        i = len(self.steps) - 1
        token = pick if self.forced is None else int(self.forced[i])
        self.fed.append(token)
        return token

    def record(self, logits, num_tokens_run, forward_s, bill, cached_tokens, kv) -> int:
        """Add a step's record and return its greedy pick.

        logits: (vocab,) for the next token. kv: (positions, K, V) of what the next step reads,
        K and V (layers, tokens, kv_heads, head_dim) as numpy arrays (None when nothing is kept).
        """
        step = len(self.steps)
        positions, keys, values = kv
        key_error = value_error = None
        if self.reference is not None and keys is not None:
            rows = list(positions)  # the reference keeps every token, so row = position
            key_error = float(np.abs(keys - self.reference.final_keys[:, rows]).max())
            value_error = float(np.abs(values - self.reference.final_values[:, rows]).max())
        self.steps.append(StrategyStep(
            step, "prefill" if step == 0 else "decode", num_tokens_run, len(self.prompt_ids) + step,
            cached_tokens, int(logits.argmax()), forward_s, bill,
            torch.log_softmax(logits.float(), dim=-1).cpu().numpy(), key_error, value_error))
        self.final_kv = (keys, values, list(positions))
        if self.on_step is not None:
            self.on_step(len(self.steps))
        return self.steps[-1].token


def _numpy(tensor: torch.Tensor | None) -> np.ndarray | None:
    return None if tensor is None else tensor.float().cpu().numpy()


@torch.inference_mode()
def _run_in_transformers(context: Context, max_tokens: int) -> None:
    """dynamic, static, sliding_window, quantized: the model's own forward with a kvviz cache."""
    model, device = context.model, context.facts.device
    cache = make_cache(context.name, context.options, context.facts)
    input_ids = torch.tensor([context.prompt_ids], device=device)  # (1, prompt tokens), then (1, 1)
    position = 0
    for step in range(max_tokens):
        num_new = input_ids.shape[1]
        position_ids = torch.arange(position, position + num_new, device=device)[None]  # (1, num_new)
        start = time.perf_counter()
        output = model(input_ids=input_ids, position_ids=position_ids, cache=cache, use_cache=True,
                       logits_to_keep=1)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        forward_s = time.perf_counter() - start
        position += num_new
        bill = cache_bill(context.name, context.options, cache, context.shape, position, context.dtype_bytes)
        positions, keys, values = cache.read()
        pick = context.record(output.logits[0, -1], num_new, forward_s, bill, cache.layers[0].num_held_tokens(),
                              (positions, _numpy(keys), _numpy(values)))
        if step < max_tokens - 1:
            input_ids = torch.tensor([[context.next_token(pick)]], device=device)


def _run_in_engine(lm, context: Context, max_tokens: int) -> None:
    """paged and no_cache: kvviz's Engine, one request, traced."""

    use_cache = context.name == "paged"
    num_tokens = len(context.prompt_ids) + max_tokens + 1
    settings = dict(block_size=context.options["block_size"], num_blocks=context.options["num_blocks"]) \
        if use_cache else {}
    # one request, every step in one chunk, so that each step samples
    engine = Engine(lm, enable_prefix_caching=False, max_num_seqs=1, max_num_batched_tokens=num_tokens,
                    use_cache=use_cache, **settings)
    # one token more than we step through: a finished request frees its blocks, and the last
    # step's bill should show them held
    params = SamplingParams(max_tokens=max_tokens + 1, ignore_eos=True)
    request_id = engine.add_request(context.prompt_ids, params, trace=True)
    for step in range(max_tokens):
        record = engine.step()
        assert record.sampled and record.trace is not None, "every step of a lone request samples"
        tokens = len(context.prompt_ids) + len(context.steps)
        if use_cache:
            assert record.request(request_id).num_computed_tokens == tokens
        bill = engine_bill(context.name, context.options, engine, context.shape, tokens, context.dtype_bytes)
        trace = record.trace
        kv = (list(range(trace.keys.shape[1])), trace.keys, trace.values)
        pick = context.record(torch.from_numpy(trace.logits), record.num_tokens_run, record.forward_s, bill,
                              tokens if use_cache else 0, kv)
        if step < max_tokens - 1:
            token = context.next_token(pick)
            # teacher forcing: put the forced token in place of the sampled one before it runs
            engine.requests[request_id].output_token_ids[-1] = token
