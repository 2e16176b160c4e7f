"""Who owns each st.session_state key, and the one reset a model change runs.

Each lesson's state module declares its keys and a reset(state) that clears exactly them:
- KEYS: what a run leaves behind (results, steps, errors, choices that fit one model);
- KEY_PREFIXES (optional): the same, for keys made on the fly, one per question asked;
- INPUTS (optional): prefixes of its widgets' keys, which stay when another model loads.
Keys of the app itself (APP_INPUTS) stay too. Every key a page makes has exactly one owner
here, so a model change leaves nothing of the old model behind.
"""

from __future__ import annotations

from kvviz.ui import (batch_generation_state, cache_strategies_state, classroom, eviction_state, explain_views,
                      fork_view, paged_batching_state, prefill_decode_state, speculative_state, swap_view)

LESSONS = (prefill_decode_state, explain_views, classroom, paged_batching_state, fork_view, swap_view,
           speculative_state, cache_strategies_state, eviction_state, batch_generation_state)
# the model picker, presenter mode, the Memory bill and the Model lab (it builds its own model)
APP_INPUTS = ("model_", "presenter", "bill_", "lab_")


def reset_lessons(state) -> None:
    """Clear every lesson's run: another model was loaded."""
    for lesson in LESSONS:
        lesson.reset(state)


def cleared(key: str, lesson) -> bool:
    """Whether `lesson` clears `key` on a model change."""
    return key in lesson.KEYS or key.startswith(getattr(lesson, "KEY_PREFIXES", ()))


def owners(key: str) -> list[str]:
    """The names of the modules (or "app") that declare `key`: exactly one for every key a page makes."""
    names = [lesson.__name__ for lesson in LESSONS
             if cleared(key, lesson) or key.startswith(getattr(lesson, "INPUTS", ()))]
    return names + ["app"] * key.startswith(APP_INPUTS)
