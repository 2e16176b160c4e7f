"""Record a stepped lesson on a model with no browser, as its page would at its defaults, into a lesson file.

    text = record_lesson(STEPPED_BY_KEY["speculative"], lm, prompt=None, tokens=None)

Each lesson starts from its page's settings (the defaults its state module names) with `prompt` and `tokens`
in place of the page's where given, runs its first step and every step after it until it ends, and is exported
as the page's Export lesson writes it.
"""

from __future__ import annotations

from kvviz.engine.chat import has_chat_template
from kvviz.lessons.lecture import by_key, stepped
from kvviz.lessons.paged_batching import state as paged_state
from kvviz.lessons.paged_batching.logic import PagedLesson, RequestSpec
from kvviz.lessons.prefill_decode import state as prefill_state
from kvviz.lessons.prefill_decode.logic import MAX_LESSON_TOKENS, PrefillLesson, LessonSettings, lesson_sampling
from kvviz.lessons.speculative import state as speculative_state
from kvviz.lessons.speculative.logic import SpeculativeLesson
from kvviz.page.build import lecture_index, web_page

STEPPED_BY_KEY = {lesson.page: lesson for lesson in stepped()}  # in lecture order


def record_lesson(lesson, lm, prompt: str | None = None, tokens: int | None = None, chat: bool | None = None) -> str:
    """The lesson file of a whole run of `lesson` (a Stepped) on `lm`. Raises EngineError (a ValueError) with
    one sentence for settings the lesson refuses."""
    check_settings(lesson.page, prompt, tokens, chat)
    run = NEW_RUN[lesson.page](lm, prompt, tokens, chat)
    (lesson.first or lesson.step)(run)
    while lesson.step(run):
        pass
    return lesson.export(run, 0)


def check_settings(key: str, prompt: str | None, tokens: int | None, chat: bool | None) -> None:
    """Refuse, in one sentence, settings lesson `key` does not take, before any model loads."""
    if key == "paged_batching" and (prompt is not None or tokens is not None or chat is not None):
        raise ValueError("Paged cache and batching records its page's four requests as they are; leave out "
                         "--prompt, --tokens and --chat for it.")
    if prompt is not None and len(prompt) > prefill_state.MAX_PROMPT_CHARS:
        raise ValueError(f"The prompt is {len(prompt):,} characters long, more than the "
                         f"{prefill_state.MAX_PROMPT_CHARS:,} a lesson takes; use a shorter one.")
    if key == "speculative" and chat is not None:
        raise ValueError("Speculative decoding runs its prompt as text, with no chat template; leave out --chat.")
    fewest, most = speculative_state.MAX_TOKENS if key == "speculative" else (1, MAX_LESSON_TOKENS)
    if tokens is not None and not fewest <= tokens <= most:
        raise ValueError(f"{by_key(key).title} generates {fewest} to {most} tokens, as its page's slider offers, "
                         f"not {tokens}.")


def _prefill_decode(lm, prompt, tokens, chat) -> PrefillLesson:
    """The page's settings: greedy, 48 tokens; with a chat template, chat on and its example question."""
    defaults = prefill_state.DEFAULTS
    chat = has_chat_template(lm.tokenizer) if chat is None else chat
    if chat and not has_chat_template(lm.tokenizer):
        raise ValueError(f"{lm.name} has no chat template, so --chat cannot apply one; leave it out.")
    if prompt is None:
        prompt = prefill_state.CHAT_EXAMPLE if chat else defaults["lesson_prompt"]
    sampling = lesson_sampling(max_tokens=defaults["lesson_max_tokens"] if tokens is None else tokens,
                               seed=defaults["lesson_seed"])
    return PrefillLesson.start(lm, LessonSettings(prompt, sampling, chat=chat))


def _paged_batching(lm, prompt, tokens, chat) -> PagedLesson:
    """The page's four requests into its pool; they are the lesson, so no prompt or length of one's own."""
    defaults = paged_state.DEFAULTS
    specs = [RequestSpec(row["prompt"], row["arrives at step"], row["max tokens"]) for row in paged_state.DEFAULT_TABLE]
    return PagedLesson.start(lm, specs, defaults["paged_block_size"], defaults["paged_num_blocks"],
                             defaults["paged_prefix"])


def _speculative(lm, prompt, tokens, chat) -> SpeculativeLesson:
    defaults = speculative_state.DEFAULTS
    return SpeculativeLesson.start(lm, defaults["spec_prompt"] if prompt is None else prompt, defaults["spec_k"],
                                   defaults["spec_max_tokens"] if tokens is None else tokens,
                                   defaults["spec_block_size"])


NEW_RUN = {"prefill_decode": _prefill_decode, "paged_batching": _paged_batching, "speculative": _speculative}


def lecture_pages(lm, base: str, recorded=None) -> list[tuple[str, str]]:
    """The lecture pack: each stepped lesson at its page's defaults on `lm`, as (file name, page), in lecture
    order, then index.html linking them; `base` is the app's address the pages link back to. recorded(done,
    total, title), when given, is told before each lesson is recorded (`kvviz page --lecture` prints it, the
    app moves its bar)."""
    pages, sizes = [], []
    for done, (key, lesson) in enumerate(STEPPED_BY_KEY.items()):
        if recorded is not None:
            recorded(done, len(STEPPED_BY_KEY), by_key(key).title)
        text = web_page(lesson, record_lesson(lesson, lm), f"{base}/{key}", up="index.html", tokenizer=lm.tokenizer)
        name = lesson.file_name.removesuffix(".json") + ".html"
        pages.append((name, text))
        sizes.append((key, name, len(text.encode("utf-8"))))
    return [*pages, ("index.html", lecture_index(sizes, lm.name))]
