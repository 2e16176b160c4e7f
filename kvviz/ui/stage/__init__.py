"""The stage: one living diagram of a request's KV cache, drawn in the browser (stage.js, stage.css).

    step = show_stage(data, key="lesson_stage", on_step=callback)

A Streamlit components-v2 component, plain JavaScript and SVG with no build step. It gets a
whole lesson at once and steps, highlights and picks layers and heads in the browser; the step
it shows comes back in st.session_state[key]["step"] a moment after the last change (on_step
runs then). The data, which a lesson builds from its engine records:

    tokens          every token's text, prompt first, as far as the last step sampled
    prompt_tokens   how many of them are the prompt
    layers, heads   the model's layers and query heads
    block_size, num_blocks, bytes_per_token, per_token_formula ("2 (K and V) × 6 layers × ...")
    presenter       presenter mode: larger type
    step            the step to show (the server's choice; the browser may move on from it)
    steps           per step, 0 the prefill:
        num_tokens  tokens whose K and V are in the cache after it
        new         positions it added
        sampled     whether it sampled a token (shown as the last chip, not yet cached)
        attention   [layer][head][position]: the newest token's weights, integers 0-255
        block_table physical block of each logical block
        bill        formula_bytes, token_bytes, blocks, block_bytes, slack_bytes, note (or None)
        sentence    optional: what happened, in one sentence or two (else the page says it)
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

HERE = Path(__file__).resolve().parent
_stage = st.components.v2.component(
    "kvviz.stage", html='<div class="kvviz-stage" data-testid="kvviz-stage"></div>',
    css=(HERE / "stage.css").read_text(encoding="utf-8"), js=(HERE / "stage.js").read_text(encoding="utf-8"))


def show_stage(data: dict, key: str, on_step=None) -> int:
    """Draw the stage; returns the step it shows (the browser's choice once it has made one)."""
    result = _stage(key=key, data=data, default={"step": data["step"]}, on_step_change=on_step or (lambda: None))
    return int(result.get("step", data["step"]))


def chosen_step(key: str) -> int | None:
    """In an on_step callback: the step the browser moved to."""
    value = st.session_state.get(key)
    return None if value is None else value.get("step")
