"""Parallel sampling: one prompt, n samples that share its blocks until they write.

The prompt is prefilled once. When its first token is sampled the request forks: n - 1 new
samples take a reference to every one of its blocks (`kv.fork`, no copy), and all n draw their
first token from the same row of logits, sample i with seed + i. From then on each sample
decodes alone; the first write into a shared, partly filled block copies that block first
(copy-on-write, in the KV manager).
"""

from __future__ import annotations

import dataclasses

import torch

from kvviz.engine.request import Request
from kvviz.engine.scheduler import ScheduledChunk


def fork_samples(engine, sampling_chunks: list[ScheduledChunk], logits: torch.Tensor,
                 rows: list[int]) -> tuple[list[ScheduledChunk], torch.Tensor, list[int]]:
    """Each chunk whose request forks now becomes n chunks, its row of logits repeated.

    logits: (R, V), one row per sampling chunk -> (R', V), one row per returned chunk; rows (the
    chunks' rows in the step's full logits, for speculative decoding) are repeated alike.
    """
    if not any(chunk.request.wants_fork for chunk in sampling_chunks):
        return sampling_chunks, logits, rows
    chunks, picks = [], []
    for index, chunk in enumerate(sampling_chunks):
        family = [chunk]
        if chunk.request.wants_fork:
            samples = [fork_request(engine, chunk.request, i, chunk.end) for i in range(1, chunk.request.params.n)]
            family += [ScheduledChunk(sample, chunk.start, chunk.num_tokens) for sample in samples]
        chunks += family
        picks += [index] * len(family)
    return chunks, logits[torch.tensor(picks, device=logits.device)], [rows[i] for i in picks]  # (R', V)


def fork_request(engine, parent: Request, index: int, num_computed_tokens: int) -> Request:
    """Sample `index` of `parent`: its prompt, its blocks (shared), seed + index, running now."""
    seed = None if parent.params.seed is None else parent.params.seed + index
    params = dataclasses.replace(parent.params, n=1, seed=seed)
    sample = Request(engine._next_id, parent.prompt_token_ids, params, arrival=engine.step_index)
    engine._next_id += 1
    sample.parent_id = parent.request_id
    sample.status = parent.status
    sample.num_cached_tokens = parent.num_cached_tokens
    sample.num_looked_up_tokens, sample.num_hit_tokens = parent.num_looked_up_tokens, parent.num_hit_tokens
    if engine.kv is not None:
        sample.num_computed_tokens = sample.high_water = num_computed_tokens
        engine.kv.fork(parent, sample)
    parent.sample_ids.append(sample.request_id)
    engine.requests[sample.request_id] = sample
    engine.scheduler.running.append(sample)
    return sample
