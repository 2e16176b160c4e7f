"""What the engine needs from whatever a caller passes: the model, its tokenizer, its context.

    model, tokenizer, max_context = model_parts(load_model("bundled"))  # a kvviz LoadedModel
    model, tokenizer, max_context = model_parts(hf_model)               # a bare PreTrainedModel
    eos_token_ids(model)                                                 # the ids that end a sequence

A bare transformers model comes without a tokenizer (prompts must be token ids) and its context
is read from its config. This is the one place kvviz tells the two apart.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from kvviz.shapes import DEFAULT_CONTEXT, ModelShape


class ModelParts(NamedTuple):
    model: torch.nn.Module
    tokenizer: object | None  # None: prompts must be token ids
    max_context: int  # the longest sequence (prompt + generated) the model was built for


def model_parts(lm) -> ModelParts:
    """(model, tokenizer, max_context) from a kvviz LoadedModel or a bare transformers model."""
    if isinstance(lm, torch.nn.Module):
        return ModelParts(lm, None, ModelShape.of_model(lm).max_context or DEFAULT_CONTEXT)
    if not all(hasattr(lm, name) for name in ("model", "tokenizer", "max_context")):  # Engine(None), Engine("bundled")
        raise TypeError(f"An engine runs a model from kvviz.load_model or a transformers model, not {lm!r:.60}; "
                        "pass load_model('bundled') for the bundled one.")
    return ModelParts(lm.model, lm.tokenizer, lm.max_context)


def eos_token_ids(model) -> set[int]:
    """The token ids that end a sequence: the generation config's, else the (text) config's."""
    eos = getattr(model.generation_config, "eos_token_id", None)
    if eos is None:
        eos = getattr(model.config.get_text_config(), "eos_token_id", None)
    if eos is None:
        return set()
    return set(eos) if isinstance(eos, (list, tuple)) else {int(eos)}
