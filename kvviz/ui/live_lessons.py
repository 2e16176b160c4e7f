"""Live lessons on this server: a budget, and freeing the lesson of a session that has ended.

Streamlit keeps a closed tab's session (and its session_state) until it reaps it lazily, so
each lesson is registered under its session id and kind (a session may run a Prefill and decode
lesson and a Speculative one, each with its own engines) and freed as soon as the runtime no
longer lists that session as active. The budget is KVVIZ_MAX_LESSONS (default 60) lessons at once, and the
server's memory budget (kvviz.ui.memory_budget): a lesson whose pool takes the process past it is released at once.
A lesson has `released` and `release()`.
"""

from __future__ import annotations

import ctypes
import gc
import os
import threading
import time
import weakref

from kvviz.ui import memory_budget, streamlit_door

DEFAULT_MAX_LESSONS = 60
SWEEP_EVERY_S = 10.0
_lock = threading.Lock()
_live: dict[tuple[str, str], weakref.ref] = {}  # (session id, lesson kind) -> that session's running lesson
_sweeper: threading.Thread | None = None


def max_lessons() -> int:
    try:
        return max(1, int(os.environ.get("KVVIZ_MAX_LESSONS", DEFAULT_MAX_LESSONS)))
    except ValueError:
        return DEFAULT_MAX_LESSONS


def _session_ended(session_id: str) -> bool:
    return streamlit_door.session_ended(session_id)


def sweep() -> int:
    """Free the lessons of sessions that ended; return how many lessons stay live."""
    freed = 0
    with _lock:
        for key, ref in list(_live.items()):
            lesson = ref()
            if lesson is None or lesson.released:
                del _live[key]
            elif _session_ended(key[0]):
                lesson.release()  # drops its engines, pool and traces even while Streamlit keeps the session
                del _live[key]
                freed += 1
        live = len(_live)
    if freed:
        _give_back_memory()
    return live


def _give_back_memory() -> None:
    """Hand freed heap pages back to the OS (glibc keeps them otherwise), so the server's size falls."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the memory is still reused for the next lessons
        pass


def admit(lesson) -> str | None:
    """Register this session's new lesson, in place of its earlier one of the same kind; a sentence
    instead when the server's budget is full."""
    key = (streamlit_door.session_id() or "no-session", type(lesson).__name__)
    sweep()
    with _lock:
        others = sum(1 for held in _live if held != key)
        if others >= max_lessons():
            return (f"This server is running its limit of {max_lessons()} live lessons; try again when a "
                    "classmate closes their tab, or replay a lesson file, which runs no model.")
        _live[key] = weakref.ref(lesson)
    _start_sweeper()
    used, budget = memory_budget.headroom()  # its engine's pool is allocated now: it counts
    if used > budget:
        with _lock:
            _live.pop(key, None)
        lesson.release()
        _give_back_memory()
        return (f"This lesson would take this server past its memory budget ({used / memory_budget.GiB:,.1f} of "
                f"{budget / memory_budget.GiB:,.1f} GiB, {memory_budget.BUDGET_VARIABLE}); choose fewer tokens or a "
                "shorter prompt, or try again when fewer lessons run.")
    return None


def _start_sweeper() -> None:
    """A background sweep, so a class that leaves frees its memory without anyone pressing a button."""
    global _sweeper
    with _lock:
        if _sweeper is not None or not streamlit_door.server_runs():
            return
        _sweeper = threading.Thread(target=_sweep_forever, name="kvviz-lesson-sweeper", daemon=True)
    _sweeper.start()


def _sweep_forever() -> None:
    while True:
        time.sleep(SWEEP_EVERY_S)
        sweep()
