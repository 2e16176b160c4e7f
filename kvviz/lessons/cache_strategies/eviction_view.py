"""The eviction lab on the "Cache strategies" page: its state, its button and its layout.

A tab of lessons/cache_strategies.py, not a page of its own: its files are named after the lab
(this module, kvviz/lessons/cache_strategies/eviction_figures.py, and its logic kvviz/strategies/eviction.py) and
live beside the page's (kvviz/lessons/cache_strategies/state.py, kvviz/lessons/cache_strategies/logic.py).

It runs on the page's prompt and "Tokens to generate"; its own widgets are "eviction_*" and its
result lives under "strategies_eviction_run" (cleared, like every lesson, when another model loads).
"""

from __future__ import annotations

import streamlit as st

from kvviz.engine.model_parts import model_parts
from kvviz.lessons.budget import click_seconds, says, timed, tokens_that_fit
from kvviz.lessons.cache_strategies import eviction_figures as figures
from kvviz.lessons.cache_strategies import state as cache_strategies_state
from kvviz.lessons.cache_strategies.figures import divergence_html
from kvviz.lessons.cache_strategies.logic import eviction_seconds, eviction_work
from kvviz.strategies.eviction import POLICIES, EvictionLab, eviction_lab, eviction_table
from kvviz.strategies.heavy_hitters import HeavyHitterKV
from kvviz.strategies.run import tokenize
from kvviz.strategies.sinks import SinkWindowKV
from kvviz.ui.common import current_model, show_code
from kvviz.ui.progress import estimated_bar, how_it_stopped
from kvviz.ui.session_keys import Keys, SessionState, Slot

DEFAULTS = {"strategies_eviction_budget": 16, "strategies_eviction_sinks": 4}


class EvictionState(SessionState):
    """What the eviction tab keeps; its lab's results go when another model loads."""

    run = Slot("strategies_eviction_run", clears=True)  # the lab on screen
    error = Slot("strategies_eviction_error", clears=True)
    running = Slot("strategies_eviction_running", clears=True)  # the runs of a lab under way
    stopped = Slot("strategies_eviction_stopped", clears=True)
    note = Slot("strategies_eviction_note", clears=True)
    budget = Slot("strategies_eviction_budget", default=DEFAULTS["strategies_eviction_budget"])
    sinks = Slot("strategies_eviction_sinks", default=DEFAULTS["strategies_eviction_sinks"])


EVICTION = EvictionState()
KEYS = Keys(clears=EvictionState.cleared_keys())


def run(slot) -> None:
    """Run the lab under a progress bar and a Stop button in `slot`; a bad setting, or an estimate past one
    click's budget, leaves one sentence and the previous result. It runs in the page's script, not in a
    callback, so that Stop (or any widget) interrupts it at the bar's next move, within one step; the runs
    measured by then wait under "strategies_eviction_running" for the next run of the page (keep_a_stopped_run)."""
    EVICTION.drop("error", "stopped", "note")
    lm = current_model()
    prompt = str(cache_strategies_state.setting("strategies_prompt"))
    if not prompt.strip():
        EVICTION.error = "The prompt is empty; type some text to start from."
        return
    max_tokens, note = tokens_that_fit(lambda tokens: eviction_seconds(lm, prompt, tokens),
                                       int(cache_strategies_state.setting("strategies_max_tokens")), "the lab")
    if note:  # a deep model (SmolLM2) at the page's defaults: the most tokens under one click's budget
        EVICTION.note = note
    budget = int(EVICTION.budget)
    sinks = int(EVICTION.sinks)
    model, tokenizer, _ = model_parts(lm)
    device = next(model.parameters()).device
    bar = estimated_bar(slot, lambda: eviction_seconds(lm, prompt, max_tokens), says(device, "eviction"),
                        EVICTION.key("error"), "strategies_eviction_run_stop",
                        "Ends at the next step and keeps the policies measured so far.", click_seconds())
    if bar is None:  # past the budget, or a prompt the model cannot take: one sentence
        return
    runs = []
    EVICTION.running = {"runs": runs, "prompt": prompt, "budget": budget, "sinks": sinks}
    try:
        with timed(eviction_work(lm, len(tokenize(prompt, tokenizer)), max_tokens), device):
            lab = eviction_lab(lm, prompt, max_tokens, budget, sinks, runs=runs,
                               progress=lambda done, total, text: bar.move(done / total, text))
    except ValueError as error:
        del EVICTION.running
        EVICTION.error = str(error)
        slot.empty()
        return
    del EVICTION.running  # ended, not stopped
    EVICTION.run = shown(lm, lab)
    slot.empty()


def shown(lm, lab: EvictionLab) -> dict:
    """What the tab draws of a lab (all its runs, or those a Stop kept): the lab, its table and texts."""
    decode = (lambda t: lm.tokenizer.decode([t])) if lm.tokenizer is not None else str
    return {"lab": lab, "table": eviction_table(lab, decode),
            "tokens": [decode(t) for t in lab.prompt_token_ids + lab.runs[0].token_ids],
            "texts": [{"label": r.label, "color": figures.POLICY[r.policy], "pieces": [decode(t) for t in r.token_ids],
                       "divergence": r.first_difference} for r in lab.runs]}


def keep_a_stopped_run() -> None:
    """A lab that a widget interrupted left the runs it measured: keep those of the policies whose two runs
    ended, and say in one sentence what was kept (nothing, before the first policy's)."""
    running = EVICTION.take("running")
    if running is None:
        return
    runs, total = running["runs"], len(POLICIES) - 1
    if len(runs) < 2:
        finished = EVICTION.has("run")
        shown_now = " The result below is the last lab that finished." if finished else ""
        EVICTION.stopped = (
            f"{how_it_stopped()} before any of the {total} policies was measured, so nothing new is kept.{shown_now}")
        return
    lm, budget = current_model(), running["budget"]
    lab = EvictionLab(tokenize(running["prompt"], lm.tokenizer), budget, running["sinks"], budget // 2, list(runs))
    EVICTION.run = shown(lm, lab)
    names = ", ".join(r.label for r in runs[1:])
    EVICTION.stopped = (
        f"{how_it_stopped()} after {len(runs) - 1} of {total} policies: the lab below keeps the full cache "
        f"and {names}; press **Run the eviction lab** to measure them all.")


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
    left.slider("Budget (tokens kept per layer and KV head)", 4, 128, DEFAULTS["strategies_eviction_budget"],
                key="strategies_eviction_budget")
    right.slider("Attention sinks (first tokens always kept)", 0, 8, DEFAULTS["strategies_eviction_sinks"],
                 key="strategies_eviction_sinks")
    run_now = button.button("Run the eviction lab", type="primary", width="stretch", disabled=replay)
    running_slot = st.empty()
    if run_now:
        run(running_slot)
    if EVICTION.has("error"):
        st.error(EVICTION.error)
    if EVICTION.has("note"):
        st.info(EVICTION.note, icon=":material/info:")
    if EVICTION.has("stopped"):
        st.warning(EVICTION.stopped, icon=":material/stop_circle:")
    result = EVICTION.run
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
