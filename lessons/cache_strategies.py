"""Lesson: one prompt under every cache strategy; memory, time, text, error; GQA and MQA."""

import streamlit as st

from kvviz.lessons.cache_strategies import eviction_view as eviction_state
from kvviz.lessons.cache_strategies import figures
from kvviz.lessons.cache_strategies import state as ss
from kvviz.lessons.cache_strategies.gqa import mean_pool_heads
from kvviz.lessons.cache_strategies.logic import (
    PRESENTER_COLUMNS,
    STATIC_MOST_TOKENS,
    beside_full_cache,
    compare_strategies,
    engine_quality_note,
    static_reservation,
)
from kvviz.lessons.uploads import file_buttons

from kvviz.shapes import SLIDING, format_bytes
from kvviz.strategies.quantized import QuantizedKV
from kvviz.strategies.sliding import SlidingWindowKV
from kvviz.strategies.static import StaticKV
from kvviz.throughput import busy_note
from kvviz.ui import presenter
from kvviz.ui.common import current_model, show_code
from kvviz.ui.text import plain

ss.keep_a_stopped_run()
eviction_state.keep_a_stopped_run()
st.title("Cache strategies")
lm = current_model()
info = lm.describe()
lesson_shown = ss.strategies()
reserved = static_reservation(info["max_context"])
if lesson_shown is not None:  # the comparison on screen may come from a file made on another model
    reserved = next((r.options["capacity"] for r in lesson_shown["results"] if r.strategy == "static"), reserved)
slides = SLIDING in lm.shape.layer_kinds
st.markdown(
    "A cache is a trade: memory against time against exactness. Here the same prompt runs under "
    "each strategy: the **dynamic** cache grows a token at a time, a **static** one reserves "
    f"{reserved:,} tokens up front (the model's whole context, or {STATIC_MOST_TOKENS:,} if that is longer), a "
    "**sliding window** keeps only the newest tokens, a **quantized** one stores keys and values in 8 or "
    "4 bits, the **paged** engine hands out fixed-size blocks, and **no cache** recomputes everything. "
    "The bytes held, the errors and the milliseconds below are measured; the formula beside them is "
    "computed from the model's config.")
st.markdown(
    "**Dynamic or static** is also a question of compiled code: a dynamic cache changes shape at every "
    "step, which compiled paths (torch.compile, CUDA graphs) handle badly, while a static cache keeps one "
    "shape and compiles well, at the price of the room a shorter request leaves empty. **A sliding window "
    "is safe only in layers trained with one** (Mistral, Gemma's local layers): elsewhere, dropping old "
    "keys changes what the model can attend to. "
    + ("This model has sliding-window layers; the window here is applied to every layer."
       if slides else "This model's layers all use full attention, so here the window is an approximation."))
left, right = st.columns([3, 2])
with left:
    st.text_area("Prompt", value=ss.EXAMPLE_PROMPT, key="strategies_prompt", height=100)
with right:
    a, b = st.columns(2)
    a.slider("Tokens to generate", 2, 128, ss.DEFAULTS["strategies_max_tokens"], key="strategies_max_tokens")
    b.slider("Sliding window (tokens)", 2, 128, ss.DEFAULTS["strategies_window"], key="strategies_window")
    sizes = ss.group_sizes(info["head_dim"])
    if ss.STRATEGIES.has("group_size") and ss.STRATEGIES.group_size not in sizes:  # another model was loaded
        del ss.STRATEGIES.group_size
    default_group = min(32, info["head_dim"])
    a.selectbox("Quantization group (values per scale)", sizes, key="strategies_group_size",
                index=sizes.index(default_group) if default_group in sizes else len(sizes) - 1)
    b.slider("Recent tokens kept unquantized", 0, 64, 0, key="strategies_residual")
replay = ss.replaying()  # a replay draws the file's results; nothing on this page runs the model
a, b = st.columns(2)
run_now = a.button("Run every strategy", type="primary", disabled=replay, width="stretch")
if replay:
    b.button("Leave the replay", on_click=ss.on_leave_replay, width="stretch")
running_slot = st.empty()
if run_now:
    ss.run(running_slot)
lesson = ss.strategies()
if ss.STRATEGIES.has("error"):
    st.error(ss.STRATEGIES.error)
if ss.STRATEGIES.has("note"):  # fewer tokens than asked: the most under one click's budget
    st.info(ss.STRATEGIES.note, icon=":material/info:")
if ss.stopped():
    st.warning(ss.stopped(), icon=":material/stop_circle:")
with st.expander("Export or replay a lesson"):
    file_buttons(ss.exporter(), ss.FILES.file_name, "strategies_upload",
                 ss.replay)
if replay:
    asked = lesson["settings"]
    st.info(f"Replaying a recorded comparison ({plain(lesson['model'])}, {asked['max_tokens']} tokens, window "
            f"{asked['window']}, quantization group {asked['group_size']}, {asked['residual']} recent tokens "
            f"unquantized, {asked['timing_runs']} timed runs) of the prompt “{plain(lesson['prompt'][:80])}”, "
            "with no model. The GQA and eviction tabs run the loaded model and a lesson file does not hold them: press "
            "**Leave the replay** to run them, or to compare the prompt above.")
memory_tab, time_tab, text_tab, error_tab, bill_tab, table_tab, gqa_tab, eviction_tab = st.tabs(
    ["Memory", "Time", "Texts", "Error and KL", "Measured vs formula", "Table", "GQA and MQA", "Eviction lab"])

if lesson is None:
    for tab in (memory_tab, time_tab, text_tab, error_tab, bill_tab, table_tab):
        tab.info("Press **Run every strategy**: the prompt runs once per strategy, on this model, "
                 "and again teacher-forced on the full cache's tokens to measure each one's error.")
else:
    results = lesson["results"]
    with memory_tab:
        log_scale = st.toggle("Logarithmic memory axis", value=True, key="strategies_log_memory",
                              help="The static reservation is many times the others; on a linear axis "
                                   "they crowd together at the bottom.")
        st.plotly_chart(figures.memory_per_step(results, log_scale), width="stretch")
        dynamic = results[0]
        paged = next((r for r in results if r.strategy == "paged"), None)
        pool = ("" if paged is None else
                f"the paged engine allocates its whole pool ({paged.options['num_blocks']} blocks of "
                f"{paged.options['block_size']} tokens, {format_bytes(paged.held_bytes[-1])}) when it starts, so "
                "its line is flat too, and the request takes whole blocks of it as it grows "
                "(**Measured vs formula** names the free blocks and the last block's slack); ")
        st.caption(f"After the last step the full (dynamic) cache holds {format_bytes(dynamic.held_bytes[-1])}. "
                   "Static holds its whole reservation from the first step; the sliding window stops "
                   "growing at its window; quantized caches grow at a fraction of the slope; "
                   f"{pool}no cache holds nothing.")
    with time_tab:
        st.plotly_chart(figures.time_per_step(results), width="stretch")
        if (note := busy_note([[ms / 1e3 for ms in r.decode_ms] for r in results], None)) is not None:
            st.warning(note)
        noise = [r.label for r in results[1:] if beside_full_cache(r, results[0]) == "within noise"]
        if noise:
            st.caption(f"Within this run's noise of the full cache: {', '.join(noise)}. Their fastest and slowest "
                       "runs overlap the full cache's, so these bars do not say which is faster; the Table says "
                       "where they differ.")
        st.caption("Left, the work, which is the same on every run: step 0 runs the whole prompt; after it "
                   "a cached step runs one token, while without a cache every step runs the whole sequence "
                   "again. Right, the time, measured: each bar is the median over the timed runs of the mean "
                   "decode step, the whiskers the fastest and slowest run. On a small model and a CPU, a step's "
                   "fixed costs (and, for the quantized caches, packing and unpacking) can outweigh the "
                   "tokens saved, so the bars need not follow the token counts.")
    with text_tab:
        st.markdown(figures.divergence_html(lesson["texts"]), unsafe_allow_html=True)
        st.caption("Greedy decoding, each strategy on its own. Red from the first token that differs "
                   "from the full cache's choice: after one different word the rest of the story "
                   "follows another path.")
    with error_tab:
        st.plotly_chart(figures.quantization_error(results), width="stretch")
        st.plotly_chart(figures.kl_per_step(results), width="stretch")
        st.caption("Teacher-forced: every strategy reads the very same tokens (the full cache's), so the "
                   "differences come from the cache alone. Rounding to a few bits moves keys and values a "
                   "little and the next-token distribution less; dropping old tokens (the window) moves it "
                   "more. Static, paged and no cache differ only by float rounding. A KL of exactly 0 sits on the "
                   "bottom line.")
    with bill_tab:
        labels = [r.label for r in results]
        chosen = st.selectbox("Strategy", labels, index=labels.index(next(
            (r.label for r in results if r.strategy == "quantized"), labels[0])), key="strategies_bill_of")
        result = results[labels.index(chosen)]
        bill = result.final_bill
        m = st.columns(3)
        m[0].metric("Formula (tokens in context)", format_bytes(bill.formula_bytes))
        m[1].metric("Measured (tensors' bytes)", format_bytes(bill.measured_bytes))
        m[2].metric("kvviz.memory_bill predicts", format_bytes(bill.predicted_bytes),
                    "equal to measured" if bill.predicted_bytes == bill.measured_bytes else "differs",
                    delta_color="off")
        st.code(result.formula, language=None, wrap_lines=True)
        st.plotly_chart(figures.bill_waterfall(bill, chosen, figures.strategy_color(result.strategy,
                                                                                    result.options)),
                        width="stretch")
        st.dataframe([{"strategy": r.label, "formula": format_bytes(r.final_bill.formula_bytes),
                       "differences": "; ".join(f"{d.name}: {d.num_bytes:+,} bytes" for d in r.final_bill.differences)
                       or "none", "measured": format_bytes(r.final_bill.measured_bytes)} for r in results],
                     hide_index=True, width="stretch")
        if lesson["eight_bit"]:
            st.markdown(f"**8 bits, two schemes**, bytes per token on {plain(lesson['model'])} (all layers, K and V), "
                        "each measured from a one-token cache's tensors: this page's quantized strategy (like "
                        "transformers' QuantizedCache) and the paged cache of kvviz's engine "
                        "(`EngineConfig.kv_cache_dtype`), which the Memory bill measures too.")
            st.dataframe([{"cache": row.cache, "bytes per token": row.bytes_per_token, "what the bytes count":
                           row.counts} for row in lesson["eight_bit"]], hide_index=True, width="stretch",
                         column_config={"bytes per token": st.column_config.NumberColumn(format="%d")})
            if lesson["model"] == "bundled":
                st.caption(engine_quality_note())
    with table_tab:
        presenting = presenter.is_on()  # large type: only the columns a projector fits
        st.dataframe(lesson["table"], hide_index=True, width="stretch",
                     column_order=PRESENTER_COLUMNS if presenting else None,
                     column_config={"bytes held": st.column_config.NumberColumn(format="localized"),
                                    "bytes predicted": st.column_config.NumberColumn(format="localized")})
        st.caption("Bytes after the last step; errors and KL the largest over the teacher-forced steps; first "
                   "divergence: the first token a strategy's own text leaves the full cache's, or never."
                   + (" Presenter mode shows 5 of the 11 columns; leave it for the others." if presenting else ""))

with gqa_tab:
    st.markdown(
        f"**Grouped-query attention** shares each key/value head among several query heads; with one "
        f"KV head it is **multi-query attention**. This model has {info['heads']} query heads and "
        f"{info['kv_heads']} KV heads. Merging KV heads by averaging their weights (as Ainslie et al. "
        "do before a short retraining, which is skipped here) shrinks the cache at once; the held-out "
        "loss shows what it costs.")
    choices = ss.gqa_choices(info["kv_heads"])
    if ss.STRATEGIES.gqa_heads not in choices:  # another model was loaded
        del ss.STRATEGIES.gqa_heads
    if not choices:
        st.info("This model already has a single KV head (multi-query attention): nothing left to merge.")
    else:
        a, b = st.columns([2, 1])
        a.selectbox("KV heads after the merge", choices, key="strategies_gqa_heads",
                    format_func=lambda n: f"{n} (MQA)" if n == 1 else f"{n} (GQA)")
        b.button("Convert and measure", on_click=ss.on_gqa, width="stretch", disabled=replay)
    if ss.STRATEGIES.has("gqa_error"):
        st.error(ss.STRATEGIES.gqa_error)
    report = ss.gqa()
    if report is not None:
        st.plotly_chart(figures.gqa_comparison(report), width="stretch")
        m = st.columns(4)
        m[0].metric("Cache per token, before", format_bytes(report.bytes_per_token_before))
        m[1].metric("Cache per token, after", format_bytes(report.bytes_per_token_after),
                    f"-{report.cache_saved_fraction:.0%}", delta_color="inverse")
        m[2].metric("Held-out loss, after", f"{report.loss_after:.3f}", f"{report.loss_change:+.3f} nats",
                    delta_color="inverse")
        m[3].metric("Parameters", f"{report.parameters_after / 1e6:.2f}M",
                    f"{(report.parameters_after - report.parameters_before) / 1e6:+.2f}M", delta_color="off")
        st.caption(f"Measured on {report.num_windows} windows of {report.window} tokens of held-out text. "
                   f"kvviz.memory_bill's formula predicts {format_bytes(report.predicted_bytes_per_token_after)} "
                   "per token after the merge.")

with eviction_tab:
    eviction_state.render(replay)

show_code(compare_strategies, StaticKV.update, SlidingWindowKV.update, QuantizedKV.update, mean_pool_heads,
          caption="The comparison that ran, the caches' update methods, and the mean-pooling of KV heads.")
