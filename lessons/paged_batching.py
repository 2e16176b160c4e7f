"""Lesson: many requests, one pool of blocks, block tables, shared prefixes, preemption."""

import pandas as pd
import streamlit as st

from kvviz.engine.block_pool import BlockPool
from kvviz.engine.kv_manager import KVCacheManager
from kvviz.engine.scheduler import Scheduler
from kvviz.lessons import room_answers, stepped
from kvviz.lessons.paged_batching import figures
from kvviz.lessons.paged_batching import state as ps
from kvviz.lessons.paged_batching.events import event_rows
from kvviz.lessons.paged_batching.fork_view import fork_view
from kvviz.lessons.paged_batching.logic import waste_text
from kvviz.lessons.paged_batching.paging_note import paging_explained
from kvviz.lessons.paged_batching.stage import stage_data
from kvviz.lessons.paged_batching.swap_view import swap_view
from kvviz.lessons.prefill_decode import predict
from kvviz.shapes import format_bytes
from kvviz.ui.common import kept_defaults, show_code
from kvviz.ui.presenter import is_on as presenting
from kvviz.ui.text import plain

STEPS = ps.STEPS
room = stepped.open_page(STEPS)  # ?room=CODE: follow a teacher's run; None unless this session follows a room
lesson = ps.paged()
presenter = presenting()


def introduction() -> None:
    st.markdown(
        "A server runs many requests at once, and each grows at its own pace. Reserving one long "
        "contiguous slab per request wastes much of it: in the serving systems before vLLM, "
        "[Kwon et al. (2023)](https://arxiv.org/abs/2309.06180) measured only 20.4-38.2% of the KV cache "
        "memory holding the keys and values of actual tokens, and [vLLM's write-up]"
        "(https://blog.vllm.ai/2023/06/20/vllm.html) puts the waste at 60-80%, against under 4% with paging. "
        "A **paged** cache cuts memory into fixed-size "
        "**blocks**; each request has a **block table** that maps its logical blocks to physical ones, "
        "and takes a new block only when its last one is full. Requests that start with the same "
        "tokens share those blocks (**prefix caching**). When the pool runs out, the newest request is "
        "**preempted**: its blocks are freed and it is recomputed later.")


def beyond_the_article() -> None:
    st.divider()
    fork_tab, swap_tab = st.tabs(["Parallel sampling: one prompt, n samples", "Preemption: swap or recompute"])
    with fork_tab:
        fork_view()
    with swap_tab:
        swap_view()


def requests_and_settings() -> None:
    """The requests and the pool's settings: in full before a run, folded into a popover during one."""
    st.data_editor(pd.DataFrame(ps.DEFAULT_TABLE), num_rows="dynamic", width="stretch", key="paged_editor",
                   column_config={"prompt": st.column_config.TextColumn(width="large"),
                                  "arrives at step": st.column_config.NumberColumn(min_value=0, max_value=50,
                                                                                   width="small"),
                                  "max tokens": st.column_config.NumberColumn(min_value=1, max_value=200,
                                                                              width="small")})
    edited = ps.PAGED.editor
    table = pd.DataFrame(ps.DEFAULT_TABLE)
    for row, changes in edited.get("edited_rows", {}).items():
        for column, value in changes.items():
            table.loc[int(row), column] = value
    table = pd.concat([table, pd.DataFrame(edited.get("added_rows", []))], ignore_index=True)
    table = table.drop(index=[i for i in edited.get("deleted_rows", []) if i in table.index])
    ps.PAGED.requests_table = table.to_dict("records")

    kept_defaults(ps.DEFAULTS)  # a replay or a room sets them
    a, b, c = st.columns(3)
    a.slider("Block size (tokens)", *ps.BLOCK_SIZES, key="paged_block_size")
    b.slider("Pool size (blocks)", *ps.POOL_SIZES, key="paged_num_blocks")
    c.toggle("Prefix caching", key="paged_prefix")


stepped.header("Paged cache and batching", lesson)
if lesson is None:
    introduction()
    paging_explained()
stepped.toolbar(STEPS, lesson, room, requests_and_settings, "Requests and settings",
                can_step=lesson is not None and lesson.can_step, start_help="A new run of these requests from step 0.",
                popover_css="<style>[data-testid='stPopoverBody'] {width: min(760px, 90vw);}</style>")  # the table
stepped.error(STEPS)

if lesson is None:
    stepped.files_expander(STEPS)
    st.info("Press **Start**: the engine admits the requests that arrive at step 0 and runs one step.")
    beyond_the_article()
    st.stop()
if lesson.replay and room is None:
    st.info(f"Replaying a recorded run ({plain(lesson.model_name)}, {len(lesson.records)} steps, block size "
            f"{lesson.block_size}, a pool of {lesson.num_blocks} blocks, prefix caching "
            f"{'on' if lesson.enable_prefix_caching else 'off'}), with no model. Press **Start** to run "
            "the requests under **Requests and settings** on the loaded model instead.")
    room_answers.file_answers(lesson)

# the stage: the requests' block tables and the pool, stepped in the browser; the views below follow it
last = len(lesson.records) - 1
step = stepped.step_in_view(STEPS, lesson, room)
stepped.stage(STEPS, stage_data(lesson, step, presenter), room)  # a follower's moves with the teacher
stepped.look_back(STEPS, step, last, "Look back at step",
                  help="Or step in the diagram (its arrows, or ← → when it has the focus).")
stepped.files_expander(STEPS)
with st.expander("The idea: blocks, block tables, shared prefixes, preemption"):
    introduction()
paging_explained()
record = lesson.records[step]
labels = {rid: lesson.label(rid) for rid in lesson.request_ids.values()}

comparison = lesson.reservation_comparison(step)
prefix = lesson.prefix_stats(step)
m = st.columns(3)  # two rows, so that no label or value is cut off on a projector
m[0].metric("Running requests", comparison["requests"])
m[1].metric("Preemptions so far", lesson.num_preemptions(step))
m[2].metric("Prefix-cache hit rate", f"{prefix['hit_rate']:.0%}", f"{prefix['blocks_saved']} blocks reused",
            delta_color="off", delta_arrow="off",
            help="Of the tokens looked up in the prefix cache when a request was admitted (again, "
                 "with its output, after a recompute preemption), the share found there: those "
                 "blocks were not computed again.")
m = st.columns(3)
m[0].metric("Contiguous reservation", format_bytes(comparison["contiguous_bytes"]),
            waste_text(comparison["contiguous_waste"]), delta_color="off", delta_arrow="off",
            help=f"Each request reserves the model's whole context ({lesson.max_context} tokens) up front.")
m[1].metric("Paged blocks", format_bytes(comparison["paged_bytes"]), waste_text(comparison["paged_waste"]),
            delta_color="off", delta_arrow="off",
            help=f"{comparison['paged_blocks']} blocks hold {comparison['paged_slots']} slots "
                 f"for {comparison['distinct_tokens']} distinct tokens: a block shared by "
                 "several requests counts once, and only last blocks have empty slots.")

left, right = st.columns([3, 2])
with left:
    if record.layer_groups:  # sliding-window layers keep a table of their own (engine/layer_groups.py)
        st.plotly_chart(figures.group_block_tables(record, labels, lesson.block_size), width="stretch")
    else:
        st.plotly_chart(figures.block_tables(record, labels, lesson.block_size), width="stretch")
    st.plotly_chart(figures.pool_grid(lesson.pool_blocks(step), labels), width="stretch")
with right:
    st.plotly_chart(figures.schedule_timeline(lesson.records[:step + 1][-12:], labels), width="stretch")
    st.markdown("**Events this step**")
    events = [dict(row, event=plain(row["event"])) for row in event_rows(record, labels)]
    # st.table wraps long cells; a dataframe would cut block lists and texts off at the column's edge
    st.table(pd.DataFrame(events or [{"event": "—", "request": "", "blocks": ""}]).set_index("event"))
    texts = [{"request": labels[rid], "state": plain(state), "text": plain(text)}  # st.table reads markdown
             for rid, (state, text) in sorted(lesson.texts_so_far(step).items()) if rid in labels]
    if texts:
        st.markdown("**Generated so far**")
        st.table(pd.DataFrame(texts).set_index("request"))



def predict_then_reveal() -> None:
    questions = STEPS.state.setdefault("questions", [])
    running = [r for r in lesson.records[-1].requests if r.status == "running" and r.request_id in labels]
    choices = [r.request_id for r in running]
    if ps.PAGED.question_request not in choices:  # a new run, or that request ended
        del ps.PAGED.question_request
    q1, q2, q3 = st.columns([2, 2, 1])
    who = q1.selectbox("Request", choices, format_func=lambda rid: labels[rid], key="paged_question_request")
    guess = q2.number_input("Your guess (physical block id)", 0, lesson.num_blocks - 1,
                            key="paged_question_guess")
    if q3.button("Commit", key="paged_question_commit", disabled=who is None or not lesson.can_step):
        questions.append(predict.BlockQuestion(who, labels[who], len(lesson.records) - 1, int(guess)))
    if lesson.replay:
        st.caption("A replayed run takes no more steps: press **Start** to ask about a live one.")
    elif lesson.finished:
        st.caption("Every request has finished, so no block comes next: press **Start** to run again.")
    elif who is None:
        st.caption("No request is running at the latest step; press **Step** until one is.")
    for question in questions:
        predict.reveal_block(question, lesson.records)
    for question in reversed(questions[-4:]):
        if question.revealed:
            st.markdown(f"{'✅' if question.correct else '❌'} {question.label}: you said block "
                        f"**{question.guess}**; at step {question.answered_at} the pool gave block "
                        f"**{question.answer}**.")
        else:
            st.markdown(f"⏳ {question.text} You said **{question.guess}**. Step on to find out.")
    answered = [q for q in questions if q.revealed]
    st.caption(f"Score: {sum(q.correct for q in answered)} / {len(answered)}")


if room is None:  # a student answers the room's questions in the bar at the top
    with st.expander("Predict, then reveal: which block comes next?",
                     expanded=bool(STEPS.state.questions)):
        predict_then_reveal()
stepped.room_panel(STEPS, lesson, step, room)  # after the questions: one committed this run reaches the room

show_code(Scheduler.schedule, KVCacheManager.allocate_slots, BlockPool.find_cached_prefix, BlockPool.allocate,
          BlockPool.free, caption="The scheduler that chose this step's tokens, the KV manager that found "
                                  "their blocks, and the block pool it took them from.")

beyond_the_article()
