"""A request: its tokens, how many of them have keys and values in the cache, and its blocks."""

from __future__ import annotations

import enum

import torch

from kvviz.engine.sampling import SamplingParams


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class Request:
    """One prompt being generated.

    `num_computed_tokens` counts the tokens whose keys and values are in the cache; the tokens
    after it still have to run through the model. `block_table[i]` is the physical block that
    holds the request's logical block i (tokens i*block_size .. (i+1)*block_size - 1).
    A model with sliding-window layers keeps one table per layer group (layer_groups.py):
    `block_tables[g]`, where `block_table` is `block_tables[0]` and a block the window has left
    behind is None.
    """

    def __init__(self, request_id: int, prompt_token_ids: list[int], params: SamplingParams,
                 arrival: int):
        self.request_id = request_id
        self.prompt_token_ids = list(prompt_token_ids)
        self.output_token_ids: list[int] = []
        self.params = params
        self.arrival = arrival
        self.status = Status.WAITING
        self.num_computed_tokens = 0
        self.num_cached_tokens = 0  # tokens found in the prefix cache at the last scheduling
        self.num_looked_up_tokens = 0  # every admission's tokens, looked up in the prefix cache
        self.num_hit_tokens = 0  # every admission's tokens found there (a recompute looks up again)
        self.block_tables: list[list[int | None]] = [[]]  # one per layer group; most models have one
        self.block_hashes: list[int] = []  # chained hashes of the full blocks, in order
        self.draft_token_ids: list[int] = []  # speculative guesses for this step, not yet tokens
        self.num_preemptions = 0
        self.num_recomputed_tokens = 0  # tokens run again because a preemption dropped their K/V
        self.high_water = 0  # most tokens ever computed: tokens below it that run again are recomputed
        self.parent_id: int | None = None  # the request this sample forked from (parallel sampling)
        self.sample_ids: list[int] = []  # the samples forked from this request, itself excluded
        self.finish_reason: str | None = None
        self.generator = None
        if params.seed is not None:
            self.generator = torch.Generator().manual_seed(params.seed)

    def advance(self, end: int) -> None:
        """The forward pass computed tokens num_computed_tokens..end-1."""
        self.num_recomputed_tokens += max(0, min(end, self.high_water) - self.num_computed_tokens)
        self.high_water = max(self.high_water, end)
        self.num_computed_tokens = end

    @property
    def block_table(self) -> list[int]:
        """The first layer group's table: the only one of most models, the full layers' of Gemma."""
        return self.block_tables[0]

    @block_table.setter
    def block_table(self, table: list[int]) -> None:
        self.block_tables[0] = table

    @property
    def wants_fork(self) -> bool:
        """Parallel sampling: fork into n samples when the prompt's first token is sampled."""
        return self.params.n > 1 and not self.output_token_ids and not self.sample_ids

    @property
    def num_seqs(self) -> int:
        """Sequences this request will run as once admitted (n before its fork, else 1)."""
        return self.params.n if self.wants_fork else 1

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    def token_slice(self, start: int, end: int) -> list[int]:
        """Tokens start..end-1, without copying the whole sequence."""
        num_prompt = len(self.prompt_token_ids)
        if end <= num_prompt:
            return self.prompt_token_ids[start:end]
        if start >= num_prompt:
            return self.output_token_ids[start - num_prompt:end - num_prompt]
        return self.prompt_token_ids[start:] + self.output_token_ids[:end - num_prompt]

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def is_finished(self) -> bool:
        return self.status == Status.FINISHED

    def __repr__(self) -> str:
        return (f"Request({self.request_id}, {self.status.value}, computed={self.num_computed_tokens}"
                f"/{self.num_tokens}, blocks={self.block_table})")
