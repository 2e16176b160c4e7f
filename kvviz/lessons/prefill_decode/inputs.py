"""The Prefill and decode page's session state, declared once: its run's keys (STEP_KEYS, read and written through
RUN: the run, its step in view, its error, its questions, Play) and its inputs (PREFILL: the prompt, the sampling,
the view, the link read once). The state module, the classroom parts and the page read them as attributes."""

from __future__ import annotations

from kvviz.lessons.stepped import StepKeys, StepState
from kvviz.ui.session_keys import SessionState, Slot

STEP_KEYS = StepKeys("lesson_", view="lesson_view_step", asks=True, plays=True)
RUN = StepState(STEP_KEYS)


class PrefillState(SessionState):
    """The page's inputs: widgets, and what a link or a room sets in them."""

    prompt = Slot("lesson_prompt")
    example = Slot("lesson_example")  # the example prompt picked (None once the prompt is edited)
    max_tokens = Slot("lesson_max_tokens")
    greedy = Slot("lesson_greedy")
    temperature = Slot("lesson_temperature")
    top_k = Slot("lesson_top_k")
    top_p = Slot("lesson_top_p")
    seed = Slot("lesson_seed")
    chat = Slot("lesson_chat")  # the prompt goes through the model's chat template
    chat_chosen = Slot("lesson_chat_chosen")  # chat was set once for this session's model
    view = Slot("lesson_view")  # the views' tab
    query_done = Slot("lesson_query_done")  # the link was read (once a session)


PREFILL = PrefillState()
