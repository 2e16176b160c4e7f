"""Lesson 1: prefill then decode, one step at a time, on a real model."""

import streamlit as st

from kvviz.engine.chat import has_chat_template
from kvviz.engine.engine import Engine
from kvviz.engine.mla import mla_attention
from kvviz.engine.runner import paged_attention
from kvviz.engine.scheduler import Scheduler
from kvviz.lessons.navigation import taught_later
from kvviz.lessons.prefill_decode import figures
from kvviz.lessons.prefill_decode import state as ls
from kvviz.lessons.prefill_decode.classroom import predict_panel, sync_query_params
from kvviz.lessons.prefill_decode.explain import bill_note, cache_per_layer_text, logit_difference_note, work_table
from kvviz.lessons.prefill_decode.explain_views import inside_attention, memory_bound
from kvviz.lessons.prefill_decode.logic import steps_text
from kvviz.lessons import room_answers, room_student, stepped
from kvviz.lessons.prefill_decode.stage import stage_data
from kvviz.shapes import format_bytes
from kvviz.ui import presenter
from kvviz.ui.common import current_model, show_code
from kvviz.ui.text import plain

STEPS, KEYS = ls.STEPS, ls.STEPS.keys
ls.set_defaults()
room_student.restore_from_query(STEPS)  # ?room=CODE: follow a teacher's lesson (a room's lesson reads no link)
ls.restore_from_query()
room = stepped.open_page(STEPS)  # None unless this session follows a room
lesson = ls.lesson()
stepped.header("Prefill and decode", lesson)
if lesson is not None:  # the stage needs the height
    st.html("<style>[data-testid='stAlertContainer'] {padding: 0.45rem 0.9rem;} .st-key-lesson_answer p {white-space: "
            "nowrap; overflow: hidden; text-overflow: ellipsis; margin: 0;}</style>")

# ---- the prompt and the controls: in full before Prefill, folded into a popover after it -----
playing = STEPS.state.playing


def prompt_and_settings() -> None:
    left, right = st.columns([3, 2])
    with left:
        st.selectbox("Example prompts", ls.example_prompts(current_model().describe()), key="lesson_example",
                     on_change=ls.on_example, index=None, placeholder="Your own prompt", format_func=ls.example_label)
        st.text_area("Prompt", key="lesson_prompt", height=90, on_change=ls.on_prompt_edit,
                     max_chars=ls.MAX_PROMPT_CHARS)
        if has_chat_template(current_model().tokenizer):  # a chat model: the prompt may be a message to it
            st.toggle("Chat: apply the model's chat template", key="lesson_chat",  # one line in a popover
                      help="The prompt becomes a message to the model, and the lesson stops at the end of its turn.")
    with right:
        st.slider("Tokens to generate", 1, ls.MAX_LESSON_TOKENS, key="lesson_max_tokens")
        with st.expander("Sampling"):
            st.toggle("Greedy (always the most likely token)", key="lesson_greedy")
            greedy = ls.PREFILL.greedy
            st.slider("Temperature", 0.1, 2.0, step=0.1, key="lesson_temperature", disabled=greedy)
            st.slider("Top-k (0 = off)", 0, 200, key="lesson_top_k", disabled=greedy)
            st.slider("Top-p", 0.05, 1.0, step=0.05, key="lesson_top_p", disabled=greedy)
            st.number_input("Seed", 0, 2**31 - 1, key="lesson_seed", disabled=greedy)
    if st.button("Prefill", type="primary", width="stretch" if lesson else "content",
                 help="Run the prompt through the model in one pass (a new lesson)."):
        ls.prefill()  # here, not in a callback, so that a long prompt's spinner shows while it runs
        st.rerun()


if room is not None:  # a student: the teacher moves the lesson
    room_student.student_bar(STEPS, room)
elif lesson is None:
    with st.container(key="lesson_controls"):  # where the skip link lands (kvviz.ui.skip_link)
        prompt_and_settings()
        buttons = st.columns([1.5, 1, 1.5, 1, 2.5], vertical_alignment="bottom")
    buttons[0].button("Next token", width="stretch", shortcut="Right", disabled=True)
else:  # one toolbar row: the stage below gets the screen
    with st.container(key="lesson_controls"):
        buttons = st.columns([1.5, 1, 1.5, 1, 2.5], vertical_alignment="bottom")  # "Next token" fits in presenter
    buttons[0].button("Next token", on_click=stepped.step, args=(STEPS,), width="stretch", shortcut="Right",
                      disabled=lesson.finished)
if room is None:
    buttons[1].button("Pause" if playing else "Play", on_click=stepped.toggle_play, args=(STEPS,), width="stretch",
                      shortcut="P", disabled=lesson is None or lesson.finished)
    # in presenter type the label's line would push the stage down: the value names what it is instead
    buttons[2].select_slider("Play speed", ["slow", "normal", "fast"], value="normal", key=KEYS.speed,
                             label_visibility="collapsed" if presenter.is_on() else "visible",
                             format_func=(lambda speed: f"play: {speed}") if presenter.is_on() else str)
    buttons[3].button("Reset", on_click=stepped.reset_run, args=(STEPS,), width="stretch")
    if lesson is not None:
        with buttons[4].popover("Prompt and settings", icon=":material/tune:", width="stretch"):
            prompt_and_settings()
stepped.error(STEPS)
if lesson is not None and lesson.answer() is not None:  # one line, its newest words: the stage stays where it is
    with st.container(key="lesson_answer"):
        st.markdown(f"**Answer so far:** {plain(lesson.answer_tail(60 if presenter.is_on() else 100))}",
                    help=f"The whole answer, without the chat template's tokens: {plain(lesson.answer())}")
playing = stepped.player(STEPS, lesson)  # Play's beat steps the lesson

if lesson is None:
    st.info("Type a prompt and press **Prefill**. The whole prompt goes through the model in one "
            "forward pass, and every layer stores each prompt token's key and value vectors.")
    with st.expander("Export or replay a lesson"):
        stepped.files(STEPS)
    st.stop()

# ---- which step we look at: the stage steps in the browser and tells the server -------------
last_step = len(lesson.visible_records) - 1
if lesson.replay and room is None:
    st.caption(f"Replaying a recorded lesson ({plain(lesson.model_info['name'])}, {steps_text(len(lesson.records))}): "
               "every view is drawn from the file; no model runs. Step with the stage's arrows or Next token.")
    room_answers.file_answers(lesson)
step = stepped.step_in_view(STEPS, lesson, room, playing)  # a teacher's room follows it
record, info = lesson.records[step], lesson.model_info
num_tokens = lesson.num_tokens_at(step)
entered = lesson.entered_step(step)

stepped.stage(STEPS, stage_data(lesson, step, presenter.is_on()), room,
              ls.step_sentence(lesson, step))  # a follower's moves with the teacher's steps
stepped.look_back(STEPS, step, last_step, "Look back at step (0 = prefill)", disabled=playing,
                  help="Or step in the diagram (its arrows, or ← → when it has the focus). While playing, the "
                       "views follow the newest step.")
# a follower keeps the room link
link_note = None if room is not None else sync_query_params(lesson.settings.prompt, step)
if link_note:
    st.caption(link_note)

# one view at a time: only the chosen view is computed, so a step redraws quickly
view = st.radio("View", ls.VIEWS, horizontal=True, key="lesson_view", label_visibility="collapsed")

if view == "Cache per layer":
    sliding = [kind == "sliding_attention" for kind in info.get("layer_types") or []] or None
    st.plotly_chart(figures.cache_growth(entered, info["layers"], sliding, lesson.given_back(step)), width="stretch")
    st.markdown(cache_per_layer_text(lesson, step))


@st.fragment
def kv_inspector():
    trace = lesson.trace(step)
    a, b = st.columns(2)
    layer = a.selectbox("Layer", range(info["layers"]), key="lesson_kv_layer")
    kv_head = b.selectbox("KV head", range(info["kv_heads"]), key="lesson_kv_head")
    new_rows = num_tokens if step == 0 else 1
    changed = lesson.traces[step].changed_rows  # checked against the step before when it ran
    k_col, v_col = st.columns(2)
    texts = lesson.token_texts[:num_tokens]
    k_col.plotly_chart(figures.kv_heatmap(trace.keys[layer, :, kv_head], "K", layer, kv_head, new_rows, changed,
                                          texts), width="stretch")
    v_col.plotly_chart(figures.kv_heatmap(trace.values[layer, :, kv_head], "V", layer, kv_head, new_rows,
                                          changed, texts), width="stretch")
    if trace.latents is not None:  # MLA: the K and V above are rebuilt from these rows, the only ones cached
        st.plotly_chart(figures.kv_heatmap(trace.latents[layer], "Latent + RoPE key (cached)",
                                           layer, None, new_rows, changed, texts), width="stretch")
        st.caption(f"This model uses multi-head latent attention (MLA): per token and layer the cache holds only "
                   f"this row, a {info['kv_lora_rank']}-value latent and a {info['qk_rope_head_dim']}-value "
                   f"rotary key shared by all {info['heads']} heads. The K and V of each head above are rebuilt "
                   "from it at every step (kvviz.engine.mla).")
    if step > 0:
        st.caption(f"Compared with step {step - 1}, {changed} earlier rows changed in any layer or head: "
                   "once written, a token's key and value stay as they are. Only the outlined row is new.")


@st.fragment
def attention_view():
    trace = lesson.trace(step)
    layer = st.selectbox("Layer", range(info["layers"]), key="lesson_attention_layer")
    st.plotly_chart(figures.attention_by_head(trace.attention[layer], info["kv_heads"],
                                              lesson.token_texts, layer), width="stretch")
    if info.get("kv_lora_rank"):  # MLA: every head rebuilds its keys from one cached latent row
        st.caption(f"{info['heads']} query heads, each with keys rebuilt from the same cached latent row "
                   "(multi-head latent attention): one row for all heads, weighed differently by each.")
    else:
        st.caption(f"{info['heads']} query heads share {info['kv_heads']} KV heads (grouped-query attention): "
                   "heads in one group read the same cached keys but weigh them differently.")
    taught_later("memory_bill", "Grouped-query and multi-query attention (GQA, MQA)")


if view == "Keys and values":
    kv_inspector()
if view == "Attention":
    attention_view()
if view == "Inside attention":
    inside_attention(lesson, step)
if view == "Why decode is memory-bound":
    memory_bound(lesson, step)
    taught_later("memory_bill", "Accelerators' memory, GQA and MQA, int8 and int4 caches")
if view == "Work saved":
    rows = lesson.work()[:step + 1]
    st.plotly_chart(figures.work_saved(rows), width="stretch")
    latest = rows[-1]
    a, b, c = st.columns(3)
    a.metric("Tokens run, with cache", latest["with_cache_total"])
    b.metric("Tokens run, without", latest["without_cache_total"],
             delta=f"{latest['without_cache_total'] - latest['with_cache_total']} more", delta_color="inverse")
    diffs = [r["max_logit_difference"] for r in rows if r["max_logit_difference"] is not None]
    c.metric("Largest logit difference", f"{max(diffs):.2e}" if diffs else "n/a",
             help="Between the cached run and a run that recomputes everything, over all steps so far.")
    st.caption(logit_difference_note(max(diffs) if diffs else None, info["dtype"]))
    if step >= len(lesson.twin_records) and lesson.twin_note():
        st.caption(lesson.twin_note())
    st.dataframe(work_table(rows), width="stretch", hide_index=True)
    st.caption("Tokens run are counts: they come out the same on every run and every machine. How long a "
               "step takes is measured in the Model lab, as the median of several warm runs.")
if view == "Memory bill":
    bill = lesson.bill(step, info["dtype_bytes"])
    st.markdown("**The formula** for this request's tokens:")
    for line in bill["formula"]:
        st.code(line, language=None, wrap_lines=True)
    a, b, c, d = st.columns(4)
    a.metric("Formula", format_bytes(bill["formula_bytes"]))
    b.metric("Measured", format_bytes(bill["token_bytes"]),  # a short label: four columns at 1280 px
             help="Bytes of the engine's cache that hold this request's tokens' keys and values.")
    c.metric("Blocks in use", f"{bill['blocks']} blocks", format_bytes(bill["block_bytes"]), delta_color="off",
             delta_arrow="off", help=f"The engine hands out whole blocks of {lesson.settings.block_size} tokens; "
                                     "the empty slots of the last block are slack.")
    d.metric("Last block's slack", format_bytes(bill["slack_bytes"]),
             f"{bill['slack_slots']} empty slot{'' if bill['slack_slots'] == 1 else 's'}", delta_color="off",
             delta_arrow="off")
    st.caption(bill_note(bill))
    taught_later("paged_batching", "Blocks, the last block's slack and the preallocated pool")

with st.expander("Export or replay a lesson"):
    stepped.files(STEPS)
if room is None:  # a student answers the room's questions in the bar at the top
    with st.expander("Predict, then reveal", expanded=bool(STEPS.state.questions)):
        predict_panel(lesson)
        taught_later("paged_batching", "Blocks, which the second question asks about")
stepped.room_panel(STEPS, lesson, step, room)  # after the questions: one asked this run reaches the room

attention_code = mla_attention if info.get("kv_lora_rank") else paged_attention  # MLA: its own attention forward
show_code(Engine.step, Engine._sample, Scheduler.schedule, attention_code,
          caption="The engine code that ran this step: the loop (schedule, one forward pass, sample, record), "
                  "the sampling, the scheduler, and the attention function every layer calls, which writes "
                  "new keys and values into the paged cache.")
