"""The engine: add requests, step, generate. One engine serves a lesson and a batch job.

    engine = Engine(load_model("bundled"))
    outs = engine.generate(["ROMEO:"], SamplingParams(max_tokens=32))
    rid = engine.add_request("JULIET:", SamplingParams(max_tokens=8), trace=True)
    record = engine.step()     # a StepRecord: what ran, what was sampled, blocks, bytes, K/V

A step is the loop of every serving engine: schedule (scheduler.py), run one forward pass over
the scheduled tokens of every request (batch.py, runner.py), sample (sampling.py), and record
what happened (recording.py). The pool and cache it runs on are set up in cache_setup.py.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from kvviz.engine import mla
from kvviz.engine.batch import build_step_batch
from kvviz.engine.cache_setup import pick_attention_kernel, set_up_cache
from kvviz.engine.config import EngineConfig
from kvviz.engine.cpu.threads import cpu_share
from kvviz.engine.errors import EngineError, NonFiniteLogits
from kvviz.engine.fork import fork_samples
from kvviz.engine.kv_cache import CacheShape, slots_for
from kvviz.engine.model_parts import eos_token_ids, model_parts
from kvviz.engine.prompts import checked_token_ids
from kvviz.engine.records import DraftRecord, MemoryRecord, StepRecord
from kvviz.engine.recording import memory_record, step_record, trace_record
from kvviz.engine.request import Request
from kvviz.engine.runner import Trace, install, run_forward
from kvviz.engine.sampling import SamplingParams, non_finite_rows, sample
from kvviz.engine.scheduler import ScheduledChunk, Scheduler
from kvviz.engine.speculative import accept, last_rows, set_drafts


@dataclass(slots=True)
class RequestOutput:
    """One prompt's result. With SamplingParams(n=k), `samples` holds all k samples' generated
    ids (sample i drew with seed + i) and `token_ids`, `text`, `finish_reason` are sample 0's."""

    request_id: int
    prompt_token_ids: list[int]
    token_ids: list[int]  # generated tokens only
    text: str | None
    finish_reason: str | None
    num_cached_tokens: int
    num_preemptions: int
    samples: list[list[int]] = field(default_factory=list)  # every sample's generated ids; [token_ids] for n=1
    texts: list[str] | None = None  # every sample's text (None without a tokenizer)


class Engine:
    """Engine(lm, config=None, **overrides): settings from an EngineConfig, defaults included.

    Engine(lm, block_size=16, num_blocks=None, enable_prefix_caching=True, max_num_seqs=64,
    max_num_batched_tokens=2048) works as before: keywords override the config's fields.
    """

    def __init__(self, lm, config: EngineConfig | None = None, **overrides):
        if config is not None and not isinstance(config, EngineConfig):
            raise EngineError("Give the engine's settings by name, e.g. Engine(lm, block_size=16), "
                              "or as an EngineConfig.")
        try:
            config = (config or EngineConfig()).with_overrides(**overrides)
            config.validate()
        except (ValueError, TypeError) as error:
            raise EngineError(str(error)) from None
        self.config = config
        self.model, self.tokenizer, self.max_context = model_parts(lm)  # a LoadedModel or a bare model
        self.device = next(self.model.parameters()).device
        self.hf_config = self.model.config.get_text_config()
        self.vocab_size = self.model.get_output_embeddings().weight.shape[0]
        self.eos_token_ids = eos_token_ids(self.model)
        self.block_size = config.block_size
        self.use_cache = config.use_cache
        self.record_blocks = config.record_blocks
        install(self.model)
        num_mla_layers = mla.install(self.model)  # DeepSeek-V3: its attention caches latent rows
        self.cache_shape = CacheShape.from_model(self.model, config.kv_cache_dtype)  # its bytes size the pool
        if self.cache_shape.latent and num_mla_layers != self.cache_shape.num_layers:
            raise EngineError(f"This {type(self.model).__name__} has multi-head latent attention (kv_lora_rank) "
                              "but not DeepSeek-V3's attention layers, the only MLA kvviz can cache; "
                              "load a DeepseekV3ForCausalLM model, or one without MLA.")
        # cache_setup.py: a pool sized from free memory (or num_blocks), its cache tensors, one pool per layer
        # group (layer_groups.py: one per distinct sliding window, full attention first) and the swap space
        self.num_blocks, self.pool, self.cache, self.kv, self.layer_groups = set_up_cache(
            config, self.cache_shape, self.hf_config, self.max_context, self.device)
        self.attention_kernel = pick_attention_kernel(config, self.cache_shape, self.cache, self.device)
        self.scheduler = Scheduler(self.kv, config.max_num_seqs, config.max_num_batched_tokens,
                                   config.enable_chunked_prefill)
        self.requests: dict[int, Request] = {}
        self.trace_request_id: int | None = None
        self.step_index = 0
        self._next_id = 0
        self._finished_now: list[Request] = []  # finished since the last record
        self.stats = {"prompt_tokens": 0, "generated_tokens": 0, "cached_tokens": 0,
                      "peak_blocks": 0, "forward_s": 0.0, "draft_tokens": 0, "accepted_tokens": 0,
                      "kernel_steps": 0}  # steps whose attention ran in the compiled kernel
        if self.layer_groups:  # the most blocks each layer group held at once
            self.stats["peak_blocks_by_group"] = [0] * len(self.layer_groups)

    # ---- requests ------------------------------------------------------------------------
    def add_request(self, prompt: str | list[int], params: SamplingParams | None = None,
                    trace: bool = False) -> int:
        """Queue a prompt (text or token ids); returns its request id. Refuses what cannot run."""
        params = params or SamplingParams()
        token_ids = self.check_request(prompt, params)
        request = Request(self._next_id, token_ids, params, arrival=self.step_index)
        self._next_id += 1
        self.requests[request.request_id] = request
        self.scheduler.add(request)
        self.stats["prompt_tokens"] += len(token_ids)
        if trace:
            self.trace_request_id = request.request_id
        return request.request_id

    def check_request(self, prompt: str | list[int], params: SamplingParams) -> list[int]:
        """Tokenize and validate a request without queueing it (prompts.py); raises EngineError."""
        return checked_token_ids(self, prompt, params)

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    def abort(self, request_id: int, reason: str = "abort") -> None:
        """Stop a request now and free its blocks; its output so far stays readable."""
        request = self.requests[request_id]
        for sample_id in request.sample_ids:  # its forked samples too
            self.abort(sample_id, reason)
        if not request.is_finished:
            self._finish(request, reason)

    # ---- one step ------------------------------------------------------------------------
    def step(self) -> StepRecord:
        """Schedule, run one forward pass, sample, and report what happened.

        If anything in the step raises, the requests it ran are finished with finish_reason
        "error" and their blocks freed, so the engine stays usable; the error is raised as an
        EngineError.
        """
        start = time.perf_counter()
        if self.device.type == "cpu":  # on the cores other processes leave free (cpu/threads.py)
            cpu_share.apply()
        chunks, forward_s, sampled, trace, drafts = [], 0.0, [], None, []
        try:
            if self.config.speculative_tokens:  # prompt lookup proposes drafts for this step to verify
                set_drafts(self.scheduler.running, self.config.speculative_tokens, self.config.prompt_lookup_max,
                           self.config.prompt_lookup_min, self.max_context)
            chunks = self.scheduler.schedule()  # which requests run, and how many of their tokens
            if chunks:
                batch = build_step_batch(chunks, self.cache, self.block_size, self.device, self.trace_request_id,
                                         self.attention_kernel, self.layer_groups)  # slot mapping, block tables
                logits, forward_s = run_forward(self.model, batch)  # (R, V): 1 + drafts rows per sampling chunk
                self.stats["forward_s"] += forward_s
                self.stats["kernel_steps"] += int(batch.kernel is not None)
                sampled, trace, drafts = self._sample(chunks, logits, batch.trace)
        except BaseException as error:  # Ctrl-C too: never leave half-written blocks in the cache
            self._fail(chunks, error)  # finishes the step's requests, then raises
        self._count_peak_blocks()
        finished, self._finished_now = self._finished_now, []
        record = step_record(self, chunks, sampled, forward_s, time.perf_counter() - start, trace, drafts, finished)
        self.step_index += 1
        return record

    def _sample(self, chunks: list[ScheduledChunk], logits, step_trace: Trace | None):
        """Each sampling chunk's next token from its row of logits (R, V), its drafts accepted or
        rolled back, the tokens appended: (sampled (request id, token) pairs, trace, drafts)."""
        sampling_chunks = [c for c in chunks if c.samples]
        bad = non_finite_rows(logits)  # every row a token or a draft's verdict would come from
        if bad:
            raise NonFiniteLogits(logits[bad[0]])
        last_logits, rows = last_rows(logits, [c.num_drafts for c in sampling_chunks])  # (S, V)
        sampling_chunks, last_logits, rows = fork_samples(self, sampling_chunks, last_logits, rows)  # n > 1
        tokens = sample(last_logits, [c.request.params for c in sampling_chunks],
                        [c.request.generator for c in sampling_chunks])
        if self.use_cache:
            for chunk in chunks:
                chunk.request.advance(chunk.end)
        trace = None
        if step_trace is not None:
            trace = trace_record(step_trace, self.trace_request_id, last_logits, sampling_chunks)
        sampled, drafts = [], []
        for chunk, row, token in zip(sampling_chunks, rows, tokens):
            request, new_tokens = chunk.request, [token]
            if chunk.num_drafts:  # greedy: the argmax after the last token and after each draft
                new_tokens = accept(chunk.draft_token_ids, logits[row - chunk.num_drafts:row + 1].argmax(-1).tolist())
                drafts.append(self._roll_back(chunk, num_accepted=len(new_tokens) - 1))
            for token in new_tokens:  # up to a stop token, max_tokens or the end of the context
                if not request.is_finished:
                    sampled.append((request.request_id, token))
                    self._append_token(request, token)
        return sampled, trace, drafts

    def _roll_back(self, chunk: ScheduledChunk, num_accepted: int) -> DraftRecord:
        """Forget the rejected drafts' keys and values: the request's cache ends after its accepted
        drafts, and blocks that held only rejected ones go back to the pool."""
        request = chunk.request
        kept = chunk.end - chunk.num_drafts + num_accepted  # the old tokens and the accepted drafts
        rejected_slots = slots_for(request.block_table, kept, chunk.end, self.block_size)
        freed = self.kv.truncate(request, kept)
        self.stats["draft_tokens"] += chunk.num_drafts
        self.stats["accepted_tokens"] += num_accepted
        return DraftRecord(request.request_id, list(chunk.draft_token_ids), num_accepted, rejected_slots, freed)

    def _append_token(self, request: Request, token: int) -> None:
        request.output_token_ids.append(token)
        self.stats["generated_tokens"] += 1
        params = request.params
        if token in params.stop_token_ids or (not params.ignore_eos and token in self.eos_token_ids):
            self._finish(request, "stop")
        elif len(request.output_token_ids) >= params.max_tokens:
            self._finish(request, "length")
        elif request.num_tokens >= self.max_context:
            self._finish(request, "context_full")

    def _finish(self, request: Request, reason: str) -> None:
        self.scheduler.finish(request, reason)
        self.stats["cached_tokens"] += request.num_cached_tokens
        self._finished_now.append(request)

    def _fail(self, chunks: list[ScheduledChunk], error: BaseException) -> None:
        """A step raised: finish its requests with finish_reason "error", free their blocks, and raise."""
        failed = [c.request for c in chunks] or list(self.scheduler.running)
        for request in failed:
            if not request.is_finished:
                if self.kv is not None:
                    self.kv.uncache_unwritten(request)
                self._finish(request, "error")
        self.step_index += 1
        if not isinstance(error, Exception):
            raise error
        if isinstance(error, NonFiniteLogits):
            raise EngineError(f"The model's logits in step {self.step_index - 1} are {error.what}, so no "
                              f"token can be chosen: the step's {len(failed)} requests were stopped with "
                              "finish_reason 'error' and their blocks freed; check the weights for NaN, or "
                              "load the model in float32 if float16 overflowed.") from None
        raise EngineError(f"Step {self.step_index - 1} failed ({type(error).__name__}: {error}); its "
                          f"{len(failed)} requests were finished with finish_reason 'error' and their "
                          "blocks freed, and the engine can take new requests.") from error

    def _count_peak_blocks(self) -> None:
        """The most blocks in use at once, in the pool and in each layer group's."""
        if self.use_cache:
            self.stats["peak_blocks"] = max(self.stats["peak_blocks"], self.pool.num_used_blocks)
            if self.layer_groups:
                peaks = self.stats["peak_blocks_by_group"]
                for g, group in enumerate(self.layer_groups):
                    peaks[g] = max(peaks[g], group.pool.num_used_blocks)

    # ---- generate ------------------------------------------------------------------------
    def generate(self, prompts: list[str] | list[list[int]],
                 params: SamplingParams | list[SamplingParams] | None = None,
                 progress=None) -> list[RequestOutput]:
        """Run prompts to completion; outputs come back in the prompts' order, one per prompt.

        prompts is a list (of texts or of token-id lists); a bare string is refused, not split
        into characters. If any prompt is refused, or a step fails, nothing of this call stays queued.

        A prompt with SamplingParams(n=k) is prefilled once and forks into k samples; its one
        RequestOutput lists them all in `.samples` / `.texts` (`.token_ids` is sample 0's).

        progress: an optional callable(num_finished, num_total, record) called after each step.
        """
        if not isinstance(prompts, (list, tuple)):
            if isinstance(prompts, str):
                raise EngineError("generate takes a list of prompts, not one string (it would be read as one "
                                  f"prompt per character); pass [{prompts!r:.40}] for one prompt.")
            raise EngineError(f"generate takes a list of prompts, not {prompts!r:.40}; pass a list such as "
                              "[\"ROMEO:\"], or [[1, 2, 3]] for token ids.")
        params = params or SamplingParams()
        per_prompt = params if isinstance(params, list) else [params] * len(prompts)
        if len(per_prompt) != len(prompts):
            raise EngineError(f"Got {len(per_prompt)} sampling params for {len(prompts)} prompts; "
                              "give one, or one per prompt.")
        for prompt, sampling in zip(prompts, per_prompt):  # refuse before queueing any
            self.check_request(prompt, sampling)
        ids, finished = [], 0
        try:
            for prompt, sampling in zip(prompts, per_prompt):
                ids.append(self.add_request(prompt, sampling))
            while self.has_unfinished():
                record = self.step()
                finished += sum(r.status == "finished" and r.parent_id is None for r in record.requests)
                if progress is not None:
                    progress(finished, len(ids), record)
        except BaseException:  # a failed step or Ctrl-C: leave nothing of this call queued
            for request_id in ids:
                self.abort(request_id)
            raise
        return [self.output(i) for i in ids]

    def output(self, request_id: int) -> RequestOutput:
        request = self.requests[request_id]
        samples = [list(r.output_token_ids) for r in [request] + [self.requests[i] for i in request.sample_ids]]
        texts = [self.tokenizer.decode(ids) for ids in samples] if self.tokenizer is not None else None
        return RequestOutput(request_id, request.prompt_token_ids, samples[0], texts[0] if texts else None,
                             request.finish_reason, request.num_cached_tokens, request.num_preemptions,
                             samples, texts)

    def memory(self) -> MemoryRecord:
        """The cache's bytes now (recording.py): allocated, in used blocks, holding tokens, slack."""
        return memory_record(self)
