"""Lesson: speculative decoding without a draft model (prompt lookup), step by step."""

import pandas as pd
import streamlit as st

from kvviz.engine.engine import Engine
from kvviz.engine.kv_manager import KVCacheManager
from kvviz.engine.speculative import accept, propose_drafts
from kvviz.lessons import room_answers, stepped
from kvviz.lessons.speculative import figures
from kvviz.lessons.speculative import state as ss
from kvviz.lessons.speculative.stage import stage_data
from kvviz.ui.common import kept_defaults, show_code
from kvviz.ui.presenter import is_on as presenting
from kvviz.ui.text import plain

STEPS = ss.STEPS
room = stepped.open_page(STEPS)  # ?room=CODE: follow a teacher's run; None unless this session follows a room
lesson = ss.lesson()
presenter = presenting()


def introduction() -> None:
    st.caption("Beyond the article, whose arc ends at Putting it together: a way to get more than one token "
               "from a decode pass, with the same cache.")
    st.markdown(
        "A decode step reads every weight and the whole cache to produce **one** token. While decode is "
        "memory-bound (that reading, not the arithmetic, sets the time), running a few more tokens through "
        "the same pass costs little more, so: guess the next tokens, and let the model check the guesses. "
        "Here the guesses are free. When the last few tokens also appeared earlier in the text, the "
        "tokens that followed that earlier appearance become the **drafts** (prompt lookup). One "
        "forward pass gives the model's choice after each draft. Drafts are **accepted** while they "
        "match that choice, and the model's own next token comes on top. **Rejected** drafts already wrote "
        "their keys and values into the cache, so they are **rolled back**. The text is exactly what "
        "plain greedy decoding gives; only the number of forward passes changes.")


def prompt_and_settings() -> None:
    """The prompt and the run's settings: in full before a run, folded into a popover during one."""
    kept_defaults(ss.DEFAULTS)
    st.text_area("Prompt (a line that comes back gives the lookup something to copy)", key="spec_prompt",
                 height=130)
    a, b, c = st.columns(3)
    a.slider("Draft tokens per step (k)", *ss.DRAFTS, key="spec_k")
    b.slider("Tokens to generate", *ss.MAX_TOKENS, key="spec_max_tokens")
    c.slider("Block size (tokens)", *ss.BLOCK_SIZES, key="spec_block_size")


stepped.header("Speculative decoding", lesson)
if lesson is None:
    introduction()
stepped.toolbar(STEPS, lesson, room, prompt_and_settings, "Prompt and settings",
                can_step=lesson is not None and not (lesson.replay or lesson.finished),  # a replay takes no steps
                start_help="A new run of this prompt from the prefill.")
stepped.error(STEPS)

if lesson is None:
    stepped.files_expander(STEPS)
    st.info("Press **Start**: the prompt is prefilled, then each **Step** is one forward pass of two "
            "engines, one with drafts and one without.")
    st.stop()
if lesson.replay and room is None:
    asked = lesson.settings
    st.info(f"Replaying a recorded run ({plain(lesson.model_name)}, {len(lesson.records)} passes with drafts, "
            f"k = {asked['num_speculative']}, block size {asked['block_size']}), with no model. Press **Start** "
            "to run the prompt under **Prompt and settings** on the loaded model instead.")
    room_answers.file_answers(lesson)

# the stage: the request's blocks, each pass's drafts filling slots and the rejected ones emptying again
last = len(lesson.records) - 1
step = stepped.step_in_view(STEPS, lesson, room)
stepped.stage(STEPS, stage_data(lesson, step, presenter), room)  # a follower's moves with the teacher
stepped.look_back(STEPS, step, last, "Look back at forward pass", base=1,
                  help="Passes are counted from 1: pass 1 is the prefill. Or step in the diagram (its arrows, "
                       "or ← → when it has the focus).")
stepped.files_expander(STEPS)
with st.expander("The idea: drafts, one pass to check them, rollback"):
    introduction()
rows = lesson.draft_steps()[:step + 1]
row = rows[-1]
summary = lesson.summary(step)
decode = lesson.decode

m = st.columns(4)
m[0].metric("Forward passes", summary["passes"], help="Each pass runs the last token and the drafts together.")
m[1].metric("Tokens generated", summary["tokens"],
            f"{summary['tokens'] - summary['plain_tokens']:+d} vs plain",  # short: a quarter of a projector's row
            delta_color="off", delta_arrow="off",
            help=f"Plain decoding has {summary['plain_tokens']} tokens after the same "
                 f"{summary['plain_passes']} passes.")
m[2].metric("Tokens per pass", f"{summary['tokens_per_pass']:.2f}", help="Plain decoding: 1.00.")
m[3].metric("Drafts accepted", f"{summary['accepted']} of {summary['proposed']}",
            f"{summary['acceptance']:.0%}" if summary["proposed"] else None, delta_color="off", delta_arrow="off")

st.markdown(f"**Forward pass {row.number}**: the drafts, and the model's verdict")
context = lesson.prompt_token_ids + lesson.output(step - 1) if step else lesson.prompt_token_ids
st.markdown(ss.draft_chips(row, decode, context), unsafe_allow_html=True)
if step == 0:
    st.caption("The prefill pass: the whole prompt runs and gives the first token. Drafts start at the next pass.")
elif not row.draft_token_ids:
    st.caption("The last tokens never appeared before in the text: no drafts, a plain one-token decode.")
else:
    rollback = (f"{len(row.rolled_back_slots)} cache slot(s) rolled back ({', '.join(map(str, row.rolled_back_slots))})"
                if row.rolled_back_slots else "nothing to roll back")
    freed = (f"; block(s) {', '.join(map(str, row.freed_block_ids))} went back to the pool"
             if row.freed_block_ids else "")
    st.caption(f"{len(row.draft_token_ids)} drafts, {row.num_accepted} accepted, {len(row.added_token_ids)} "
               f"token(s) kept from one pass; {rollback}{freed}.")

# once the drafts' run is done, the latest view shows plain decoding as far as it has got
plain_until = len(lesson.plain_records) - 1 if lesson.drafts_done and step == last else step
left, right = st.columns(2)
left.plotly_chart(figures.tokens_per_pass(rows), width="stretch")
right.plotly_chart(figures.race(lesson.tokens_by_pass(step), lesson.tokens_by_pass(plain_until, plain=True)),
                   width="stretch")

if lesson.finished:
    totals = lesson.totals()
    same = "the same tokens" if totals["same_tokens"] else "different tokens (a float tie broke the other way)"
    st.success(f"Both finished: {totals['passes']} forward passes with drafts against "
               f"{totals['plain_passes']} without, for {same}.")
elif lesson.drafts_done and not lesson.replay:
    st.info(f"Speculative decoding finished after {len(lesson.records)} passes; plain decoding is still going. "
            "Press **Run to the end** to see how many passes it needs.")

with st.expander("Every pass: drafts, verdicts, rollbacks", expanded=False):
    st.table(pd.DataFrame([{
        "pass": str(r.number), "drafts": plain(decode(r.draft_token_ids).replace("\n", "⏎")) or "—",
        "accepted": r.num_accepted, "kept": plain(decode(r.added_token_ids).replace("\n", "⏎")),
        "slots rolled back": len(r.rolled_back_slots),
        "freed block ids": ", ".join(map(str, r.freed_block_ids)) or "—"} for r in rows]).set_index("pass"))

st.markdown("**Generated so far**")
plain_passes = min(plain_until + 1, len(lesson.plain_records))
texts = pd.DataFrame([
    {"decoding": f"with drafts, {step + 1} passes", "text": plain(decode(lesson.output(step)))},  # st.table: markdown
    {"decoding": f"plain, {plain_passes} passes", "text": plain(decode(lesson.output(plain_until, plain=True)))},
]).set_index("decoding")
st.table(texts)

stepped.room_panel(STEPS, lesson, step, room)
show_code(propose_drafts, accept, Engine._roll_back, KVCacheManager.truncate,
          caption="Prompt lookup, greedy verification, and the rollback of the rejected drafts' cache slots.")
