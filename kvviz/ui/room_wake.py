"""Waking a room's followers from the server: a student's page reruns only the part that follows the teacher.

    room_wake.follow("K7QW2MXP")           # inside a student's fragment: this session and fragment follow the room
    room_wake.changed("K7QW2MXP")          # the teacher stepped: each follower reruns that fragment
    room_wake.changed("K7QW2MXP", True)    # a new lesson, a question, a reveal, a closed room: each reruns its page

No page polls for a step: the teacher's session (or, later, a thread that hears of a step from another
process) calls `changed`, and each follower's Streamlit session is asked to rerun, on the server's
event loop, as a browser's message would ask it. The registry is this process's: a room code ->
{Streamlit's session id: the fragment's id}. A session that ended drops out at the next wake.
"""

from __future__ import annotations

import threading

from kvviz.ui import streamlit_door

_lock = threading.Lock()
_followers: dict[str, dict[str, str]] = {}  # room code -> {runtime session id: fragment id}


def follow(code: str) -> None:
    """Called inside the follower's fragment: wake this session's fragment when room `code` changes."""
    session, fragment_id = streamlit_door.session_id(), streamlit_door.fragment_id()
    if session is None or not fragment_id:
        return
    with _lock:
        for other, sessions in list(_followers.items()):  # a session follows one room
            if other != code and sessions.pop(session, None) is not None and not sessions:
                del _followers[other]
        _followers.setdefault(code, {})[session] = fragment_id


def forget() -> None:
    """This session follows no room any more (it left, took over, or its room closed)."""
    session = streamlit_door.session_id()
    if session is not None:
        _drop(session)


def followers(code: str) -> int:
    """Sessions of this process waiting for room `code`'s news."""
    with _lock:
        return len(_followers.get(code, ()))


def changed(code: str, full: bool = False) -> int:
    """Room `code` changed: every session following it reruns its fragment (`full`: its whole page).
    Safe from any thread; returns how many sessions were asked."""
    with _lock:
        sessions = dict(_followers.get(code, {}))
    if not sessions or not streamlit_door.server_runs():  # under AppTest: no server, no sessions
        return 0
    asked = 0
    for session_id, fragment_id in sessions.items():
        if streamlit_door.rerun(session_id, "" if full else fragment_id):
            asked += 1
        else:  # the tab closed
            _drop(session_id)
    return asked


def _drop(session_id: str) -> None:
    with _lock:
        for code, sessions in list(_followers.items()):
            if sessions.pop(session_id, None) is not None and not sessions:
                del _followers[code]
