"""The eviction lab on the "Cache strategies" page: its state, its button and its layout.

A tab of lessons/cache_strategies.py, not a page of its own: its files are named after the lab
(this module, kvviz/lessons/cache_strategies/eviction_figures.py, and its logic kvviz/strategies/eviction.py) and
live beside the page's (kvviz/lessons/cache_strategies/state.py, kvviz/lessons/cache_strategies/logic.py).

It runs on the page's prompt and "Tokens to generate"; its own widgets are "eviction_*" and its
result lives under "lesson_eviction" (cleared, like every lesson, when another model loads).
"""

from __future__ import annotations

import streamlit as st

from kvviz.lessons.cache_strategies import eviction_figures as figures
from kvviz.lessons.cache_strategies import state as cache_strategies_state
from kvviz.lessons.cache_strategies.figures import divergence_html
from kvviz.strategies.eviction import eviction_lab, eviction_table
from kvviz.strategies.heavy_hitters import HeavyHitterKV
from kvviz.strategies.sinks import SinkWindowKV
from kvviz.ui.common import current_model, drop, show_code

DEFAULTS = {"eviction_budget": 16, "eviction_sinks": 4}
KEYS = frozenset({"lesson_eviction", "eviction_error"})
INPUTS = ("eviction_",)


def on_run() -> None:
    """Run the lab; a bad setting leaves one sentence and the previous result."""
    st.session_state.pop("eviction_error", None)
    lm = current_model()
    prompt = str(cache_strategies_state.setting("strategies_prompt"))
    if not prompt.strip():
        st.session_state["eviction_error"] = "The prompt is empty; type some text to start from."
        return
    try:
        lab = eviction_lab(lm, prompt, int(cache_strategies_state.setting("strategies_max_tokens")),
                           int(st.session_state.get("eviction_budget", DEFAULTS["eviction_budget"])),
                           int(st.session_state.get("eviction_sinks", DEFAULTS["eviction_sinks"])))
    except ValueError as error:
        st.session_state["eviction_error"] = str(error)
        return
    decode = (lambda t: lm.tokenizer.decode([t])) if lm.tokenizer is not None else str
    st.session_state["lesson_eviction"] = {
        "lab": lab, "table": eviction_table(lab, decode),
        "tokens": [decode(t) for t in lab.prompt_token_ids + lab.runs[0].token_ids],
        "texts": [{"label": r.label, "color": figures.POLICY[r.policy], "pieces": [decode(t) for t in r.token_ids],
                   "divergence": r.first_difference} for r in lab.runs]}


def render(replay: bool = False) -> None:
    """The lab's tab; during a replay of the page's comparison its button is off (a lesson file holds no lab)."""
    st.markdown(
        "Long conversations make the cache grow without end, so some systems give it a fixed **budget** "
        "of tokens and throw the rest away. Which tokens survive is the whole question. A **sliding "
        "window** keeps the newest ones. **Attention sinks + window** (StreamingLLM) also keeps the "
        "first few: models learn to park spare attention on them, and losing them hurts. **Heavy "
        "hitters** (H2O) keeps the newest half of the budget and, for the other half, the tokens that "
        "have received the most attention so far, each KV head choosing for itself. The lab uses the "
        "prompt and the number of tokens set above.")
    left, right, button = st.columns([5, 5, 3], vertical_alignment="bottom")
    left.slider("Budget (tokens kept per layer and KV head)", 4, 128, DEFAULTS["eviction_budget"],
                key="eviction_budget")
    right.slider("Attention sinks (first tokens always kept)", 0, 8, DEFAULTS["eviction_sinks"], key="eviction_sinks")
    button.button("Run the eviction lab", type="primary", on_click=on_run, width="stretch", disabled=replay)
    if "eviction_error" in st.session_state:
        st.error(st.session_state["eviction_error"])
    result = st.session_state.get("lesson_eviction")
    if result is None:
        st.info("Press **Run the eviction lab**: the prompt runs with the full cache and under each policy, "
                "once on its own and once fed the full cache's tokens, to measure the difference.")
        return
    lab = result["lab"]
    if lab.first_evicted_step is None:
        st.info(f"The {lab.budget}-token budget holds every token this run reads, so no step ran without one "
                "and every policy equals the full cache: lower the budget or generate more tokens.")
    st.dataframe(result["table"], hide_index=True, width="stretch",
                 column_config={"max KL (nats)": st.column_config.NumberColumn(format="%.2e"),
                                "mean KL (nats)": st.column_config.NumberColumn(format="%.2e")})
    st.caption("KL: how far the next-token distribution is from the full cache's, in nats, over the "
               "teacher-forced steps (0 = identical). First different token: where the policy's own text leaves "
               "the full cache's, as the full cache's token → the policy's. Tokens and bytes: what each layer and "
               "KV head keeps after the last step, and the bytes of every tensor the cache holds (H2O's include "
               "its attention scores).")
    st.markdown(divergence_html(result["texts"]), unsafe_allow_html=True)
    st.caption("Each policy decoding greedily on its own; red from the first token where it leaves the "
               "full cache's text.")
    st.plotly_chart(figures.kl_per_step(lab), width="stretch")
    st.caption("Fed the full cache's tokens, so every policy reads the same text and only the cache differs. "
               "KL in nats: 0 means the same next-token distribution. Until the context outgrows the budget "
               "nothing is dropped, and the curves sit at 0.")
    st.plotly_chart(figures.retention_maps(lab, result["tokens"]), width="stretch")
    st.caption("Red: a position dropped from every layer and KV head; blue: kept by all. The window's kept "
               "band slides right; with sinks a blue stripe stays at the start; heavy hitters keep a "
               "scattered set that differs between heads, so their colours fall in between. Do they keep the first "
               "tokens as well? Nothing tells them to; only the attention those tokens receive.")
    show_code(SinkWindowKV.choose, HeavyHitterKV.observe, HeavyHitterKV.choose,
              caption="How each policy picks the tokens it keeps.")


def reset(state) -> None:
    """Forget this lesson's run when another model loads: it belongs to the model it ran on."""
    drop(state, KEYS)
