"""Waking a room's followers on this process when the room changed (a stand-in: the follow helper's
module replaces it). `changed` only records the call here."""

from __future__ import annotations

import threading

_lock = threading.Lock()
calls: list[tuple[str, bool]] = []  # (code, full) as they came, the newest last; kept short


def changed(code: str, full: bool) -> None:
    """Room `code` changed: its followers here redraw their step (the whole page when `full`)."""
    with _lock:
        calls.append((code, full))
        del calls[:-100]
