"""The one list of lessons: navigation, the home page, model-change resets and lesson files read it.

Adding a lesson means a folder kvviz/lessons/<key>/, a page script lessons/<key>.py, one line
below, and its tests. Each line names the lesson's page, its title and summary, about how long
it takes in class, the modules that own its st.session_state keys, and whether it exports lesson
files (whose `lesson` field is the key).

The session-state modules are named, not imported: this list sits below the lessons, because
their file checks read it (kvviz/lessons/files.py), and each state module imports the lesson's
logic. A state module declares KEYS (what a run leaves behind), optionally KEY_PREFIXES (keys
made on the fly, one per question asked), INPUTS (prefixes of widget keys that stay when
another model loads) and KEPT (widget keys whose values outlive a visit to another page), and a
reset(state) that clears exactly its keys. A stepped lesson's state module declares its keys
once, in its LESSON (kvviz.lessons.stepped.Stepped), and derives KEYS and reset from it. SHARED_STATES names the
modules beside the lesson folders that own keys several lesson pages make (a room's).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Lesson:
    key: str  # its folder under kvviz/lessons/, its page script's stem, a lesson file's `lesson` field
    title: str
    icon: str
    summary: str  # one line for the home page
    minutes: int  # about how long it takes in class
    states: tuple[str, ...] = ()  # modules owning its session-state keys, under kvviz.lessons.<key>
    replays: bool = False  # exports and replays lesson files
    rooms: bool = False  # a teacher can open a room on it; its page reads a room link itself

    @property
    def path(self) -> str:
        """The page script, as st.Page and st.page_link take it."""
        return f"lessons/{self.key}.py"


# The article's arc first (prefill and decode, the bill, paging, strategies, putting it together), each
# lesson after the ones whose words it uses; Speculative decoding goes beyond the article, and the
# sources close the list. A word used before its lesson links forward (navigation.taught_later).
LECTURE = (
    Lesson("home", "What kvviz teaches", ":material/school:",
           "The idea in one paragraph and the path through the lessons.", 2),
    Lesson("prefill_decode", "Prefill and decode", ":material/play_circle:",
           "A real model fills its cache with the prompt, then adds one token per step; where K, V and Q "
           "come from, the causal triangle, and why decode is memory-bound.", 15,
           ("state", "explain_views", "classroom"), replays=True, rooms=True),
    Lesson("memory_bill", "Memory bill", ":material/calculate:",
           "What the cache weighs, what fits on a GPU, and what GQA, MQA, MLA, sliding windows and "
           "tensor parallelism change.", 8),
    Lesson("model_lab", "Model lab", ":material/science:",
           "Build a model of any size and time a decode step against context, cache on and off.", 5),
    Lesson("paged_batching", "Paged cache and batching", ":material/grid_view:",
           "Blocks, block tables and prefix sharing: how several requests share one pool without waste.", 8,
           ("state", "fork_view", "swap_view"), replays=True, rooms=True),
    Lesson("batch_generation", "Batch generation", ":material/dynamic_feed:",
           "Many prompts through the same engine with continuous batching, and its throughput.", 5, ("state",)),
    Lesson("cache_strategies", "Cache strategies", ":material/compare_arrows:",
           "Dynamic, static, sliding-window and quantized caches side by side: bytes, time and output.", 6,
           ("state", "eviction_view"), replays=True),
    Lesson("putting_it_together", "Putting it together", ":material/checklist:",
           "Which cache and which strategy for a script, a chat server and a long-context job, with this "
           "model's bill.", 3),
    Lesson("speculative", "Speculative decoding", ":material/fast_forward:",
           "Beyond the article: guess the next tokens from earlier text, check them all in one forward pass, "
           "and roll back the cache slots of the wrong guesses.", 6, ("state",), replays=True, rooms=True),
    Lesson("sources", "Where this comes from", ":material/menu_book:",
           "The papers and code each lesson rests on, with links.", 2),
)
BY_KEY = {lesson.key: lesson for lesson in LECTURE}
SHARED_STATES = ("room_view",)  # kvviz.lessons.<name>: a room followed on any engine-driven lesson's page
# keys of the app itself, which stay when another model loads: the model picker, presenter mode,
# the Memory bill, the Model lab (it builds its own model), Putting it together (sizes, not runs) and
# whether each "Show the code" is open (kvviz.ui.common.code_key)
APP_INPUTS = ("model_", "presenter", "bill_", "lab_", "together_", "show_code:")


def index_of(title: str) -> int | None:
    """Index in LECTURE of the page with this title (None if it is not a lesson)."""
    return next((i for i, lesson in enumerate(LECTURE) if lesson.title == title), None)


def neighbours(title: str) -> tuple[Lesson | None, Lesson | None]:
    """The lessons before and after the page called `title` (None at either end, or off the list)."""
    index = index_of(title)
    if index is None:
        return None, None
    return (LECTURE[index - 1] if index > 0 else None), (LECTURE[index + 1] if index + 1 < len(LECTURE) else None)


def state_modules() -> list:
    """Every lesson's session-state modules, in lecture order, then the shared ones."""
    return [importlib.import_module(f"kvviz.lessons.{lesson.key}.{name}")
            for lesson in LECTURE for name in lesson.states] + [
        importlib.import_module(f"kvviz.lessons.{name}") for name in SHARED_STATES]


def kept_settings() -> list[str]:
    """The widget keys whose values outlive a visit to another page: each state module's KEPT."""
    return [key for module in state_modules() for key in getattr(module, "KEPT", ())]


def reset_lessons(state) -> None:
    """Clear every lesson's run: another model was loaded, and a run belongs to the model it ran on."""
    for module in state_modules():
        module.reset(state)


def cleared(key: str, module) -> bool:
    """Whether state module `module` clears `key` on a model change."""
    return key in module.KEYS or key.startswith(getattr(module, "KEY_PREFIXES", ()))


def owners(key: str) -> list[str]:
    """The names of the modules (or "app") that declare `key`: exactly one for every key a page makes."""
    names = [module.__name__ for module in state_modules()
             if cleared(key, module) or key.startswith(getattr(module, "INPUTS", ()))]
    return names + ["app"] * key.startswith(APP_INPUTS)
