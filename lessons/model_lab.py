"""Lesson 3: the Model lab. Build a model of any size and time its decode steps, cache on and off."""

import dataclasses

import streamlit as st

from kvviz.lessons.budget import WorkTooLarge, click_seconds, says, timed
from kvviz.engine.errors import EngineError
from kvviz.lessons.model_lab import figures
from kvviz.lessons.model_lab import logic as lab
from kvviz.lessons.model_lab.state import LAB
from kvviz.models import CustomShape, ModelLoadError
from kvviz.shapes import format_bytes
from kvviz.ui.common import show_code
from kvviz.ui.progress import StopBar, how_it_stopped

LONGEST_CONTEXTS = [128, 256, 512, 1024, 2048]


@st.cache_resource(show_spinner="Building the model with random weights…", max_entries=2)
def built_model(shape: CustomShape):
    """One copy per shape for every session; the measurement only reads it."""
    return lab.build_lab_model(shape)


def _shape() -> CustomShape:
    return CustomShape(num_layers=LAB.layers, hidden_size=LAB.hidden, num_heads=LAB.heads, num_kv_heads=LAB.kv_heads,
                       head_dim=LAB.head_dim or None, intermediate_size=LAB.mlp or None, max_context=LAB.context)


def _forget_error() -> None:
    del LAB.error


def _measure(slot) -> None:
    """Build (or reuse) the model and time it under a progress bar and a Stop button in `slot`; on a
    refusal keep the previous results. The work runs in the page's script, not in a callback, so
    that pressing Stop (or any widget) interrupts it at the bar's next move, between two rounds; the
    rounds timed by then wait under "lab_measuring" for the next run of the page."""
    LAB.drop("error", "stopped")
    shape, device = _shape(), lab.pick_device(None)
    try:
        lab.check_lab_size(shape, device)  # refused in a sentence before any bar: too big, or past the budget
    except ValueError as error:  # ModelLoadError, WorkTooLarge
        LAB.error = str(error)
        return
    seconds = lab.measurement_work(shape, lab.LAB_REPEATS).seconds(device)
    bar = StopBar(slot, "lab_stop", f"Estimated about {seconds:,.0f} s on this server, {says(device, 'lab')}; "
                  "building the model with random weights", "Keep the rounds timed so far: every length, timed "
                  "fewer times.", estimate_s=seconds, budget_s=click_seconds())

    def progress(done: int, total: int, text: str) -> None:
        bar.move(done / total, f"{text} ({done} of {total} rounds done)", every_s=0.0)

    LAB.measuring = (shape, None)  # stopped now: nothing timed yet
    try:
        lm = built_model(shape)
        contexts = lab.lab_contexts(lm.max_context)
        result = lab.describe(lm, contexts, lab.LAB_REPEATS)
        LAB.measuring = (shape, result)  # filled in, round by round
        with timed(lab.measurement_work(shape, lab.LAB_REPEATS), next(lm.model.parameters()).device):
            lab.measure(lm, contexts, repeats=lab.LAB_REPEATS, progress=progress, result=result)
        progress(lab.LAB_REPEATS, lab.LAB_REPEATS, "Measured")  # a run stopped meanwhile ends here, storing nothing
    except (ModelLoadError, EngineError, ValueError) as error:
        LAB.error = str(error)
    else:
        LAB.result, LAB.result_shape = result, shape
    del LAB.measuring  # ended, not stopped
    slot.empty()


def _keep_a_stopped_measurement() -> None:
    """A measurement that a widget interrupted left what it had timed: keep it, marked as stopped,
    or say that nothing was timed and keep the previous results."""
    if not LAB.has("measuring"):
        return
    shape, result = LAB.take("measuring")
    how = how_it_stopped()
    if result is not None and result.timings:
        # a copy: the stopped run's thread may still finish the round it was timing, until its next bar move
        kept = dataclasses.replace(result, timings=list(result.timings))
        LAB.result, LAB.result_shape = kept, shape
        if how != "Stopped":  # the result below says how many rounds; this says why
            LAB.stopped = (f"{how} so the rounds timed by then are shown; a shorter longest "
                           "context or fewer layers make a measurement shorter.")
    else:
        planned = f" of {result.rounds_planned}" if result is not None else ""
        LAB.stopped = (f"{how} after 0{planned} rounds: nothing was timed, so nothing new "
                       "is shown. Press **Measure** to start again.")


_keep_a_stopped_measurement()
st.title("Model lab")
st.warning("**The weights are random, so this model writes nonsense.** Everything else is real: the engine, the "
           "forward passes, the keys and values written to the cache, the bytes they take and the time each "
           "step needs. The cache's mechanics do not depend on what the weights learned.",
           icon=":material/casino:")

controls, results = st.columns([1, 2], gap="large")
with controls:
    forget = dict(on_change=_forget_error)  # a changed size makes the last refusal stale
    st.slider("Layers", 1, 32, 4, key="lab_layers", **forget)
    st.slider("Hidden size", 64, 2048, 256, step=64, key="lab_hidden", **forget)
    st.slider("Query heads", 1, 32, 8, key="lab_heads", **forget)
    st.slider("KV heads", 1, 32, 2, key="lab_kv_heads", **forget)
    st.slider("Head size (0: hidden size ÷ heads)", 0, 256, 0, step=8, key="lab_head_dim", **forget)
    st.slider("MLP size (0: about 8/3 of the hidden size)", 0, 8192, 0, step=64, key="lab_mlp", **forget)
    st.select_slider("Longest context to measure", LONGEST_CONTEXTS, value=512, key="lab_context", **forget)
    measure_now = st.button("Measure", type="primary", width="stretch")
    measuring_slot = st.empty()
    try:
        cost = lab.estimate(_shape())
        st.caption(f"This shape: **{cost.num_params / 1e6:,.1f}M parameters**, {format_bytes(cost.weight_bytes)} "
                   f"of weights, head size {cost.head_dim}, MLP {cost.intermediate_size}, "
                   f"**{format_bytes(cost.bytes_per_token)} of cache per token**.")
        lab.check_lab_size(_shape())  # its parameters, and the measurement's work (kvviz.lessons.budget)
        shape_problem = None
    except (ModelLoadError, WorkTooLarge) as error:
        shape_problem = str(error)


def show_summary(result: lab.LabResult) -> None:
    """The numbers: what the model weighs, and one step at the longest context."""
    longest = result.timings[-1]
    a, b, c = st.columns(3)
    a.metric("Parameters", f"{result.num_params / 1e6:,.2f}M")
    b.metric("Weights", format_bytes(result.weight_bytes), help="The sum of every parameter tensor's bytes.")
    c.metric("Cache per token", format_bytes(result.bytes_per_token), help="K and V, every layer, every KV head.")
    with_cache, without = longest.tokens_run
    a, b, c = st.columns(3)
    a.metric("Tokens run", f"{with_cache} vs {without:,}",
             help=f"For the step at {longest.context} tokens: with the cache only the newest token runs through "
                  "the model; without it, every token in the context runs again. Counts do not vary between runs.")
    steps = dict(delta=f"median of {longest.repeats} warm step{'s' if longest.repeats != 1 else ''}",
                 delta_color="off", delta_arrow="off")
    b.metric("With the cache", longest.median_text(cached=True), **steps,
             help="Warm decode steps that run only the newest token, timed on this machine: the median.")
    c.metric("Without the cache", longest.median_text(cached=False), **steps,
             help=f"Warm steps that run all {longest.context} tokens again, timed on this machine: the median.")
    if (note := result.spread_note() or result.busy_note()) is not None:  # beside the times it qualifies
        st.warning(note, icon=":material/speed:")
    st.caption(f"At {longest.context} tokens. With the cache: {longest.spread(cached=True)}; without: "
               f"{longest.spread(cached=False)}; the ratio of the medians is {longest.speedup:.1f}×. Times move "
               "with the machine's load; the token counts do not.")
    st.code(result.formula, language=None, wrap_lines=True)
    agree = "the same as" if longest.cache_bytes == longest.formula_bytes else "unlike"
    st.caption(f"The engine's cache held {longest.cache_bytes:,} bytes after that step, {agree} the formula.")
    st.markdown(
        f"Measured on **{result.name}** ({result.device}). Without the cache, the step that produces one token "
        "pushes the whole context through every layer, so its time grows with the context. With the cache, "
        "only the newest token runs; it still reads every cached key and value, which costs far less than "
        "recomputing them. The price is memory, which grows by the same amount with every token.")
    if result.sample_text is not None:
        st.markdown("**What the random weights write after “ROMEO:”**")
        st.code(result.sample_text, language=None, wrap_lines=True)


if measure_now:
    _measure(measuring_slot)

with results:
    problem = shape_problem or LAB.error
    if problem:
        st.error(problem)  # one sentence; the last results stay below
    if LAB.has("stopped"):
        st.warning(LAB.stopped, icon=":material/stop_circle:")
    result = LAB.result
    if result is None:
        st.info("Set a size and press **Measure**. kvviz builds that model with random weights, then for "
                "each context length times one decode step twice: with the cache, where only the newest "
                "token runs through the model, and without it, where every token in the context runs again.")
    else:
        if problem:
            st.caption("The results below are from the last model that was measured.")
        elif LAB.result_shape != _shape():
            st.warning("The sliders have changed since this measurement: the results below are from the "
                       "previous shape. Press **Measure** to measure this one.", icon=":material/history:")
        if result.stopped:
            st.warning(result.stopped_note(), icon=":material/stop_circle:")
        show_summary(result)

if result is not None:
    left, right = st.columns(2)
    left.plotly_chart(figures.decode_time(result.timings), width="stretch")
    right.plotly_chart(figures.cache_bytes(result.timings), width="stretch")
    st.dataframe(result.rows(), width="stretch", hide_index=True)
    with st.expander("Each length's spread, tokens run and bytes"):
        st.dataframe(result.spread_rows(), width="stretch", hide_index=True)

show_code(lab.measure_decode_times,
          caption="How the lab times a step: the same engine, once with the cache and once without.")
