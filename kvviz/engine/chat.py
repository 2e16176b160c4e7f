"""One chat turn on the engine: a user's message through the tokenizer's chat template, decoding
until the end of the model's turn, and the answer's text without the template's special tokens.

    turn = chat_prompt(lm.tokenizer, "What is the capital of France? Answer in one sentence.")
    out = engine.generate([turn.token_ids], chat_params(turn, SamplingParams(max_tokens=64)))[0]
    chat_answer(lm.tokenizer, out.token_ids)   # 'The capital of France is Paris.'
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvviz.engine.sampling import SamplingParams

ANSWER_PROBE = "kvviz-answer-probe"  # an answer no template changes, to find what a turn ends with
MAX_MESSAGE_CHARS = 4000


@dataclass(slots=True)
class ChatPrompt:
    """A message with the template applied: the ids to prefill, the text they spell, and the ids
    that end the model's turn (its end-of-turn token and its end-of-sequence token)."""

    token_ids: list[int]
    text: str
    stop_token_ids: list[int]


def has_chat_template(tokenizer) -> bool:
    return tokenizer is not None and bool(getattr(tokenizer, "chat_template", None))


def chat_prompt(tokenizer, message: str, system: str | None = None) -> ChatPrompt:
    """`message` as the user's turn, followed by the start of the assistant's (add_generation_prompt)."""
    if not has_chat_template(tokenizer):
        raise ValueError("This model's tokenizer has no chat template, so it cannot take a chat message; "
                         "load a chat model such as smollm2, or type a plain prompt.")
    if not isinstance(message, str) or not message.strip():
        raise ValueError("The chat message is empty; type a question for the model.")
    if len(message) > MAX_MESSAGE_CHARS:
        raise ValueError(f"The chat message has {len(message):,} characters, more than the "
                         f"{MAX_MESSAGE_CHARS:,} a lesson takes; ask a shorter question.")
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": message}]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    token_ids = tokenizer(text, add_special_tokens=False)["input_ids"]  # the template wrote its own specials
    return ChatPrompt(token_ids=list(token_ids), text=text, stop_token_ids=end_of_turn_ids(tokenizer))


def end_of_turn_ids(tokenizer) -> list[int]:
    """The special token the template writes right after an assistant's answer (`<|im_end|>` for
    ChatML), and the tokenizer's end-of-sequence token."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    turn = [{"role": "user", "content": "?"}, {"role": "assistant", "content": ANSWER_PROBE}]
    try:
        text = tokenizer.apply_chat_template(turn, tokenize=False)
    except Exception:  # a template that takes no assistant turn: the eos token alone ends it
        return sorted(ids)
    after = text.split(ANSWER_PROBE, 1)[-1]
    special = special_token_ids(tokenizer)
    for token_id in tokenizer(after, add_special_tokens=False)["input_ids"]:
        if token_id in special:
            ids.add(token_id)
            break
    return sorted(ids)


def chat_params(prompt: ChatPrompt, params: SamplingParams) -> SamplingParams:
    """`params` that also stop at the end of the model's turn."""
    return replace(params, stop_token_ids=sorted(set(params.stop_token_ids) | set(prompt.stop_token_ids)))


def chat_answer(tokenizer, token_ids: list[int]) -> str:
    """The answer's text: the generated ids without the template's special tokens."""
    return tokenizer.decode(token_ids, skip_special_tokens=True).strip()


def special_token_ids(tokenizer) -> set[int]:
    """Ids a page may draw as the template's own tokens (chips of their own kind)."""
    return set(tokenizer.all_special_ids) | {i for i, token in tokenizer.added_tokens_decoder.items() if token.special}
