"""Session state and button callbacks of the "Prefill and decode" lesson.

Everything lives in st.session_state under the keys in KEYS, so each browser session keeps its
own engine and records; the model itself is shared read-only. reset() clears them all when
another model loads (the inputs too: their defaults and the layer choices fit the old model).
"""

from __future__ import annotations

import time

import streamlit as st

from kvviz.engine import EngineError
from kvviz.lessons.budget import WorkTooLarge, check_click, click_seconds
from kvviz.lessons.prefill_decode.logic import (
    MAX_LESSON_TOKENS,
    Lesson,
    LessonSettings,
    furthest_step,
    lesson_sampling,
    lesson_work,
)
from kvviz.ui import live_lessons
from kvviz.ui.common import current_model, drop, load_linked_model, page_sampling
from kvviz.ui.stage import chosen_step
from kvviz.ui.text import plain

EXAMPLE_PROMPTS = [
    "ROMEO:\nBut soft, what light through yonder window breaks?",
    "JULIET:\n",
    "First Citizen:\nBefore we proceed any further, hear me speak.",
    "KING:\nNow is the winter of our discontent",
]


PAGE_SAMPLING = lesson_sampling(max_tokens=48, temperature=0.8, top_k=40, top_p=0.95)  # when not greedy
DEFAULTS = {"lesson_prompt": EXAMPLE_PROMPTS[0], "lesson_example": EXAMPLE_PROMPTS[0],
            "lesson_max_tokens": PAGE_SAMPLING.max_tokens, "lesson_greedy": True,
            "lesson_temperature": PAGE_SAMPLING.temperature, "lesson_top_k": PAGE_SAMPLING.top_k,
            "lesson_top_p": PAGE_SAMPLING.top_p, "lesson_seed": PAGE_SAMPLING.seed}
KEYS = frozenset(DEFAULTS) | {  # the run, the player, the views' choices and the link's one reading
    "lesson", "lesson_view_step", "lesson_playing", "lesson_error", "lesson_questions", "lesson_last_tick",
    "lesson_ticker_inline", "lesson_query_done", "lesson_speed", "lesson_view", "lesson_kv_layer",
    "lesson_kv_head", "lesson_attention_layer", "lesson_stage", "lesson_stepped"}


def set_defaults() -> None:
    """Widget values live in session state, so callbacks and links can set them."""
    for key, value in DEFAULTS.items():
        st.session_state.setdefault(key, value)


def lesson() -> Lesson | None:
    current = st.session_state.get("lesson")
    if current is not None and current.released:  # freed while this session was away
        st.session_state.pop("lesson")
        return None
    return current


def setting(key: str):
    return st.session_state.get(key, DEFAULTS[key])


def _settings() -> LessonSettings:
    """The page's controls as the lesson's settings: the prompt and a SamplingParams."""
    sampling = lesson_sampling(max_tokens=int(setting("lesson_max_tokens")), seed=int(setting("lesson_seed")))
    return LessonSettings(setting("lesson_prompt"), page_sampling(setting, "lesson_", sampling))


def on_prefill() -> None:
    """Build a fresh lesson from the prompt box and run the prefill step."""
    st.session_state.pop("lesson_error", None)
    try:
        new = Lesson.start(current_model(), _settings())
    except EngineError as error:
        st.session_state["lesson_error"] = str(error)  # the previous lesson stays as it was
        return
    refusal = live_lessons.admit(new)
    if refusal is not None:
        st.session_state["lesson_error"] = refusal
        return
    try:
        new.prefill()
    except EngineError as error:  # the model's logits are NaN or infinite: the engine stopped the request
        st.session_state["lesson_error"] = str(error)
        return
    st.session_state["lesson"] = new
    st.session_state["lesson_view_step"] = 0
    st.session_state["lesson_questions"] = []


def on_next_token() -> None:
    current = lesson()
    if current is None:
        on_prefill()
        return
    try:
        stepped = current.next_token()
    except EngineError as error:  # NaN or infinite logits midway: the lesson keeps the steps it has
        st.session_state["lesson_error"] = str(error)
        st.session_state["lesson_playing"] = False
        return
    if stepped is not None:
        st.session_state["lesson_view_step"] = len(current.visible_records) - 1
        st.session_state["lesson_stepped"] = True  # not a widget's key: no browser's value overwrites it
    if current.finished:
        st.session_state["lesson_playing"] = False


def on_toggle_play() -> None:
    st.session_state["lesson_playing"] = not st.session_state.get("lesson_playing", False)
    if st.session_state["lesson_playing"]:  # the first step comes one beat after Play, like the rest
        st.session_state["lesson_last_tick"] = time.time()
    elif (current := lesson()) is not None:
        # Pause stops on the newest step. The ticker may have stepped in a run the browser never
        # drew, and the slider value sent with this press is then one step behind.
        st.session_state["lesson_view_step"] = len(current.visible_records) - 1


def on_stage_step() -> None:
    """The stage moved to another step in the browser: the views below follow it. A replay reveals
    the steps up to it; moving by hand pauses Play."""
    current, chosen = lesson(), chosen_step("lesson_stage")
    if current is None or chosen is None:
        return
    if current.replay:
        current.replay_position = max(current.replay_position, min(int(chosen), len(current.records) - 1))
    st.session_state["lesson_view_step"] = min(int(chosen), len(current.visible_records) - 1)
    st.session_state["lesson_playing"] = False


def view_step(last_step: int, playing: bool) -> int:
    """The step the views show: the newest while playing, else the one chosen (Pause keeps it).

    Written back before the slider is drawn: the slider's maximum grows with every step, which
    gives it a new identity, and Streamlit would otherwise reset it to step 0.

    After a step (Next token, or Play's tick) the newest: Play's ticks at "fast" come faster than its
    steps, and the browser's requests that piled up carry the slider it drew a step before; they
    overwrite lesson_view_step, and the last tick, which ends Play, left the page one step short of
    the end ("Step 46 of 47", no "Done.")."""
    chosen = st.session_state.get("lesson_view_step", last_step)
    stepped = st.session_state.pop("lesson_stepped", False)
    step = last_step if playing or stepped else min(int(chosen), last_step)
    st.session_state["lesson_view_step"] = step
    return step


def on_reset() -> None:
    for key in ("lesson", "lesson_view_step", "lesson_playing", "lesson_error", "lesson_questions"):
        st.session_state.pop(key, None)


def reset(state) -> None:
    """Forget this lesson's run when another model loads: it belongs to the model it ran on."""
    drop(state, KEYS)


# what a link may set, with the bounds of the page's own widgets: key -> (session key, type, low, high)
LINK_SETTINGS = {"tokens": ("lesson_max_tokens", int, 1, MAX_LESSON_TOKENS),
                 "temperature": ("lesson_temperature", float, 0.1, 2.0), "top_k": ("lesson_top_k", int, 0, 200),
                 "top_p": ("lesson_top_p", float, 0.05, 1.0), "seed": ("lesson_seed", int, 0, 2**31 - 1)}
VIEWS = ("Cache per layer", "Keys and values", "Attention", "Inside attention", "Work saved", "Memory bill",
              "Why decode is memory-bound")  # the page's views, in its order


def _link_settings(params) -> list[str]:
    """Set the widgets a link names (tokens, sampling, view); returns one sentence per value refused."""
    notes = []
    for name, (key, kind, low, high) in LINK_SETTINGS.items():
        if name not in params:
            continue
        try:
            value = kind(params[name])
        except ValueError:
            notes.append(f"The link's {name} {plain(repr(params[name][:20]))} is not a number; it keeps {DEFAULTS[key]}.")
            continue
        if not low <= value <= high:  # NaN too
            notes.append(f"The link's {name} {plain(params[name][:20])} is outside {low}-{high}; it keeps {DEFAULTS[key]}.")
            continue
        st.session_state[key] = value
    st.session_state["lesson_greedy"] = params.get("greedy", "1") != "0"
    if "view" in params:
        if params["view"] in VIEWS:
            st.session_state["lesson_view"] = params["view"]
        else:
            notes.append(f"The link's view {plain(repr(params['view'][:40]))} is not one of this page's; showing the cache.")
    return notes


def restore_from_query() -> None:
    """Open the lesson a link describes (?model=...&prompt=...&tokens=..&step=N&view=..., and the
    sampling when not greedy), once per session: the same tokens on the same model at the same step."""
    params = st.query_params
    if st.session_state.get("lesson_query_done"):
        return
    if "prompt" not in params:
        st.session_state["lesson_query_done"] = True
        return
    before = st.session_state.get("model_source")
    model_note = load_linked_model(params["model"]) if "model" in params else None
    if st.session_state.get("model_source") != before:
        st.rerun()  # once more with the link's model loaded, so the sidebar names the model the lesson runs on
    st.session_state["lesson_query_done"] = True  # only the first run of a session reads the link
    st.session_state["lesson_prompt"] = params["prompt"]
    on_prompt_edit()
    notes = _link_settings(params) + ([plain(model_note)] if model_note else [])  # it quotes the link's model
    if "step" in params:
        try:
            target = max(0, int(params["step"]))
        except ValueError:
            notes.append("The link's step is not a number; showing the lesson from prefill.")
            target = 0
        last = MAX_LESSON_TOKENS - 1  # a lesson of the slider's most tokens ends at this step
        if target > last:
            notes.append(f"The link's step {target:,} is past the last step a lesson reaches; showing step {last}.")
            target = last
        run_to_step(target)
    if notes:  # before what the run said (a refusal, or the budget's stop)
        st.session_state["lesson_error"] = " ".join(notes + [st.session_state.get("lesson_error", "")]).strip()


def run_to_step(target: int) -> None:
    """A new lesson from the page's settings, run to step `target` (tokens to generate raised to
    reach it, up to the most a lesson may ask for): a link's or a room's lesson, made one's own.

    Its work is estimated first (kvviz.lessons.budget): past one click's budget the lesson stops at
    the furthest step the budget allows and says so; Next token and Play go on from there. A prefill
    alone past the budget is refused in one sentence, and the session keeps what it had."""
    st.session_state["lesson_max_tokens"] = min(max(int(setting("lesson_max_tokens")), target + 1),
                                                MAX_LESSON_TOKENS)
    lm = current_model()
    device = next(lm.model.parameters()).device
    prompt_tokens = len(lm.tokenizer(str(setting("lesson_prompt")))["input_ids"]) if lm.tokenizer else 1
    reachable = furthest_step(lm, prompt_tokens, target, device)
    if reachable < 0:  # not even the prefill fits: check_click says so
        try:
            check_click(lesson_work(lm, prompt_tokens, 0), device, "This lesson's prefill", "use a shorter prompt")
        except WorkTooLarge as refusal:
            st.session_state["lesson_error"] = str(refusal)
            return
    note = None
    if reachable < target:
        seconds = lesson_work(lm, prompt_tokens, target).seconds(device)
        note = (f"Step {target:,} would take about {seconds:,.0f} s to reach on this server, more than the "
                f"{click_seconds():,.0f} s one click may take, so the lesson stops at step {reachable:,}; press "
                "Next token or Play to go on from there.")
        target = reachable
    on_prefill()
    for _ in range(target):  # at most one real step per step asked for
        current = lesson()
        if current is None or current.finished:
            break
        on_next_token()
    if note is not None and "lesson_error" not in st.session_state:
        st.session_state["lesson_error"] = note


def on_example() -> None:
    if st.session_state.get("lesson_example") is not None:
        st.session_state["lesson_prompt"] = st.session_state["lesson_example"]


def on_prompt_edit() -> None:
    """The example box names the prompt in the text box, or none when it is not one of them."""
    prompt = st.session_state.get("lesson_prompt")
    st.session_state["lesson_example"] = prompt if prompt in EXAMPLE_PROMPTS else None


def stop_note(lesson: Lesson) -> str | None:
    """Why a finished lesson generated fewer tokens than asked, in one sentence; None if it did not."""
    generated = len(lesson.token_texts) - len(lesson.prompt_token_ids)
    asked, context = lesson.settings.sampling.max_tokens, lesson.model_info.get("max_context")
    if not lesson.finished or generated >= asked or context is None:
        return None
    return (f"It stopped after {generated} of the {asked} tokens asked for: the prompt's "
            f"{len(lesson.prompt_token_ids)} tokens and the generated ones filled the model's context of "
            f"{context} tokens. Use a shorter prompt to generate more.")
