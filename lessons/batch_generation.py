"""Batch generation: many prompts through the same engine, watched step by step."""

import streamlit as st

from kvviz.engine.config import MAX_NUM_SEQS
from kvviz.engine.engine import Engine
from kvviz.engine.scheduler import Scheduler
from kvviz.lessons.batch_generation import figures
from kvviz.lessons.batch_generation import state as bs
from kvviz.lessons.batch_generation.logic import COMPARE_REPEATS, run_batch
from kvviz.lessons.budget import click_seconds
from kvviz.lessons.uploads import browser_megabytes
from kvviz.throughput import DEFINITION, throughput_text
from kvviz.ui.common import current_model, show_code
from kvviz.ui.text import plain
from kvviz.workloads import MAX_UPLOAD_BYTES, UPLOAD_LIMITS

bs.note_a_stopped_run()
bs.note_a_stopped_comparison()
st.title("Batch generation")
info = current_model().describe()
st.markdown(
    "The engine of the lessons, on many prompts at once: continuous batching admits requests as "
    "blocks and the token budget allow, finished requests leave at once, and when the pool runs "
    "out the newest request is preempted and recomputed later. "
    f"Model: **{info['name']}** ({info['parameters'] / 1e6:.1f}M parameters, {info['dtype']} on "
    f"{info['device']}); pick another in the sidebar. On a GPU, this is where full-size models run.")

workload_col, settings_col = st.columns([1, 1], gap="large")
with workload_col:
    st.subheader("Prompts")
    source = st.radio("Where the prompts come from", [bs.SYNTHETIC, bs.UPLOAD], key="batch_source", horizontal=True,
                      label_visibility="collapsed")
    upload_problem = None
    if source == bs.UPLOAD:
        st.file_uploader(f"A .txt file (one prompt per line) or a .jsonl file (one {{\"prompt\": ...}} per line), "
                         f"{UPLOAD_LIMITS}", key="batch_upload", on_change=bs.on_new_upload,
                         max_upload_size=browser_megabytes(MAX_UPLOAD_BYTES))  # a bigger one refused unsent
        summary, upload_problem = bs.upload_summary()
        if not hasattr(bs.BATCH.upload, "getvalue"):
            st.caption("Nothing uploaded yet.")
        elif upload_problem:
            st.error(plain(upload_problem))  # it names the file: as typed, never markdown
        else:
            st.success(summary)
    else:
        st.slider("Prompts", 1, 256, bs.DEFAULTS["batch_count"], key="batch_count")
        st.slider("Prompt length, each one's own part (tokens)", 1, 256, bs.DEFAULTS["batch_prompt_len"],
                  key="batch_prompt_len")
        st.slider("Shared prefix: tokens every prompt starts with", 0, 256, bs.DEFAULTS["batch_prefix"],
                  key="batch_prefix", help="A shared system prompt. With prefix caching, its full blocks "
                                          "are computed once and reused by later requests.")
    st.slider("Tokens to generate per request", 1, 512, bs.DEFAULTS["batch_output_len"], key="batch_output_len",
              help="Each request draws its length uniformly from this range.")

with settings_col:
    st.subheader("Engine")
    a, b = st.columns(2)
    a.select_slider("Block size (tokens)", [1, 2, 4, 8, 16, 32, 64], bs.DEFAULTS["batch_block_size"],
                    key="batch_block_size")
    b.number_input("Pool size in blocks (0: room for every request)", 0, bs.POOL_BLOCKS_MOST,
                   bs.DEFAULTS["batch_num_blocks"], key="batch_num_blocks",
                   help="Make it small to watch requests wait and get preempted. At most what the prompts can "
                        "fill and what memory holds.")
    a.number_input("Most requests running at once", 1, MAX_NUM_SEQS, bs.DEFAULTS["batch_max_num_seqs"],
                   key="batch_max_num_seqs")
    b.number_input("Token budget per step", 1, 65_536, bs.DEFAULTS["batch_max_batched_tokens"],
                   key="batch_max_batched_tokens", help="Prompt and generated tokens one forward pass may run; "
                                                        "longer prompts are prefilled in chunks.")
    a, b = st.columns([2, 3])  # the toggles' labels need the room
    a.toggle("Prefix caching", value=bs.DEFAULTS["batch_prefix_caching"], key="batch_prefix_caching")
    b.toggle("Ignore end-of-text", value=True, key="batch_ignore_eos",
             help="Run every request to its length, even past the model's end-of-text token.")
    with st.expander("Sampling"):
        st.toggle("Greedy (always the most likely token)", value=True, key="batch_greedy")
        greedy = bs.BATCH.greedy
        c, d, e = st.columns(3)
        c.slider("Temperature", 0.1, 2.0, bs.DEFAULTS["batch_temperature"], 0.1, key="batch_temperature",
                 disabled=greedy)
        d.slider("Top-k (0 = off)", 0, 200, bs.DEFAULTS["batch_top_k"], key="batch_top_k", disabled=greedy)
        e.slider("Top-p", 0.05, 1.0, bs.DEFAULTS["batch_top_p"], 0.05, key="batch_top_p", disabled=greedy)
        st.number_input("Seed (prompts and sampling)", 0, 2**31 - 1, 0, key="batch_seed")

progress_slot, live_slot = st.empty(), st.empty()
if st.button("Run the batch", type="primary", disabled=upload_problem is not None):
    bs.run(progress_slot, live_slot)
if bs.error():
    st.error(plain(bs.error()))
if bs.run_stopped():
    st.warning(bs.run_stopped(), icon=":material/stop_circle:")

done = bs.result()
if done is None:
    st.info("Press **Run the batch**: every prompt goes to one engine, and the charts follow each step.")
    st.stop()

st.subheader(f"{len(done.workload)} requests in {done.seconds:.2f} s on {done.model_name}")
m = st.columns(5)
m[0].metric("Output tokens/s", f"{done.engine_tokens_per_s:,.0f}", "engine steps", delta_color="off",
            delta_arrow="off", help=f"{DEFINITION}: here the seconds are the engine's own steps in this one run; "
                                    f"the wall time, {done.seconds:.2f} s, also holds drawing the live charts.")
m[1].metric("Generated tokens", f"{done.output_tokens:,}")
m[2].metric("Peak blocks in use", f"{done.stats['peak_blocks']} of {done.num_blocks}")
m[3].metric("Preemptions", done.preemptions)
m[4].metric("Prefix hit rate", f"{done.hit_rate:.0%}", f"{done.prefix_hit_tokens:,} tokens reused",
            delta_color="off", delta_arrow="off",
            help="Share of prompt tokens whose keys and values were already in the pool.")
st.caption(f"Tokens/s = {throughput_text(done.output_tokens, done.engine_seconds, 'in engine steps')} "
           "(drawing left out). The first run after loading a model also pays one-off warm-up costs.")
over_time, lanes_tab, results_tab, compare_tab = st.tabs(
    ["Over time", "Requests", "Results", "Against transformers generate"])
with over_time:
    st.plotly_chart(figures.timeline(done.series, done.num_blocks, len(done.workload)), width="stretch")
    st.caption("Red crosses: a request was preempted (its blocks freed, to be recomputed). Green stars: "
               "a prompt found some of its blocks already in the prefix cache.")
with lanes_tab:
    st.plotly_chart(figures.request_lanes(done.series, len(done.workload)), width="stretch")
with results_tab:
    st.dataframe(done.rows(), hide_index=True, width="stretch",
                 column_config={"prompt (end)": st.column_config.TextColumn(width="medium"),
                                "text": st.column_config.TextColumn(width="large")})
    st.download_button("Download the results (JSONL)", done.to_jsonl(), file_name="kvviz_batch.jsonl",
                       mime="application/jsonl", on_click="ignore", icon=":material/download:")
with compare_tab:
    st.markdown("The same prompts through transformers' `generate` as one usually writes it: static "
                "batches, left-padded, each batch generating until its longest request is done. Both "
                f"sides run greedy, every request to its length. Each side runs once to warm up, then "
                f"{COMPARE_REPEATS} times, the two taking turns; each side's time is its median run, "
                "timed from the first step to the last token, without drawing.")
    a, b = st.columns([1, 1])
    a.number_input("transformers batch size", 1, 1024, bs.DEFAULTS["batch_hf_batch_size"], key="batch_hf_batch_size")
    compare_now = b.button("Run both and compare", width="stretch")
    comparing_slot = st.empty()
    if compare_now:
        bs.compare(comparing_slot)
    if bs.BATCH.has("compare_error"):
        st.error(plain(bs.BATCH.compare_error))
    if bs.compare_stopped():
        st.warning(bs.compare_stopped(), icon=":material/stop_circle:")
    compared = bs.comparison()
    if compared is not None:
        used = compared.kvviz.details
        low, high = compared.speedup_range
        runs = len(compared.kvviz.details["all_seconds"])
        c = st.columns(4)
        c[0].metric("kvviz is", f"{compared.speedup:.2f}× as fast", f"range {low:.2f}×-{high:.2f}×",
                    delta_color="off", delta_arrow="off",
                    help=f"The ratio of the median output tokens per second, kvviz over transformers; "
                         f"pairing single runs gives {low:.2f}× to {high:.2f}×.")
        for column, side, run in ((c[1], "kvviz", compared.kvviz), (c[2], "transformers", compared.transformers)):
            column.metric(f"{side} tokens/s", f"{run.tokens_per_s:,.0f}", f"median, {runs} warm runs",
                          delta_color="off", delta_arrow="off",
                          help=f"{DEFINITION}, timed from the first step to the last token, nothing drawn.")
        c[3].metric("Outputs identical", f"{compared.agreement.num_equal} of {compared.agreement.num_requests}")
        if (note := compared.spread_note() or compared.busy_note()) is not None:  # beside the figure it qualifies
            st.warning(note, icon=":material/speed:")
        st.caption(compared.throughputs_note(done))
        thrown = compared.transformers.generated_tokens - compared.transformers.output_tokens
        st.caption(f"{DEFINITION.capitalize()}, medians: "
                   + "; ".join(f"{side} {throughput_text(run.output_tokens, run.seconds, 'of generate')}"
                               for side, run in (("kvviz", compared.kvviz), ("transformers", compared.transformers)))
                   + f" (the {thrown:,} tokens transformers generated past a request's length not counted). kvviz "
                   f"ran with its settings above: at most {done.settings.engine.max_num_seqs} requests at once, "
                   f"{done.settings.engine.max_num_batched_tokens} tokens per step, {used['num_blocks']} blocks of "
                   f"{done.settings.engine.block_size}.")
        if compared.batch_requests and (compared.agreement.num_requests < compared.batch_requests
                                        or runs < COMPARE_REPEATS):
            some = (f"the batch's first {compared.agreement.num_requests}"
                    if compared.agreement.num_requests < compared.batch_requests else "all of them")
            st.info(f"All {compared.batch_requests} requests, {COMPARE_REPEATS} times each way, would run past the "
                    f"{click_seconds():,.0f} s one click may take on this server, so both sides ran {some}, {runs} "
                    "times each way, the most that fit; a smaller batch compares whole.", icon=":material/info:")
        if compared.cut_requests:
            st.info(f"{compared.cut_requests} of the {compared.agreement.num_requests} requests asked for more tokens "
                    f"than fit the model's context of {compared.max_context:,} tokens, where kvviz stops: both sides "
                    "generated them only up to it, so they did the same work.")
        st.plotly_chart(figures.speed_comparison(compared.rows()), width="stretch")
        st.dataframe(compared.table(), hide_index=True, width="stretch")

if bs.vllm_available():  # vLLM's own environment exists (scripts/setup_vllm.sh)
    with st.expander("The same batch on vLLM"):
        st.markdown("vLLM, the engine people deploy, runs the last batch: the same token ids, sampling, "
                    "request and token limits, and as many bytes of KV cache as kvviz's pool, in blocks of "
                    "its own size. It starts in its own process, which takes a while.")
        st.button("Run on vLLM and compare", on_click=bs.on_vllm)
        if bs.BATCH.has("vllm_error"):
            st.error(bs.BATCH.vllm_error)
        theirs = bs.vllm_run()
        if theirs is not None:
            v = st.columns(5)
            v[0].metric(f"vLLM {theirs['vllm_version']} tokens/s", f"{theirs['tokens_per_s']:,.0f}",
                        help=f"Generated tokens over vLLM's generate call ({theirs['seconds']:.2f} s), start-up "
                             f"({theirs['wall_s']:.0f} s with it) left out.")
            v[1].metric("Outputs identical to kvviz", f"{theirs['agreement'].num_equal} of "
                                                       f"{theirs['agreement'].num_requests}")
            v[2].metric("Peak blocks in use", f"{theirs['peak_blocks']} of {theirs['num_blocks']}",
                        help=f"Blocks of {theirs['block_size']} tokens in {theirs['kv_bytes']:,} bytes.")
            v[3].metric("Preemptions", theirs["preemptions"])
            v[4].metric("Prefix-cache hit rate", f"{theirs['hit_rate']:.0%}")
            st.caption(f"kvviz ran {done.engine_tokens_per_s:,.0f} generated tokens/s on this batch, "
                       f"{done.engine_tokens_per_s / theirs['tokens_per_s']:.2f}× vLLM's. vLLM reports totals, "
                       "not a record per step, so the charts above are kvviz's alone. Sampled (not greedy) "
                       "outputs differ because the two engines draw different random numbers.")

show_code(run_batch, Engine.generate, Scheduler.schedule,
          caption="The batch job that ran, the engine's generate loop, and the scheduler behind every step.")
