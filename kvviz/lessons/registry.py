"""Which modules own each lesson's session state, and the stepped lessons: a model change, Reset, rooms and
the session-key checks read it.

Adding a lesson means a folder kvviz/lessons/<key>/, a page script lessons/<key>.py, its line in
kvviz/lessons/catalog.py, its state modules below (when it keeps a run), its Stepped in STEPPED (when it
is stepped a run at a time), and its tests (docs/design.md, "Adding a lesson").

A state module declares KEYS (what a run leaves behind), optionally KEY_PREFIXES (keys made on the
fly, one per question asked), INPUTS (prefixes of widget keys that stay when another model loads) and
KEPT (widget keys whose values outlive a visit to another page), and a reset(state) that clears exactly
its keys. A stepped lesson's state module declares its keys once, in its LESSON
(kvviz.lessons.stepped.Stepped), and derives KEYS and reset from it. This module sits above the
lessons and imports them; the lessons read the catalog, never this.
"""

from __future__ import annotations

from types import ModuleType

from kvviz.lessons import room_view
from kvviz.lessons.batch_generation import state as batch_generation
from kvviz.lessons.cache_strategies import eviction_view, state as cache_strategies
from kvviz.lessons.catalog import LECTURE
from kvviz.lessons.paged_batching import fork_view, state as paged_batching, swap_view
from kvviz.lessons.prefill_decode import classroom, explain_views, state as prefill_decode
from kvviz.lessons.speculative import state as speculative
from kvviz.lessons.stepped import Stepped

# each lesson's modules that own its session-state keys, by its catalog key
STATES: dict[str, tuple[ModuleType, ...]] = {
    "prefill_decode": (prefill_decode, explain_views, classroom),
    "paged_batching": (paged_batching, fork_view, swap_view),
    "batch_generation": (batch_generation,),
    "cache_strategies": (cache_strategies, eviction_view),
    "speculative": (speculative,),
}
SHARED_STATES = (room_view,)
STEPPED: tuple[Stepped, ...] = (prefill_decode.LESSON, paged_batching.LESSON, speculative.LESSON)  # stepped lessons
ROOMS = tuple(lesson for lesson in STEPPED if lesson.room is not None)  # the lessons a room can follow
# keys of the app itself, which stay when another model loads: the model picker, presenter mode,
# the Memory bill, the Model lab (it builds its own model), Putting it together (sizes, not runs) and
# whether each "Show the code" is open (kvviz.ui.common.code_key)
APP_INPUTS = ("model_", "presenter", "bill_", "lab_", "together_", "show_code:")


def state_modules() -> list[ModuleType]:
    """Every lesson's session-state modules, in lecture order, then the shared ones."""
    return [module for lesson in LECTURE for module in STATES.get(lesson.key, ())] + list(SHARED_STATES)


def lesson_files(page: str):
    """(export, read) of the lesson files a room kept in Redis carries for `page`, or None (app.py serves it
    to kvviz.ui.room_store)."""
    lesson = next((lesson for lesson in ROOMS if lesson.page == page), None)
    return (lesson.room_file, lesson.from_room_file) if lesson is not None else None


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
