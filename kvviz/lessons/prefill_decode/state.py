"""Session state and link reading of the "Prefill and decode" lesson; its run steps through kvviz.lessons.stepped.

Everything lives in st.session_state under the keys STEPS and KEYS declare, so each browser session keeps its
own engine and records; the model itself is shared read-only. reset() clears them all when
another model loads (the inputs too: their defaults and the layer choices fit the old model).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import streamlit as st

from kvviz.engine.chat import chat_prompt, has_chat_template
from kvviz.lessons import stepped
from kvviz.lessons.budget import WorkTooLarge, check_click, click_seconds, says
from kvviz.lessons.prefill_decode.logic import (
    MAX_LESSON_TOKENS,
    PrefillLesson,
    LessonSettings,
    furthest_step,
    lesson_sampling,
    lesson_work,
    steps_text,
)
from kvviz.lessons.prefill_decode import room
from kvviz.lessons.prefill_decode.inputs import PREFILL, RUN, STEP_KEYS
from kvviz.lessons.prefill_decode.file import export_lesson, import_lesson
from kvviz.lessons.prefill_decode.stage import stage_data
from kvviz.lessons.room_view import InRoom
from kvviz.models import default_heldout_text
from kvviz.ui.common import MODEL, current_model, load_linked_model, page_sampling
from kvviz.ui.progress import StopBar
from kvviz.ui.session_keys import Keys
from kvviz.ui.text import plain

CHAT_EXAMPLE = "In one sentence: why does a language model keep a cache of keys and values?"  # a chat model's first
EXAMPLE_PROMPTS = [
    "ROMEO:\nBut soft, what light through yonder window breaks?",
    "JULIET:\n",
    "First Citizen:\nBefore we proceed any further, hear me speak.",
    "KING:\nNow is the winter of our discontent",
    CHAT_EXAMPLE,
]


def _past_the_window() -> str:
    """A scene of Julius Caesar from the bundled model's held-out text, about 2,000 characters (560 of Gemma 3's
    tokens): past a sliding layer's window of 512, so the stage shows Gemma 3's sliding layers giving blocks back."""
    text = default_heldout_text()
    scene = text.find("\n\nCICERO:\nIndeed, it is a strange-disposed time.")
    start = text.rfind("\n\n", 0, max(scene - 900, 0)) + 2
    passage = text[start:start + 2000]
    return passage[:passage.rfind("\n") + 1]


PAST_THE_WINDOW = _past_the_window()


def example_prompts(info: dict) -> list[str]:
    """The example prompts offered for a model (a describe() summary): with sliding layers, one past the window too."""
    return EXAMPLE_PROMPTS + ([PAST_THE_WINDOW] if info.get("sliding_window") and info.get("layer_types") else [])


def example_label(prompt: str) -> str:
    """An example prompt as the picker shows it: one line, a long one cut and counted."""
    if prompt == PAST_THE_WINDOW:
        return f"A scene of Julius Caesar ({len(prompt):,} characters): past the 512-token sliding window"
    return prompt.replace("\n", " ⏎ ")


PAGE_SAMPLING = lesson_sampling(max_tokens=48, temperature=0.8, top_k=40, top_p=0.95)  # when not greedy
DEFAULTS = {"lesson_prompt": EXAMPLE_PROMPTS[0], "lesson_example": EXAMPLE_PROMPTS[0],
            "lesson_max_tokens": PAGE_SAMPLING.max_tokens, "lesson_greedy": True,
            "lesson_temperature": PAGE_SAMPLING.temperature, "lesson_top_k": PAGE_SAMPLING.top_k,
            "lesson_top_p": PAGE_SAMPLING.top_p, "lesson_seed": PAGE_SAMPLING.seed,
            "lesson_chat": False}


def set_defaults() -> None:
    """Widget values live in session state, so callbacks and links can set them. Chat starts on for a model
    with a chat template (SmolLM2-Instruct answers a message; without its template it rambles on)."""
    for key, value in DEFAULTS.items():
        st.session_state.setdefault(key, value)
    if not PREFILL.has("chat_chosen"):
        PREFILL.chat_chosen = True
        PREFILL.chat = chat = has_chat_template(current_model().tokenizer)
        if chat and PREFILL.prompt == DEFAULTS["lesson_prompt"]:  # a question, for a chat model
            PREFILL.prompt = PREFILL.example = CHAT_EXAMPLE


def setting(key: str):
    return st.session_state.get(key, DEFAULTS[key])


def _settings() -> LessonSettings:
    """The page's controls as the lesson's settings: the prompt and a SamplingParams."""
    sampling = lesson_sampling(max_tokens=int(setting("lesson_max_tokens")), seed=int(setting("lesson_seed")))
    return LessonSettings(setting("lesson_prompt"), page_sampling(setting, "lesson_", sampling),
                          chat=bool(setting("lesson_chat")) and has_chat_template(current_model().tokenizer))


def lesson() -> PrefillLesson | None:
    return stepped.current(STEPS)


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
            notes.append(f"The link's {name} {plain(repr(params[name][:20]))} is not a number; "
                         f"it keeps {DEFAULTS[key]}.")
            continue
        if not low <= value <= high:  # NaN too
            notes.append(f"The link's {name} {plain(params[name][:20])} is outside {low}-{high}; "
                         f"it keeps {DEFAULTS[key]}.")
            continue
        st.session_state[key] = value
    PREFILL.greedy = params.get("greedy", "1") != "0"
    if "view" in params:
        if params["view"] in VIEWS:
            PREFILL.view = params["view"]
        else:
            notes.append(f"The link's view {plain(repr(params['view'][:40]))} is not one of this page's; "
                         "showing the cache.")
    return notes


def restore_from_query() -> None:
    """Open the lesson a link describes (?model=...&prompt=...&tokens=..&step=N&view=..., and the
    sampling when not greedy), once per session: the same tokens on the same model at the same step. A link
    with a step and no prompt opens the page's own prompt at that step."""
    params = st.query_params
    if PREFILL.query_done:
        return
    if "prompt" not in params and "step" not in params:  # a link to the page, or to a model on it
        PREFILL.query_done = True
        return
    before = MODEL.source
    model_note = load_linked_model(params["model"]) if "model" in params else None
    if MODEL.source != before:
        st.rerun()  # once more with the link's model loaded, so the sidebar names the model the lesson runs on
    PREFILL.query_done = True  # only the first run of a session reads the link
    if "prompt" in params:  # else a link to a step runs the page's own prompt (once quietly ignored)
        PREFILL.prompt = params["prompt"]
        on_prompt_edit()
    notes = _link_settings(params) + ([plain(model_note)] if model_note else [])  # it quotes the link's model
    if "step" in params:
        try:
            target = int(params["step"][:12])  # longer is past the last step anyway: never parse 4,000 digits
        except ValueError:
            notes.append("The link's step is not a number; showing the lesson from prefill.")
            target = 0
        if len(params["step"]) > 12 and target >= 0:
            notes.append(f"The link's step ({len(params['step']):,} digits) is past the last step a lesson "
                         f"reaches; showing step {MAX_LESSON_TOKENS - 1}.")
            target = MAX_LESSON_TOKENS - 1
        if target < 0:
            notes.append(f"The link's step {target:,} is before the prefill (step 0); showing the prefill.")
            target = 0
        last = MAX_LESSON_TOKENS - 1  # a lesson of the slider's most tokens ends at this step
        if target > last:
            notes.append(f"The link's step {target:,} is past the last step a lesson reaches; showing step {last}.")
            target = last
        slot = st.empty()  # the run's progress bar and Stop, where the page will draw
        run_to_step(target, slot)
        slot.empty()
    if notes:  # before what the run said (a refusal, or the budget's stop)
        RUN.error = " ".join(notes + [RUN.get("error", "")]).strip()


MAX_PROMPT_CHARS = 100_000  # past any context a lesson's model has (32,768 tokens of Gemma 3 are about this)


def prompt_too_long() -> str | None:
    """The sentence refusing the page's prompt when it is longer than any lesson can take, checked before it is
    tokenized: the box's limit is the browser's, and a script's 20 MB prompt cost 24 CPU s and 2.9 GiB to tokenize."""
    length = len(str(setting("lesson_prompt")))
    if length <= MAX_PROMPT_CHARS:
        return None
    return (f"The prompt is {length:,} characters long, more than the {MAX_PROMPT_CHARS:,} a lesson takes; "
            "use a shorter one.")


def _model_and_prompt():
    """The loaded model, its device, and how many tokens the page's prompt is: what an estimate needs."""
    lm = current_model()
    prompt = str(setting("lesson_prompt"))
    device = next(lm.model.parameters()).device
    if lm.tokenizer is None:
        return lm, device, 1
    if _settings().chat:  # the template's tokens are prefilled too: 7 typed tokens were 37 on SmolLM2
        try:
            return lm, device, len(chat_prompt(lm.tokenizer, prompt).token_ids)
        except ValueError:  # the lesson itself will say what is wrong with the message
            pass
    return lm, device, len(lm.tokenizer(prompt)["input_ids"])


def prefill() -> None:
    """Prefill pressed: a new lesson from the page's settings, its prompt through the model, in the page's
    script under a spinner that names the work, its estimate and the seconds so far (shown past 0.5 s: a
    long prompt on a deep model). One forward pass cannot stop midway, so there is no Stop."""
    if prompt_too_long():
        RUN.error = prompt_too_long()
        return
    lm, device, prompt_tokens = _model_and_prompt()
    work = lesson_work(lm, prompt_tokens, 0)
    seconds = work.seconds(device)
    passes = ("twice (with the cache and without)" if work.steps == 2
              else "once (too long for the no-cache twin to run it again at each step)")
    with st.spinner(f"Prefill: {prompt_tokens:,} prompt tokens through the model's {lm.shape.num_layers} layers "
                    f"in one pass, {passes}; estimated about {seconds:,.1f} s on this "
                    f"server, {says(device, 'lesson')}", show_time=True):
        stepped.start(STEPS)


def run_to_step(target: int, slot=None, what: str = "the link's lesson", started: Callable | None = None) -> None:
    """A new lesson from the page's settings, run to step `target` (tokens to generate raised to
    reach it, up to the most a lesson may ask for): a link's or a room's lesson, made one's own.

    Its work is estimated first (kvviz.lessons.budget): past one click's budget the lesson stops at
    the furthest step the budget allows and says so; Next token and Play go on from there. A prefill
    alone past the budget is refused in one sentence, and the session keeps what it had. With `slot`
    (an st.empty()), a progress bar with a Stop button counts the steps there, naming the run `what`;
    Stop leaves the lesson at the step it reached, with a sentence saying so. `started()` runs once the
    lesson's prefill ran, before the steps after it."""
    PREFILL.max_tokens = min(max(int(setting("lesson_max_tokens")), target + 1),
                                                MAX_LESSON_TOKENS)
    if prompt_too_long():
        RUN.error = prompt_too_long()
        return
    lm, device, prompt_tokens = _model_and_prompt()
    reachable = furthest_step(lm, prompt_tokens, target, device)
    if reachable < 0:  # not even the prefill fits: check_click says so
        try:
            check_click(lesson_work(lm, prompt_tokens, 0), device, "This lesson's prefill", "use a shorter prompt")
        except WorkTooLarge as refusal:
            RUN.error = str(refusal)
            return
    note = None
    if reachable < target:
        seconds = lesson_work(lm, prompt_tokens, target).seconds(device)
        note = (f"Step {target:,} would take about {seconds:,.0f} s to reach on this server, more than the "
                f"{click_seconds():,.0f} s one click may take, so the lesson stops at step {reachable:,}; press "
                "Next token or Play to go on from there.")
        target = reachable
    bar = stopped = None
    if slot is not None and target > 0:
        seconds = lesson_work(lm, prompt_tokens, target).seconds(device)
        bar = StopBar(slot, "lesson_link_stop", f"Estimated about {seconds:,.0f} s on this server, "
                      f"{says(device, 'lesson')}; opening {what} at step {target:,}",
                      "Ends at the step reached; Next token and Play go on.")
    stepped.start(STEPS)
    if started is not None and lesson() is not None:
        started()
    if bar is not None and not RUN.has("error"):
        # said if Stop ends this run (the page's next run finds it); taken back below when the run ends
        stopped = RUN.error = (f"Stopped before step {target:,}: the lesson shows the step it "
                               "reached; press Next token or Play to go on from there.")
    started_at, budget = time.perf_counter(), click_seconds()
    for done in range(target):  # at most one real step per step asked for
        current = lesson()
        if current is None or current.finished:
            break
        elapsed = time.perf_counter() - started_at
        if elapsed > budget:  # measured, not estimated: a busier server than the estimate assumed stops here too
            note = (f"Stopped at step {done:,} after {elapsed:,.0f} s, the {budget:,.0f} s one click may take on this "
                    "server (it is busier than the estimate assumed); press Next token or Play to go on from there.")
            break
        stepped.step(STEPS)
        if bar is not None:  # the rest re-estimated from this run's own pace
            left = (time.perf_counter() - started_at) / (done + 1) * (target - done - 1)
            bar.move((done + 1) / target, f"{what[0].upper()}{what[1:]}: step {done + 1:,} of {target:,}, "
                                          f"about {left:,.0f} s left at this run's pace", left=False)
    if stopped is not None and RUN.error == stopped:
        del RUN.error
    if note is not None and not RUN.has("error"):
        RUN.error = note


def on_example() -> None:
    if PREFILL.example is not None:
        PREFILL.prompt = PREFILL.example


def on_prompt_edit() -> None:
    """The example box names the prompt in the text box, or none when it is not one of them."""
    prompt = PREFILL.prompt
    PREFILL.example = prompt if prompt in EXAMPLE_PROMPTS + [PAST_THE_WINDOW] else None


def step_sentence(lesson: PrefillLesson, step: int) -> str:
    """What the step in view did, in one sentence or two over the stage (markdown)."""
    info, last_step = lesson.model_info, len(lesson.visible_records) - 1
    if step == 0:
        return (f"**Prefill.** All {len(lesson.prompt_token_ids)} prompt tokens ran through the model in one "
                f"pass; each of the {info['layers']} layers now holds their keys and values, and the last "
                "position's output picked the first new token.")
    slid = sorted({block for event in lesson.records[step].events if event.kind == "slide"
                   for block in event.block_ids})
    if slid:  # a sliding window passed whole blocks in this step: say it where the class reads
        window = info.get("sliding_window")
        return (f"**Decode step {step}.** The newest token joined every layer's cache, and the sliding layers' "
                f"window of {window:,} moved past {'blocks' if len(slid) > 1 else 'block'} "
                f"{', '.join(map(str, slid))}: given back to their pool (struck through in their table), while the "
                f"full layers keep all {lesson.num_tokens_at(step)} positions.")
    if not lesson.finished or step < last_step:
        return (f"**Decode step {step}.** Only the newest token ran: its key and value joined every layer's "
                f"cache (red outline), and its query read all {lesson.num_tokens_at(step)} cached positions, which "
                "were read, not recomputed.")
    return (f"**Done.** {steps_text(len(lesson.records)).capitalize()}, one token each against the growing cache; "
            "**Work saved** adds up what recomputing would have cost. " + (stop_note(lesson) or ""))


def stop_note(lesson: PrefillLesson) -> str | None:
    """Why a finished lesson generated fewer tokens than asked, in one sentence; None if it did not."""
    generated = len(lesson.token_texts) - len(lesson.prompt_token_ids)
    asked, context = lesson.settings.sampling.max_tokens, lesson.model_info.get("max_context")
    if not lesson.finished or generated >= asked or context is None:
        return None
    if len(lesson.prompt_token_ids) + generated < context:  # a stop token ended it: a chat model's end of turn
        return (f"It stopped after {generated} of the {asked} tokens asked for: the model ended its turn with "
                f"“{plain(lesson.token_texts[-1])}”, as a chat model does.")
    return (f"It stopped after {generated} of the {asked} tokens asked for: the prompt's "
            f"{len(lesson.prompt_token_ids)} tokens and the generated ones filled the model's context of "
            f"{context} tokens. Use a shorter prompt to generate more.")


class PrefillSteps(stepped.Stepped, InRoom):
    """Prefill and decode taken a token at a time, with Play; a room follows it, and its page asks questions."""

    keys = STEP_KEYS
    page, file_name, admit = "prefill_decode", "kvviz-lesson.json", True
    settings = frozenset(DEFAULTS) | {  # the player, the views' choices and the link's one reading
        "lesson_last_tick", "lesson_ticker_inline", "lesson_query_done", "lesson_link_stop", "lesson_speed",
        "lesson_view", "lesson_chat_chosen",
        "lesson_kv_layer", "lesson_kv_head", "lesson_attention_layer", "lesson_stage"}

    def new(self) -> PrefillLesson:
        return PrefillLesson.start(current_model(), _settings())

    def first(self, run: PrefillLesson):
        return run.prefill()

    def step(self, run: PrefillLesson):
        return run.next_token()

    def export(self, run: PrefillLesson, step: int) -> str:
        return export_lesson(run)

    def read_file(self, data: bytes) -> tuple[PrefillLesson, int]:
        return import_lesson(data), 0

    def last(self, run: PrefillLesson) -> int:
        return len(run.visible_records) - 1

    def done(self, run: PrefillLesson) -> bool:
        return run.finished

    def reveal(self, run: PrefillLesson, step: int) -> None:
        """A replay stepped by hand shows the steps up to the one chosen."""
        if run.replay:
            run.replay_position = max(run.replay_position, min(step, len(run.records) - 1))

    def exportable(self, run: PrefillLesson) -> bool:
        return run.started

    def follower(self, run: PrefillLesson, step: int) -> PrefillLesson:
        return room.follower(run, step)

    def take_over(self, teacher: PrefillLesson, step: int, slot, started: Callable) -> None:
        """Take over in a room: the teacher's prompt and sampling run to `step` on this session's own engine,
        counted by a bar with Stop in `slot`; `started()` once the prefill ran."""
        sampling = teacher.settings.sampling
        st.session_state.update({
            "lesson_prompt": teacher.settings.prompt, "lesson_max_tokens": sampling.max_tokens,
            "lesson_greedy": sampling.temperature == 0, "lesson_seed": sampling.seed or 0})
        if sampling.temperature:
            st.session_state.update({"lesson_temperature": sampling.temperature, "lesson_top_k": sampling.top_k,
                                     "lesson_top_p": sampling.top_p})
        on_prompt_edit()
        run_to_step(step, slot, "your own copy of the lesson", started)

    def stage_data(self, run: PrefillLesson, step: int, presenter: bool) -> dict:
        return stage_data(run, step, presenter)

    def questions(self, run: PrefillLesson) -> list:
        return room.questions(run)

    def sentence(self, run: PrefillLesson, step: int) -> str:
        return step_sentence(run, step)


STEPS = PrefillSteps()
KEYS = Keys(clears=STEPS.cleared_keys(),
            kept=("lesson_kv_layer", "lesson_kv_head", "lesson_attention_layer"))  # the views' choices
