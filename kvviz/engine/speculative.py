"""Speculative decoding without a draft model: prompt-lookup drafts, checked by the model itself.

A decode step runs one token and gets one token back. But text repeats itself (a refrain, a
variable name, a quoted line), so the tokens that followed the last time the context's tail
appeared are a cheap guess of what comes next. The engine runs the real last token plus k such
**draft** tokens in one forward pass, which gives the model's own choice after each of them.
Drafts are kept while each equals the model's choice before it; the first choice that differs
comes for free. The rejected drafts' keys and values were written to the cache too, so they are
rolled back: the request's computed length goes back, and blocks left empty return to the pool.

Only greedy requests (temperature 0) speculate: keeping a draft that equals the argmax cannot
change their output. Sampled requests decode one token a step (they would need rejection
sampling to keep their distribution).

    drafts = propose_drafts(context, 3)          # the tokens that followed the last match
    tokens = accept(drafts, targets)             # targets: the argmax at each of the 1 + k positions
"""

from __future__ import annotations

from itertools import accumulate

import torch

from kvviz.engine.request import Request


def propose_drafts(token_ids: list[int], num_drafts: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int]:
    """Prompt lookup: the `num_drafts` tokens that followed the most recent earlier occurrence of
    the context's last n tokens, trying n from `max_ngram` down to `min_ngram`; [] if none recurs.

    When the occurrence is so recent that fewer tokens follow it, the text is taken to go on
    repeating with the same period, as an LZ77 copy does: after "la la la" comes "la la".
    """
    if num_drafts < 1:
        return []
    for n in range(min(max_ngram, len(token_ids) - 1), min_ngram - 1, -1):
        tail = token_ids[-n:]
        for start in range(len(token_ids) - n - 1, -1, -1):  # newest first; the tail itself excluded
            if token_ids[start:start + n] == tail:
                follow = token_ids[start + n:start + n + num_drafts]  # short only if it runs to the end: one period
                return (follow * -(-num_drafts // len(follow)))[:num_drafts]
    return []


def accept(draft_token_ids: list[int], target_token_ids: list[int]) -> list[int]:
    """Greedy verification: the tokens a step with k drafts adds (1 to k + 1 of them).

    target_token_ids[i] is the model's argmax after the real last token and the first i drafts
    (k + 1 of them). Draft i stays while it equals target i; then comes the target at the first
    mismatch, or, with every draft accepted, the bonus token after the last one.
    """
    assert len(target_token_ids) == len(draft_token_ids) + 1
    num_accepted = 0
    while num_accepted < len(draft_token_ids) and draft_token_ids[num_accepted] == target_token_ids[num_accepted]:
        num_accepted += 1
    return target_token_ids[:num_accepted + 1]


def set_drafts(running: list[Request], num_speculative: int, max_ngram: int, min_ngram: int,
               max_context: int) -> None:
    """Before scheduling: give every running greedy decode its drafts for this step, others none.

    A request never drafts past what it may still produce: k + 1 tokens at most come back, so k
    stays below the tokens left to max_tokens and to the end of the context.
    """
    for request in running:
        request.draft_token_ids = []
        decoding = request.num_computed_tokens == request.num_tokens - 1
        if decoding and request.params.temperature == 0:
            tokens_left = min(request.params.max_tokens - len(request.output_token_ids),
                              max_context - request.num_tokens)
            request.draft_token_ids = propose_drafts(request.all_token_ids, min(num_speculative, tokens_left - 1),
                                                     max_ngram, min_ngram)


def last_rows(logits: torch.Tensor, num_drafts: list[int]) -> tuple[torch.Tensor, list[int]]:
    """Each sampling chunk's last row of logits, and its index.

    logits: (R, V), where a chunk with k drafts owns 1 + k consecutive rows.
    Returns ((S, V), S row indices), one per chunk.
    """
    rows = [end - 1 for end in accumulate(1 + k for k in num_drafts)]  # (S,)
    return (logits if len(rows) == logits.shape[0] else logits[rows]), rows
