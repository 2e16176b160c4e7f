"""The stage: one living diagram of the KV cache, drawn in the browser (the .js files, stage.css).

    step = show_stage(data, key="lesson_stage", on_step=callback)

A Streamlit components-v2 component, plain JavaScript and SVG with no build step: the JavaScript
files are joined in the order of JS_PARTS into one module. It gets a whole lesson at once and
steps, highlights and picks layers and heads in the browser; the step it shows comes back in
st.session_state[key]["step"] a moment after the last change (on_step runs then).

The data, which a lesson builds from its engine records. Every lesson sends:

    block_size, num_blocks, presenter (larger type)
    step            the step to show (the server's choice; the browser may move on from it)
    step_word, count_from   optional: how the bar names a step ("Pass", 1: "Pass 3 of 9");
                    else "Step 2 of 9", and "Prefill (step 0 of 9)" on a step with attention
    last_step       optional: the step the lesson will end at, when it is known before it is taken
                    ("Step 3 of 47" after three of 47 steps); else the last step sent
    steps           per step: what it shows, below; each may carry
        sentence    what happened, in one sentence or two

A room's follower gets the teacher's new step alone (kvviz.lessons.room_student.step_payload): JSON
bytes with `steps_from` N, whose `steps` are the steps from N on; the browser keeps the steps before
and the other fields it lacks (presenter), and draws the whole; a browser that lacks those steps
(the whole data was replaced by a newer run's before it drew) says so ("lost").

What a step holds picks the picture.

One request, layer by layer (cache.js; Prefill and decode): the data has tokens (every token's
text, prompt first, as far as the last step sampled), prompt_tokens, special (positions of the
tokenizer's special tokens: chips of their own kind), layers, band_layers (how many layers are drawn
whole; a deeper model's others fold into a strip, a click draws one), heads, head_groups (the query
heads each KV head serves: [[0, 1, 2], [3, 4, 5], [6, 7, 8]]), bytes_per_token and per_token_formula
("2 (K and V) × 6 layers × ..."); each step has
        num_tokens  tokens whose K and V are in the cache after it
        new         positions it added
        sampled     whether it sampled a token (shown as the last chip, not yet cached)
        attention   [layer][head][position]: the newest token's weights, integers 0-255
        block_table physical block of each logical block
        bill        formula_bytes, token_bytes, blocks, block_bytes, slack_bytes, note (or None)

Several requests into one pool (requests.js; Paged cache and batching, and its fork tab): the
data has requests, a list of {id, label, color}; each step has
        requests    per request present: id, status ("running", "waiting", "finished"),
                    num_tokens, num_preemptions, block_table, new_blocks (taken this step),
                    hit_blocks (found in the prefix cache this step), gave_back (blocks a
                    preemption or its finish gave back this step), returned (back after a
                    preemption this step), copied ([shared, own] pairs: a shared block copied
                    before this request wrote into it, copy-on-write)
        pool        every block held or holding a cached prefix: block, ref_count, owners,
                    cached, filled (slots holding a token); a block not listed is free
        num_preemptions   preemptions so far

One request's blocks with its tokens and drafts (blocks.js; Speculative decoding): the data has
tokens and prompt_tokens as above; each step has num_tokens, new and block_table as above, and
        drafts      None, or tokens (texts), positions, accepted (how many, from the first),
                    rolled_back (per rejected draft whose K and V were written: draft, block,
                    offset, text), freed_blocks (blocks the rollback emptied)
        summary     tokens, passes, tokens_per_pass, proposed, accepted, rolled_back_slots,
                    freed_blocks, plain_tokens, plain_passes: the run so far
        note        optional: a line under the numbers
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

HERE = Path(__file__).resolve().parent
JS_PARTS = ("dom.js", "cache.js", "requests.js", "blocks.js", "stage.js")  # stage.js last: it exports the component
# what the app loads, and what a lesson's web page inlines (kvviz/page): one stage for both
STAGE_HTML = '<div class="kvviz-stage" data-testid="kvviz-stage"></div>'
STAGE_CSS = (HERE / "stage.css").read_text(encoding="utf-8")
STAGE_JS = "\n".join((HERE / part).read_text(encoding="utf-8") for part in JS_PARTS)
_stage = st.components.v2.component("kvviz.stage", html=STAGE_HTML, css=STAGE_CSS, js=STAGE_JS)


def show_stage(data: dict | bytes, key: str, on_step=None, step: int | None = None, on_lost=None) -> int:
    """Draw the stage; returns the step it shows (the browser's choice once it has made one). `data` may
    be JSON bytes, already serialized (then `step` says its step); on_lost runs when the browser lacks
    the steps such data builds on."""
    step = data["step"] if step is None else step
    result = _stage(key=key, data=data, default={"step": step}, on_step_change=on_step or (lambda: None),
                    on_lost_change=on_lost or (lambda: None))
    reported = reported_step(result)
    return step if reported is None else reported


def chosen_step(key: str) -> int | None:
    """In an on_step callback: the step the browser moved to (None when its report is not a step)."""
    return reported_step(st.session_state.get(key))


MOST_STEP = 10**6  # far past any lesson's last step; a report past it is no step


def reported_step(value) -> int | None:
    """The step in a browser's report ({"step": 3}), checked where it enters: a whole number from 0 to MOST_STEP,
    else None. A script can send anything ({"step": -2} drew the second-last step with an error box; a 5,000-digit
    number, [1, 2] or NaN left every later click of its tab failing); the caller keeps the step it had."""
    step = value.get("step") if isinstance(value, dict) else None
    if isinstance(step, bool) or not isinstance(step, (int, float)) or step != step:
        return None
    return int(step) if 0 <= step <= MOST_STEP and float(step).is_integer() else None
