"""The Prefill and decode lesson in class: its state in the URL, and predict-then-reveal."""

from __future__ import annotations

import streamlit as st

from kvviz.lessons.prefill_decode import predict
from kvviz.lessons.prefill_decode.inputs import PREFILL, RUN
from kvviz.ui.common import session_source
from kvviz.ui.session_keys import Keys

KEYS = Keys(clears=frozenset({"lesson_question_kind", "lesson_ask", "lesson_upload"}),
            made_per_question=("lesson_guess_",))  # one guess widget per question asked


def sync_query_params(prompt: str, step: int | None) -> str | None:
    """Keep what the lesson ran in the URL, so a link reopens the same tokens at the same step and view:
    model, prompt, tokens to generate, sampling (when not greedy: temperature, top-k, top-p, seed),
    step and view. state.restore_from_query reads them back. A prompt longer than MAX_LINK_PROMPT_CHARS
    stays out of the link (a server refuses an address that long before the app sees it): the sentence
    returned says so."""
    if len(prompt) > MAX_LINK_PROMPT_CHARS:
        for key in LINK_KEYS:
            st.query_params.pop(key, None)
        return (f"This prompt is too long for the page's link ({len(prompt):,} characters, at most "
                f"{MAX_LINK_PROMPT_CHARS:,}); export the lesson to share it.")
    params = {"model": session_source(), "prompt": prompt,
              "tokens": str(PREFILL.get("max_tokens", 48))}
    if not PREFILL.get("greedy", True):
        params |= {"greedy": "0", "temperature": f"{PREFILL.temperature:g}", "top_k": str(PREFILL.top_k),
                   "top_p": f"{PREFILL.top_p:g}", "seed": str(PREFILL.seed)}
    if step is not None:
        params["step"] = str(step)
    if PREFILL.view:
        params["view"] = PREFILL.view
    for key in LINK_KEYS - params.keys():
        st.query_params.pop(key, None)
    for key, value in params.items():
        if st.query_params.get(key) != value:
            st.query_params[key] = value
    return None


MAX_LINK_PROMPT_CHARS = 4000  # URL-encoded, several times this: well inside what servers and browsers take
LINK_KEYS = frozenset({"model", "prompt", "tokens", "greedy", "temperature", "top_k", "top_p", "seed", "step", "view"})


def predict_panel(lesson) -> None:
    questions = RUN.setdefault("questions", [])
    for question in questions:
        predict.reveal(question, lesson)
    right, answered = predict.score(questions)
    st.markdown(f"**Predict, then reveal** · score {right} / {answered}",
                help="Right answers out of the questions answered and revealed; one left blank is not scored.")
    a, b = st.columns([3, 1])
    kind = a.selectbox("Question", predict.QUESTION_KINDS, key="lesson_question_kind",
                       format_func=lambda k: {"bytes_after_five": "Bytes after five more tokens?",
                                              "blocks_after_next": "Blocks after the next step?"}[k])
    why_not = predict.refusal(lesson, kind)  # a question whose reveal can never come is not offered
    if why_not:
        st.caption(why_not)
    if b.button("Ask", key="lesson_ask", width="stretch", disabled=why_not is not None):
        try:
            questions.append(predict.ask(lesson, kind))
        except ValueError as error:
            st.error(str(error))
    open_questions = [q for q in questions if not q.revealed]
    for index, question in enumerate(open_questions):
        st.markdown(question.text)
        question.guess = st.number_input(f"Your guess ({question.unit})", min_value=0.0, step=1.0, value=None,
                                         key=f"lesson_guess_{question.asked_at}_{question.kind}",
                                         placeholder="Type a number; a blank guess is not scored")
        st.caption(f"Step to {question.target} to see the engine's answer.")
    for question in reversed([q for q in questions if q.revealed][-3:]):
        st.markdown(predict.verdict(question))
