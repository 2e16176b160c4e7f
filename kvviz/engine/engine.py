"""The engine: add requests, step, generate. One engine serves a lesson and a batch job.

    engine = Engine(load_model("bundled"))
    outs = engine.generate(["ROMEO:"], SamplingParams(max_tokens=32))
    rid = engine.add_request("JULIET:", SamplingParams(max_tokens=8), trace=True)
    record = engine.step()     # a StepRecord: what ran, what was sampled, blocks, bytes, K/V
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from kvviz.engine import mla
from kvviz.engine.batch import build_step_batch
from kvviz.engine.block_pool import BLOCK_BOOKKEEPING_BYTES, BlockPool
from kvviz.engine.config import MAX_NUM_BLOCKS, EngineConfig
from kvviz.engine.cpu import kernels as cpu_kernels
from kvviz.engine.fork import fork_samples
from kvviz.engine.kv_cache import CacheShape, PagedKVCache, slots_for
from kvviz.engine.kv_manager import KVCacheManager, blocks_needed
from kvviz.engine.layer_groups import layer_windows, make_groups, pool_sizes
from kvviz.engine.model_parts import model_parts
from kvviz.engine.records import (
    BlockRecord,
    ChunkRecord,
    DraftRecord,
    EventRecord,
    LayerGroupRecord,
    MemoryRecord,
    RequestRecord,
    StepRecord,
    TraceRecord,
)
from kvviz.engine.request import Request
from kvviz.engine.runner import install, run_forward
from kvviz.engine.sampling import SamplingParams, non_finite_rows, sample
from kvviz.engine.scheduler import ScheduledChunk, Scheduler
from kvviz.engine.speculative import accept, last_rows, set_drafts
from kvviz.engine.swap import SWAP_SLOT_BOOKKEEPING_BYTES, SwapSpace
from kvviz.memory_bill import format_bytes
from kvviz.models import available_memory_bytes


class EngineError(ValueError):
    """A request or setting the engine refuses; the message says what to do."""


class NonFiniteLogits(ArithmeticError):
    """A step's logits hold NaN or +inf, or a row has no finite logit: nothing can be sampled."""

    def __init__(self, row):
        self.what = "NaN" if bool(row.isnan().any()) else "infinite" if bool(row.isposinf().any()) else "all -inf"
        super().__init__(f"logits are {self.what}")


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
            raise EngineError("Give the engine's settings by name, e.g. Engine(lm, block_size=16), or as an EngineConfig.")
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
        self.eos_token_ids = self._eos_ids()
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
        self.pool, self.cache, self.kv, self.num_blocks = None, None, None, 0
        self.layer_groups = []  # layer_groups.py: one per distinct sliding window, full attention first
        if config.use_cache:
            self.num_blocks = config.num_blocks or self._blocks_that_fit(config.max_num_seqs, config.memory_fraction)
            windows = layer_windows(self.hf_config)
            if config.preemption_mode == "swap" and any(w is not None for w in windows):
                raise EngineError("Preemption mode 'swap' moves one block table per request, but this model's "
                                  "sliding-window layers keep a table of their own; use preemption_mode='recompute'.")
            if len(set(windows)) == 1 and windows[0] is None:  # every layer sees the whole context
                self._check_sizes()  # before allocating anything
                self.pool = BlockPool(self.num_blocks, config.block_size, config.enable_prefix_caching)
                self.cache = PagedKVCache(self.cache_shape, self.num_blocks, config.block_size, self.device)
            else:  # the bytes of num_blocks blocks, shared out between the groups' pools
                whole_contexts = config.max_num_seqs * blocks_needed(self.max_context, self.block_size)
                most_blocks = min(whole_contexts, MAX_NUM_BLOCKS)
                sizes = pool_sizes(windows, self.num_blocks, config.block_size, config.max_num_seqs,
                                   config.max_num_batched_tokens, most_blocks)
                self._check_sizes(sum(sizes))
                self.layer_groups = make_groups(windows, self.num_blocks, config.block_size,
                                                config.enable_prefix_caching, sizes)
                self.pool = self.layer_groups[0].pool
                split = None if set(sizes) == {self.num_blocks} else [(g.layers, g.pool.num_blocks)
                                                                      for g in self.layer_groups]
                self.cache = PagedKVCache(self.cache_shape, self.num_blocks, config.block_size, self.device, split)
            swap = None
            if config.preemption_mode == "swap":
                swap = SwapSpace(self.cache_shape, config.swap_space_blocks or self.num_blocks, config.block_size)
            self.kv = KVCacheManager(self.pool, self.cache, swap, self.layer_groups or None)
        self.attention_kernel = self._pick_attention_kernel()
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
        """Tokenize and validate a request without queueing it; raises EngineError."""
        if not isinstance(params, SamplingParams):
            raise EngineError(f"Sampling settings must be a SamplingParams, not {type(params).__name__}; "
                              "write one such as SamplingParams(max_tokens=32).")
        try:
            params.validate(max_num_seqs=self.config.max_num_seqs)
        except ValueError as error:
            raise EngineError(str(error)) from None
        token_ids = self._tokenize(prompt)
        if len(token_ids) >= self.max_context:
            raise EngineError(f"The prompt has {len(token_ids)} tokens but the model's context holds "
                              f"{self.max_context}; shorten the prompt so there is room to generate.")
        budget = self.config.max_num_batched_tokens
        if self.use_cache and not self.config.enable_chunked_prefill and len(token_ids) > budget:
            raise EngineError(f"The prompt has {len(token_ids)} tokens but a step runs at most {budget} and "
                              "chunked prefill is off; raise max_num_batched_tokens or turn chunked prefill on.")
        if self.use_cache:
            most_tokens = min(len(token_ids) + params.max_tokens, self.max_context)
            needed = blocks_needed(most_tokens, self.block_size)
            if needed > self.pool.num_blocks:  # the full group's pool, with layer groups: the largest
                raise EngineError(
                    f"This request needs up to {needed} blocks of {self.block_size} tokens but the pool "
                    f"has only {self.pool.num_blocks}; enlarge the pool or ask for fewer tokens.")
        return token_ids

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
        chunks: list = []
        try:
            if self.config.speculative_tokens:
                set_drafts(self.scheduler.running, self.config.speculative_tokens, self.config.prompt_lookup_max,
                           self.config.prompt_lookup_min, self.max_context)
            chunks = self.scheduler.schedule()
            forward_s, sampled, trace, drafts = self._run(chunks)
        except BaseException as error:  # Ctrl-C too: never leave half-written blocks in the cache
            failed = [c.request for c in chunks] or list(self.scheduler.running)
            for request in failed:
                if not request.is_finished:
                    if self.kv is not None:
                        self.kv.uncache_unwritten(request)
                    self._finish(request, "error")
            self.step_index += 1
            if not isinstance(error, Exception):
                raise
            if isinstance(error, NonFiniteLogits):
                raise EngineError(f"The model's logits in step {self.step_index - 1} are {error.what}, so no "
                                  f"token can be chosen: the step's {len(failed)} requests were stopped with "
                                  "finish_reason 'error' and their blocks freed; check the weights for NaN, or "
                                  "load the model in float32 if float16 overflowed.") from None
            raise EngineError(f"Step {self.step_index - 1} failed ({type(error).__name__}: {error}); its "
                              f"{len(failed)} requests were finished with finish_reason 'error' and their "
                              "blocks freed, and the engine can take new requests.") from error
        if self.use_cache:
            self.stats["peak_blocks"] = max(self.stats["peak_blocks"], self.pool.num_used_blocks)
            if self.layer_groups:
                peaks = self.stats["peak_blocks_by_group"]
                for g, group in enumerate(self.layer_groups):
                    peaks[g] = max(peaks[g], group.pool.num_used_blocks)
        record = self._record(chunks, sampled, forward_s, time.perf_counter() - start, trace, drafts)
        self.step_index += 1
        return record

    def _run(self, chunks):
        """The forward pass and sampling of one step: (forward seconds, sampled pairs, trace, drafts)."""
        if not chunks:
            return 0.0, [], None, []
        batch = build_step_batch(chunks, self.cache, self.block_size, self.device, self.trace_request_id,
                                 self.attention_kernel, self.layer_groups)
        logits, forward_s = run_forward(self.model, batch)  # (R, V): 1 + drafts rows per sampling chunk
        self.stats["forward_s"] += forward_s
        self.stats["kernel_steps"] += int(batch.kernel is not None)
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
        trace = self._trace_record(batch.trace, last_logits, sampling_chunks) if batch.trace is not None else None
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
        return forward_s, sampled, trace, drafts

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

    # ---- memory --------------------------------------------------------------------------
    def memory(self) -> MemoryRecord:
        shape = self.cache_shape
        if not self.use_cache:
            return MemoryRecord(0, 0, 0, 0, [0] * shape.num_layers, shape.bytes_per_token, shape.kv_cache_dtype)
        block_bytes = self.cache.bytes_per_block
        running = self.scheduler.running
        if self.layer_groups:
            return self._grouped_memory(running)
        used_blocks = self.pool.num_used_blocks
        # shared blocks count once: bytes holding tokens = used blocks minus the empty slots of
        # each distinct last block (forked samples share theirs until one writes)
        slack_by_block = {r.block_table[-1]: len(r.block_table) * self.block_size - r.num_computed_tokens
                          for r in running if r.block_table}
        slack_slots = sum(slack_by_block.values())
        used_bytes = used_blocks * block_bytes
        per_layer = used_blocks * block_bytes // shape.num_layers
        return MemoryRecord(
            allocated_bytes=self.cache.nbytes, used_block_bytes=used_bytes,
            token_bytes=used_bytes - slack_slots * shape.bytes_per_token,
            slack_bytes=slack_slots * shape.bytes_per_token,
            layer_used_bytes=[per_layer] * shape.num_layers, bytes_per_token=shape.bytes_per_token,
            kv_cache_dtype=shape.kv_cache_dtype)

    def _grouped_memory(self, running) -> MemoryRecord:
        """memory() with layer groups: a block of a group holds only that group's layers, so a sliding
        layer's used bytes stop growing once its window is full."""
        shape = self.cache_shape
        layer_block_bytes = self.cache.bytes_per_block // shape.num_layers  # one block, one layer
        layer_token_bytes = shape.bytes_per_token // shape.num_layers
        layer_used_bytes = [0] * shape.num_layers
        slack_bytes = 0
        for g, group in enumerate(self.layer_groups):
            for layer in group.layers:
                layer_used_bytes[layer] = group.pool.num_used_blocks * layer_block_bytes
            slack_by_block = {r.block_tables[g][-1]: len(r.block_tables[g]) * self.block_size - r.num_computed_tokens
                              for r in running if r.block_tables[g]}
            slack_bytes += sum(slack_by_block.values()) * layer_token_bytes * len(group.layers)
        used_bytes = sum(layer_used_bytes)
        return MemoryRecord(
            allocated_bytes=self.cache.nbytes, used_block_bytes=used_bytes, token_bytes=used_bytes - slack_bytes,
            slack_bytes=slack_bytes, layer_used_bytes=layer_used_bytes, bytes_per_token=shape.bytes_per_token,
            kv_cache_dtype=shape.kv_cache_dtype)

    # ---- records -------------------------------------------------------------------------
    def _record(self, chunks, sampled, forward_s, step_s, trace, drafts) -> StepRecord:
        """What this step did. Its cost follows the live requests and the events, not the pool."""
        finished, self._finished_now = self._finished_now, []
        live = self.scheduler.running + [r for r in finished if r not in self.scheduler.running]
        requests = [self._request_record(r) for r in live] + [self._waiting_record(r) for r in self.scheduler.waiting]
        requests.sort(key=lambda r: r.request_id)
        events = self.pool.drain_events() if self.pool is not None else []
        event_records = [EventRecord(e.kind, e.request_id, e.block_ids, e.num_bytes, e.cpu_slots) for e in events]
        for g, group in enumerate(self.layer_groups[1:], start=1):  # the first group's pool is self.pool
            event_records += [EventRecord(e.kind, e.request_id, e.block_ids, e.num_bytes, e.cpu_slots, group=g)
                              for e in group.pool.drain_events()]
        blocks = None
        if self.record_blocks and self.pool is not None:  # the whole pool: O(num_blocks), off by default
            blocks = [BlockRecord(b.block_id, b.ref_cnt, sorted(b.owners), b.block_hash is not None,
                                  b.ref_cnt == 0) for b in self.pool.blocks]
        return StepRecord(
            step=self.step_index,
            chunks=[ChunkRecord(c.request.request_id, c.kind, c.start, c.num_tokens, c.token_ids, c.num_drafts)
                    for c in chunks],
            sampled=sampled, requests=requests,
            events=event_records,
            num_free_blocks=self.pool.num_free_blocks if self.pool else 0,
            num_cached_blocks=len(self.pool.cached_blocks) if self.pool else 0,
            memory=self.memory(), blocks=blocks, forward_s=forward_s, step_s=step_s, trace=trace, drafts=drafts,
            num_free_swap_slots=self.kv.swap.num_free_slots if self.kv and self.kv.swap else 0,
            layer_groups=[LayerGroupRecord(g.name, g.window, list(g.layers), g.pool.num_blocks, g.pool.num_free_blocks,
                                           len(g.pool.cached_blocks)) for g in self.layer_groups])

    def _request_record(self, r: Request) -> RequestRecord:
        return RequestRecord(r.request_id, r.status.value, r.num_prompt_tokens,
                             r.num_computed_tokens if self.use_cache else 0, r.num_cached_tokens,
                             list(r.block_table), list(r.output_token_ids), r.num_preemptions, r.finish_reason,
                             r.parent_id, r.num_recomputed_tokens, self.kv is not None and self.kv.is_swapped(r),
                             r.num_looked_up_tokens, r.num_hit_tokens,
                             [list(table) for table in r.block_tables] if self.layer_groups else [])

    def _waiting_record(self, r: Request) -> RequestRecord:
        """A waiting request changes only when it is preempted: reuse its record until then."""
        key = (r.num_preemptions, len(r.output_token_ids))
        if getattr(r, "record_key", None) != key:
            r.record_key, r.last_record = key, self._request_record(r)
        return r.last_record

    def _trace_record(self, trace, logits, sampling_chunks) -> TraceRecord:
        row = next((i for i, c in enumerate(sampling_chunks)
                    if c.request.request_id == self.trace_request_id), None)
        return TraceRecord(
            request_id=self.trace_request_id,
            keys=torch.stack(trace.keys).numpy(),  # (layers, tokens, kv_heads, head_dim)
            values=torch.stack(trace.values).numpy(),
            attention=torch.stack(trace.attention).numpy(),  # (layers, heads, tokens)
            logits=None if row is None else logits[row].float().cpu().numpy().astype(np.float32),
            prompt_attention=torch.stack(trace.prompt_attention).numpy() if trace.prompt_attention else None,
            latents=torch.stack(trace.latents).numpy() if trace.latents else None)  # MLA only

    # ---- helpers -------------------------------------------------------------------------
    def _tokenize(self, prompt) -> list[int]:
        if not isinstance(prompt, str) and not hasattr(prompt, "__len__"):
            raise EngineError(f"A prompt is text or a list of token ids, not {prompt!r:.40}; a list of token ids "
                              "goes inside the list of prompts, as in generate([[1, 2, 3]]).")
        if isinstance(prompt, str):
            if not prompt.strip():
                raise EngineError("The prompt is empty; type some text to start from.")
            if self.tokenizer is None:
                raise EngineError("This model has no tokenizer; give the prompt as a list of token ids.")
            if not prompt.isascii() and prompt.encode("utf-8", "surrogatepass").decode("utf-8", "ignore") != prompt:
                raise EngineError("The prompt holds a lone surrogate (\\ud800 to \\udfff), half of a character, which "
                                  "no tokenizer reads; give text of whole characters.")
            token_ids = self.tokenizer(prompt)["input_ids"]
        else:
            token_ids = prompt.tolist() if hasattr(prompt, "tolist") else list(prompt)  # a tensor or array too
            if not all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in token_ids):
                raise EngineError("Token ids must be whole numbers; give the prompt as text or a list of ints.")
            token_ids = [int(t) for t in token_ids]
        if not token_ids:
            raise EngineError("The prompt is empty; give at least one token.")
        bad = [t for t in token_ids if not 0 <= t < self.vocab_size]
        if bad:
            raise EngineError(f"Token id {bad[0]} is outside the vocabulary (0 to {self.vocab_size - 1}); "
                              "check that the ids come from this model's tokenizer.")
        return token_ids

    def _eos_ids(self) -> set[int]:
        eos = getattr(self.model.generation_config, "eos_token_id", None)
        if eos is None:
            eos = getattr(self.hf_config, "eos_token_id", None)
        if eos is None:
            return set()
        return set(eos) if isinstance(eos, (list, tuple)) else {int(eos)}

    def _pick_attention_kernel(self):
        """The compiled paged-attention kernel (engine/cpu/kernels.py) where it applies: a KV
        cache of a float32 model on the CPU, stored in float32, int8 or fp8 (the kernel decodes
        8-bit rows as it reads them, with their per-row scales: not "fp8_per_tensor"), head size a
        multiple of 8, K and V per head (not MLA's latent rows, engine/mla.py). Elsewhere, None:
        gather + SDPA."""
        shape = self.cache_shape
        if (self.config.attention != "auto" or self.cache is None or self.device.type != "cpu"
                or shape.dtype != torch.float32 or shape.storage_dtype not in cpu_kernels.CACHE_KINDS
                or (shape.quantized and not shape.row_scales) or shape.head_dim % 8 or shape.latent):
            return None
        return cpu_kernels.load()

    def _blocks_that_fit(self, max_num_seqs: int, memory_fraction: float) -> int:
        """Size the pool from free memory, but no larger than max_num_seqs full contexts."""
        block_bytes = self.block_size * self.cache_shape.bytes_per_token + BLOCK_BOOKKEEPING_BYTES
        by_memory = int(available_memory_bytes(self.device) * memory_fraction * 0.5) // block_bytes
        by_need = max_num_seqs * blocks_needed(self.max_context, self.block_size)
        return max(1, min(by_memory, by_need, MAX_NUM_BLOCKS))

    def _check_sizes(self, num_pool_blocks: int | None = None) -> None:
        """Refuse a pool or swap space that memory cannot hold (more than memory_fraction of what is
        free), before any of it is allocated. num_pool_blocks: the Block objects of every layer
        group's pool together (layer_groups.pool_sizes), when not num_blocks."""
        block_bytes = self.block_size * self.cache_shape.bytes_per_token
        pool_bytes = self.num_blocks * block_bytes  # layer groups share out these bytes, never more
        bookkeeping_bytes = (num_pool_blocks or self.num_blocks) * BLOCK_BOOKKEEPING_BYTES  # in host memory
        swap_slots = (self.config.swap_space_blocks or self.num_blocks) if self.config.preemption_mode == "swap" else 0
        swap_bytes = swap_slots * (block_bytes + SWAP_SLOT_BOOKKEEPING_BYTES)  # host memory too
        pool = f"A pool of {self.num_blocks:,} block{'s' * (self.num_blocks != 1)} of {self.block_size:,} tokens"
        if self.device.type == "cpu":  # one memory holds all three
            knobs = "num_blocks, block_size or swap_space_blocks" if swap_slots else "num_blocks or block_size"
            self._check_fits(pool + (f" and {swap_slots:,} swap slots" if swap_slots else ""),
                             pool_bytes + bookkeeping_bytes + swap_bytes, self.device, knobs)
        else:
            self._check_fits(pool, pool_bytes, self.device, "num_blocks or block_size")
            self._check_fits(f"The bookkeeping of {self.num_blocks:,} blocks and {swap_slots:,} swap slots",
                             bookkeeping_bytes + swap_bytes, torch.device("cpu"), "num_blocks or swap_space_blocks")

    def _check_fits(self, what: str, num_bytes: int, device: torch.device, knobs: str) -> None:
        free = available_memory_bytes(device)
        allowed = free * self.config.memory_fraction
        if num_bytes > allowed:
            raise EngineError(f"{what} would take {format_bytes(num_bytes)}, but memory_fraction "
                              f"{self.config.memory_fraction:g} of the {format_bytes(free)} free on {device.type} "
                              f"is {format_bytes(allowed)}; lower {knobs}.")
