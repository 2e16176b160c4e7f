"""A prompt and its sampling settings checked before the engine queues them: each refusal is one
sentence that says what to change (an EngineError).

    token_ids = checked_token_ids(engine, "ROMEO:", SamplingParams(max_tokens=32))
"""

from __future__ import annotations

import numpy as np

from kvviz.engine.errors import EngineError
from kvviz.engine.block_pool import blocks_needed
from kvviz.engine.sampling import SamplingParams


def checked_token_ids(engine, prompt: str | list[int], params: SamplingParams) -> list[int]:
    """The prompt's token ids, if the engine can run this request to the end; raises EngineError."""
    if not isinstance(params, SamplingParams):
        raise EngineError(f"Sampling settings must be a SamplingParams, not {type(params).__name__}; "
                          "write one such as SamplingParams(max_tokens=32).")
    config = engine.config
    try:
        params.validate(max_num_seqs=config.max_num_seqs)
    except ValueError as error:
        raise EngineError(str(error)) from None
    token_ids = tokenize(prompt, engine.tokenizer, engine.vocab_size)
    if len(token_ids) >= engine.max_context:
        raise EngineError(f"The prompt has {len(token_ids)} tokens but the model's context holds "
                          f"{engine.max_context}; shorten the prompt so there is room to generate.")
    budget = config.max_num_batched_tokens
    if config.use_cache and not config.enable_chunked_prefill and len(token_ids) > budget:
        raise EngineError(f"The prompt has {len(token_ids)} tokens but a step runs at most {budget} and "
                          "chunked prefill is off; raise max_num_batched_tokens or turn chunked prefill on.")
    if config.use_cache:
        most_tokens = min(len(token_ids) + params.max_tokens, engine.max_context)
        needed = blocks_needed(most_tokens, config.block_size)
        if needed > engine.pool.num_blocks:  # the full group's pool, with layer groups: the largest
            raise EngineError(
                f"This request needs up to {needed} blocks of {config.block_size} tokens but the pool "
                f"has only {engine.pool.num_blocks}; enlarge the pool or ask for fewer tokens.")
    return token_ids


def tokenize(prompt, tokenizer, vocab_size: int) -> list[int]:
    """Text through the tokenizer, or token ids (a list, array or tensor) checked against the vocabulary."""
    if not isinstance(prompt, str) and not hasattr(prompt, "__len__"):
        raise EngineError(f"A prompt is text or a list of token ids, not {prompt!r:.40}; a list of token ids "
                          "goes inside the list of prompts, as in generate([[1, 2, 3]]).")
    if isinstance(prompt, str):
        if not prompt.strip():
            raise EngineError("The prompt is empty; type some text to start from.")
        if tokenizer is None:
            raise EngineError("This model has no tokenizer; give the prompt as a list of token ids.")
        if not prompt.isascii() and prompt.encode("utf-8", "surrogatepass").decode("utf-8", "ignore") != prompt:
            raise EngineError("The prompt holds a lone surrogate (\\ud800 to \\udfff), half of a character, which "
                              "no tokenizer reads; give text of whole characters.")
        token_ids = tokenizer(prompt)["input_ids"]
    else:
        token_ids = prompt.tolist() if hasattr(prompt, "tolist") else list(prompt)  # a tensor or array too
        if not all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in token_ids):
            raise EngineError("Token ids must be whole numbers; give the prompt as text or a list of ints.")
        token_ids = [int(t) for t in token_ids]
    if not token_ids:
        raise EngineError("The prompt is empty; give at least one token.")
    bad = [t for t in token_ids if not 0 <= t < vocab_size]
    if bad:
        raise EngineError(f"Token id {bad[0]} is outside the vocabulary (0 to {vocab_size - 1}); "
                          "check that the ids come from this model's tokenizer.")
    return token_ids
