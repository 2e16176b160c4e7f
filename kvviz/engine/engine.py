"""The engine: add requests, step, generate. One engine serves a lesson and a batch job.

    engine = Engine(load_model("bundled"))
    outs = engine.generate(["ROMEO:"], SamplingParams(max_tokens=32))
    rid = engine.add_request("JULIET:", SamplingParams(max_tokens=8), trace=True)
    record = engine.step()     # a StepRecord: what ran, what was sampled, blocks, bytes, K/V
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from kvviz.engine.batch import build_step_batch
from kvviz.engine.block_pool import BlockPool
from kvviz.engine.kv_cache import CacheShape, PagedKVCache
from kvviz.engine.records import (BlockRecord, ChunkRecord, EventRecord, MemoryRecord,
                                  RequestRecord, StepRecord, TraceRecord)
from kvviz.engine.request import Request
from kvviz.engine.runner import install, run_forward
from kvviz.engine.sampling import SamplingParams, sample
from kvviz.engine.scheduler import Scheduler, blocks_needed


class EngineError(ValueError):
    """A request or setting the engine refuses; the message says what to do."""


@dataclass(slots=True)
class RequestOutput:
    request_id: int
    prompt_token_ids: list[int]
    token_ids: list[int]  # generated tokens only
    text: str | None
    finish_reason: str | None
    num_cached_tokens: int
    num_preemptions: int


class Engine:
    def __init__(self, lm, block_size: int = 16, num_blocks: int | None = None,
                 enable_prefix_caching: bool = True, max_num_seqs: int = 64,
                 max_num_batched_tokens: int = 2048, *, use_cache: bool = True,
                 enable_chunked_prefill: bool = True, record_blocks: bool = True,
                 memory_fraction: float = 0.9):
        if not isinstance(lm, torch.nn.Module):  # a LoadedModel from kvviz.load_model
            self.model, self.tokenizer, self.max_context = lm.model, lm.tokenizer, lm.max_context
        else:  # a bare PreTrainedModel: prompts must be token ids
            self.model, self.tokenizer = lm, None
            config = lm.config.get_text_config()
            self.max_context = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", 2048)
        if block_size < 1 or max_num_seqs < 1 or max_num_batched_tokens < 1:
            raise EngineError("block_size, max_num_seqs and max_num_batched_tokens must all be at least 1.")
        self.device = next(self.model.parameters()).device
        self.config = self.model.config.get_text_config()
        self.vocab_size = self.model.get_output_embeddings().weight.shape[0]
        self.eos_token_ids = self._eos_ids()
        self.block_size = block_size
        self.use_cache = use_cache
        self.record_blocks = record_blocks
        install(self.model)
        self.cache_shape = CacheShape.from_model(self.model)
        if use_cache:
            if num_blocks is None:
                num_blocks = self._blocks_that_fit(max_num_seqs, memory_fraction)
            if num_blocks < 1:
                raise EngineError(f"The pool needs at least one block, not {num_blocks}.")
            self.pool = BlockPool(num_blocks, block_size, enable_prefix_caching)
            self.cache = PagedKVCache(self.cache_shape, num_blocks, block_size, self.device)
        else:
            self.pool, self.cache = None, None
        self.num_blocks = num_blocks if use_cache else 0
        self.scheduler = Scheduler(self.pool, max_num_seqs, max_num_batched_tokens,
                                   use_cache, enable_chunked_prefill)
        self.requests: dict[int, Request] = {}
        self.trace_request_id: int | None = None
        self.step_index = 0
        self._next_id = 0
        self.stats = {"prompt_tokens": 0, "generated_tokens": 0, "cached_tokens": 0,
                      "peak_blocks": 0, "forward_s": 0.0}

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
        if isinstance(params.max_tokens, bool) or not isinstance(params.max_tokens, int):
            raise EngineError(f"max_tokens must be a whole number of tokens, not {params.max_tokens!r}.")
        try:
            params.validate()
        except (TypeError, ValueError) as error:  # TypeError: a setting of the wrong type, such as None
            raise EngineError(str(error)) from None
        token_ids = self._tokenize(prompt)
        if len(token_ids) >= self.max_context:
            raise EngineError(f"The prompt has {len(token_ids)} tokens but the model's context holds "
                              f"{self.max_context}; shorten the prompt so there is room to generate.")
        if self.use_cache:
            most_tokens = min(len(token_ids) + params.max_tokens, self.max_context)
            needed = blocks_needed(most_tokens, self.block_size)
            if needed > self.num_blocks:
                raise EngineError(
                    f"This request needs up to {needed} blocks of {self.block_size} tokens but the pool "
                    f"has only {self.num_blocks}; enlarge the pool or ask for fewer tokens.")
        return token_ids

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    # ---- one step ------------------------------------------------------------------------
    def step(self) -> StepRecord:
        """Schedule, run one forward pass, sample, and report what happened."""
        start = time.perf_counter()
        chunks = self.scheduler.schedule()
        forward_s, sampled = 0.0, []
        trace = None
        if chunks:
            batch = build_step_batch(chunks, self.cache, self.block_size, self.device,
                                     self.trace_request_id)
            logits, forward_s = run_forward(self.model, batch)
            self.stats["forward_s"] += forward_s
            sampling_chunks = [c for c in chunks if c.samples]
            tokens = sample(logits, [c.request.params for c in sampling_chunks],
                            [c.request.generator for c in sampling_chunks])
            for chunk in chunks:
                if self.use_cache:
                    chunk.request.num_computed_tokens = chunk.end
            if batch.trace is not None:
                trace = self._trace_record(batch.trace, logits, sampling_chunks)
            for chunk, token in zip(sampling_chunks, tokens):
                sampled.append((chunk.request.request_id, token))
                self._append_token(chunk.request, token)
        if self.use_cache:
            self.stats["peak_blocks"] = max(self.stats["peak_blocks"], self.pool.num_used_blocks)
        record = self._record(chunks, sampled, forward_s, time.perf_counter() - start, trace)
        self.step_index += 1
        return record

    def _append_token(self, request: Request, token: int) -> None:
        request.output_token_ids.append(token)
        self.stats["generated_tokens"] += 1
        params = request.params
        if token in params.stop_token_ids or (not params.ignore_eos and token in self.eos_token_ids):
            self.scheduler.finish(request, "stop")
        elif len(request.output_token_ids) >= params.max_tokens:
            self.scheduler.finish(request, "length")
        elif request.num_tokens >= self.max_context:
            self.scheduler.finish(request, "context_full")
        if request.is_finished:
            self.stats["cached_tokens"] += request.num_cached_tokens

    # ---- generate ------------------------------------------------------------------------
    def generate(self, prompts: list[str] | list[list[int]],
                 params: SamplingParams | list[SamplingParams] | None = None,
                 progress=None) -> list[RequestOutput]:
        """Run prompts to completion; outputs come back in the prompts' order.

        progress: an optional callable(num_finished, num_total, record) called after each step.
        """
        params = params or SamplingParams()
        per_prompt = params if isinstance(params, list) else [params] * len(prompts)
        if len(per_prompt) != len(prompts):
            raise EngineError(f"Got {len(per_prompt)} sampling params for {len(prompts)} prompts; "
                              "give one, or one per prompt.")
        for prompt, sampling in zip(prompts, per_prompt):  # refuse before queueing any
            self.check_request(prompt, sampling)
        ids = [self.add_request(p, sp) for p, sp in zip(prompts, per_prompt)]
        finished = 0
        while self.has_unfinished():
            record = self.step()
            finished += sum(r.status == "finished" for r in record.requests)
            if progress is not None:
                progress(finished, len(ids), record)
        return [self.output(i) for i in ids]

    def output(self, request_id: int) -> RequestOutput:
        request = self.requests[request_id]
        text = self.tokenizer.decode(request.output_token_ids) if self.tokenizer is not None else None
        return RequestOutput(request_id, request.prompt_token_ids, list(request.output_token_ids), text,
                             request.finish_reason, request.num_cached_tokens, request.num_preemptions)

    # ---- memory --------------------------------------------------------------------------
    def memory(self) -> MemoryRecord:
        shape = self.cache_shape
        if not self.use_cache:
            return MemoryRecord(0, 0, 0, 0, [0] * shape.num_layers, shape.bytes_per_token)
        block_bytes = self.cache.bytes_per_block
        used_blocks = self.pool.num_used_blocks
        running = self.scheduler.running
        # shared prefix blocks count once: bytes holding tokens = used blocks minus empty slots
        slack_slots = sum(len(r.block_table) * self.block_size - r.num_computed_tokens for r in running
                          if r.block_table and self.pool.blocks[r.block_table[-1]].ref_cnt == 1)
        used_bytes = used_blocks * block_bytes
        per_layer = used_blocks * block_bytes // shape.num_layers
        return MemoryRecord(
            allocated_bytes=self.cache.nbytes, used_block_bytes=used_bytes,
            token_bytes=used_bytes - slack_slots * shape.bytes_per_token,
            slack_bytes=slack_slots * shape.bytes_per_token,
            layer_used_bytes=[per_layer] * shape.num_layers, bytes_per_token=shape.bytes_per_token)

    # ---- records -------------------------------------------------------------------------
    def _record(self, chunks, sampled, forward_s, step_s, trace) -> StepRecord:
        touched = {c.request.request_id for c in chunks}
        requests = [r for r in self.requests.values()
                    if not r.is_finished or r.request_id in touched]
        events = self.pool.drain_events() if self.pool is not None else []
        blocks = None
        if self.record_blocks and self.pool is not None:
            blocks = [BlockRecord(b.block_id, b.ref_cnt, sorted(b.owners), b.block_hash is not None,
                                  b.ref_cnt == 0) for b in self.pool.blocks]
        return StepRecord(
            step=self.step_index,
            chunks=[ChunkRecord(c.request.request_id, c.kind, c.start, c.num_tokens,
                                c.request.all_token_ids[c.start:c.end]) for c in chunks],
            sampled=sampled,
            requests=[RequestRecord(r.request_id, r.status.value, r.num_prompt_tokens,
                                    r.num_computed_tokens if self.use_cache else 0,
                                    r.num_cached_tokens, list(r.block_table), list(r.output_token_ids),
                                    r.num_preemptions, r.finish_reason) for r in requests],
            events=[EventRecord(e.kind, e.request_id, e.block_ids) for e in events],
            num_free_blocks=self.pool.num_free_blocks if self.pool else 0,
            num_cached_blocks=len(self.pool.cached_blocks) if self.pool else 0,
            memory=self.memory(), blocks=blocks, forward_s=forward_s, step_s=step_s, trace=trace)

    def _trace_record(self, trace, logits, sampling_chunks) -> TraceRecord:
        row = next((i for i, c in enumerate(sampling_chunks)
                    if c.request.request_id == self.trace_request_id), None)
        return TraceRecord(
            request_id=self.trace_request_id,
            keys=torch.stack(trace.keys).numpy(),  # (layers, tokens, kv_heads, head_dim)
            values=torch.stack(trace.values).numpy(),
            attention=torch.stack(trace.attention).numpy(),  # (layers, heads, tokens)
            logits=None if row is None else logits[row].float().cpu().numpy().astype(np.float32),
            prompt_attention=torch.stack(trace.prompt_attention).numpy() if trace.prompt_attention else None)

    # ---- helpers -------------------------------------------------------------------------
    def _tokenize(self, prompt) -> list[int]:
        if isinstance(prompt, str):
            if not prompt.strip():
                raise EngineError("The prompt is empty; type some text to start from.")
            if self.tokenizer is None:
                raise EngineError("This model has no tokenizer; give the prompt as a list of token ids.")
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
            eos = getattr(self.config, "eos_token_id", None)
        if eos is None:
            return set()
        return set(eos) if isinstance(eos, (list, tuple)) else {int(eos)}

    def _blocks_that_fit(self, max_num_seqs: int, memory_fraction: float) -> int:
        """Size the pool from free memory, but no larger than max_num_seqs full contexts."""
        from kvviz.models import available_memory_bytes

        block_bytes = self.block_size * self.cache_shape.bytes_per_token
        by_memory = int(available_memory_bytes(self.device) * memory_fraction * 0.5) // block_bytes
        by_need = max_num_seqs * blocks_needed(self.max_context, self.block_size)
        return max(1, min(by_memory, by_need))
