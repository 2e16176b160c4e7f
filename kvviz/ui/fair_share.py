"""A fair share of the server for every tab: how often a browser may make its session rerun the page.

    fair_share.install()          # app.py, once per process: every browser's rerun request passes the pacer
    with fair_share.running():    # app.py, around the page: the pacer learns what this session's runs cost

Every click, slider move or stage report reaches the server as a rerun request, and Streamlit runs the
page for each one at once. Nothing stopped a script from sending tens of thousands a second over a
websocket: six such tabs froze a teacher's Next token for over a minute (issue 61). Each session now
gets a bucket of BURST reruns that refills at RATE a second, and once it has spent its bucket it also
waits DUTY times as long as its own last run took, so that a session whose page is slow to run asks for
a smaller share of the CPU. A new session's first bucket comes out of one the server shares (Arrivals), so that
a script reconnecting every tab the server closes gets no fresh bucket each time. A request over the bucket is
not refused: it waits, and while it waits a
newer request replaces it (a browser's request carries every widget's value, so the newest says all),
except that a click (a trigger: a button, a chat message) is kept, in order, up to MOST_WAITING. A
teacher clicking, a slider dragged, Play at its fastest (4 steps a second) and a room's beats stay
inside the bucket; a flood waits in it, costing the server one timer. A tab that sends FLOOD_MESSAGES in one
second (no browser does; a script does) is closed: each message costs the event loop every tab shares. A JSON value
that Python cannot read (a component's report: a script's 5,000-digit number, text that is not JSON) is dropped from
the request where it enters: Streamlit parses it again on every later run, and one such value left every click of
its tab failing (issue 61).

Streamlit's session object is reached through kvviz.ui.streamlit_door, the one door to its internals.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from kvviz.ui import streamlit_door

RATE = 5.0  # reruns a second a session may sustain
BURST = 12  # reruns a session may ask for at once
FIRST_BURST = 4  # what a new session's bucket holds: a page's first draw takes one or two
DUTY = 1.0  # past its bucket, a session waits as long as its last run took before the next
MOST_WAITING = 4  # requests with a click kept while a session waits
MOST_PACERS = 512  # past this many sessions' pacers, those of closed tabs are dropped
FLOOD_MESSAGES = 200  # messages in one second from one tab: no browser sends this many; a script's tab is closed
# new sessions' first buckets come out of one bucket the server shares: a class of 60 arriving at once gets its
# first draws at once, but a script that reconnects each tab the server closed gets ARRIVAL_RATE free runs a second
ARRIVAL_BURST = 60 * FIRST_BURST
ARRIVAL_RATE = 2 * FIRST_BURST
TRIGGERS = frozenset({"trigger_value", "string_trigger_value", "json_trigger_value", "chat_input_value"})


@dataclass(slots=True)
class Pacer:
    """One session's bucket. `admit(now)` says how long a request must wait (0: run it now)."""

    tokens: float = FIRST_BURST
    updated: float = 0.0
    last_run_s: float = 0.0
    waiting: list = field(default_factory=list)  # client states waiting, oldest first
    second: float = 0.0  # the second whose messages `messages` counts
    messages: int = 0
    timer: object = None  # the loop's handle of the wait, while one is set
    delayed: int = 0  # requests that waited (a count for the probe and the tests)

    def refill(self, now: float) -> None:
        self.tokens = min(BURST, self.tokens + (now - self.updated) * RATE) if self.updated else self.tokens
        self.updated = now

    def admit(self, now: float) -> float:
        self.refill(now)
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return max((1 - self.tokens) / RATE, DUTY * self.last_run_s)


def has_click(client_state) -> bool:
    """Whether a browser's request carries a click (a trigger), which must not be merged away."""
    if client_state is None:
        return False
    return any(widget.WhichOneof("value") in TRIGGERS for widget in client_state.widget_states.widgets)


def keep_waiting(waiting: list, client_state) -> list:
    """The requests that wait once `client_state` joins them: the newest without a click replaces a waiting one
    without a click; a click is kept (the oldest plain request makes room when MOST_WAITING are waiting)."""
    if not has_click(client_state):
        plain = [index for index, state in enumerate(waiting) if not has_click(state)]
        if plain:
            waiting = waiting[:plain[-1]] + waiting[plain[-1] + 1:]
    waiting = waiting + [client_state]
    while len(waiting) > MOST_WAITING:
        plain = next((index for index, state in enumerate(waiting) if not has_click(state)), 0)
        waiting = waiting[:plain] + waiting[plain + 1:]
    return waiting


class Arrivals:
    """The bucket new sessions' first runs come from, shared by the server: a tab the server closed for flooding
    came back at once as a new session with a new bucket (17 a second, 4 page runs each: more than a core), where a
    class's tabs open once. A new session that finds it empty starts with an empty bucket of its own: its first
    run waits 1 / RATE s."""

    def __init__(self, burst: float = ARRIVAL_BURST, rate: float = ARRIVAL_RATE):
        self.burst, self.rate, self.tokens, self.updated = burst, rate, burst, None

    def take(self, wanted: float, now: float) -> float:
        """Up to `wanted` runs for a new session's bucket, out of what the server's bucket holds at `now`."""
        if self.updated is not None:
            self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        given = min(wanted, max(self.tokens, 0.0))
        self.tokens -= given
        return given


_lock = threading.Lock()
_pacers: dict[str, Pacer] = {}
_arrivals = Arrivals()


def pacer_of(session: str) -> Pacer:
    if len(_pacers) > MOST_PACERS:  # now and then, the closed tabs' go
        forget_ended()
    with _lock:
        pacer = _pacers.get(session)
        if pacer is None:
            pacer = _pacers[session] = Pacer(tokens=_arrivals.take(FIRST_BURST, time.monotonic()))
        return pacer


def forget_ended() -> None:
    """Drop the pacers of sessions whose tabs closed."""
    with _lock:
        for session in [s for s in _pacers if streamlit_door.session_ended(s)]:
            del _pacers[session]
        if len(_pacers) > MOST_PACERS:  # live sessions past the bound: the oldest-refilled go (a fresh bucket)
            for session in sorted(_pacers, key=lambda s: _pacers[s].updated)[:len(_pacers) - MOST_PACERS]:
                del _pacers[session]


def admits(app_session) -> bool:
    """On the server's event loop, for every message a browser sends: False, and its tab closed, once it has sent
    FLOOD_MESSAGES in one second. Each message costs the event loop that every tab shares; a browser sends a few a
    second (a click, a stage report every 0.35 s, a heartbeat), a flooding script tens of thousands."""
    pacer, second = pacer_of(app_session.id), int(time.monotonic())
    if pacer.second != second:
        pacer.second, pacer.messages = second, 0
    pacer.messages += 1
    if pacer.messages <= FLOOD_MESSAGES:
        return True
    if pacer.messages == FLOOD_MESSAGES + 1:
        streamlit_door.drop_browser(app_session.id)
    return False


def readable_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):  # not JSON, past 4,300 digits, nested past the stack
        return False
    return True


def readable(client_state):
    """`client_state` without the JSON widget values Python cannot read; the widget keeps the value it had."""
    if client_state is None:
        return None
    widgets = client_state.widget_states.widgets
    for index in reversed(range(len(widgets))):
        kind = widgets[index].WhichOneof("value")
        if kind in ("json_value", "json_trigger_value") and not readable_json(getattr(widgets[index], kind)):
            del widgets[index]
    return client_state


def paced(app_session, client_state, run) -> None:
    """On the server's event loop: run `run(client_state)` now, or once this session's bucket allows."""
    client_state = readable(client_state)
    pacer = pacer_of(app_session.id)
    if pacer.waiting:  # already waiting: this request joins the queue, merged
        pacer.waiting = keep_waiting(pacer.waiting, client_state)
        return
    wait = pacer.admit(time.monotonic())
    if not wait:
        run(client_state)
        return
    pacer.waiting, pacer.delayed = [client_state], pacer.delayed + 1

    def release() -> None:
        pacer.timer = None
        if not pacer.waiting:
            return
        state = pacer.waiting.pop(0)
        pacer.tokens = max(pacer.tokens, 1.0)  # the wait paid for this one
        pacer.admit(time.monotonic())
        run(state)
        if pacer.waiting:  # more came while it waited: the next waits its turn too
            pacer.timer = streamlit_door.call_later(max(1 / RATE, DUTY * pacer.last_run_s), release)
    pacer.timer = streamlit_door.call_later(wait, release)


def install() -> None:
    """Pace every browser's rerun request in this process, and close a flooding tab (idempotent)."""
    streamlit_door.pace_browser_reruns(paced)
    streamlit_door.screen_browser_messages(admits)


@contextlib.contextmanager
def running() -> Iterator[None]:
    """Around a page's run: what it took is this session's last run, the wait its next request may pay."""
    session = streamlit_door.session_id()
    started = time.perf_counter()
    try:
        yield
    finally:
        if session is not None:
            pacer_of(session).last_run_s = time.perf_counter() - started


# ---- the server's cores, among its long clicks ---------------------------------------------------------
class Turns:
    """How many clicks of one heavy kind may run at once on this server (a Take over replays a lesson to the
    teacher's step: 30 s of a core). Twenty students pressing it together ran twenty such runs side by
    side, and the teacher's Next token waited 6-7 s for a core (issue 61); past `at_once` a press is
    refused in a sentence instead, and the runs that do go keep the pace they learn near the truth."""

    def __init__(self, at_once: int):
        self.at_once = at_once
        self._free = threading.BoundedSemaphore(at_once)

    @contextlib.contextmanager
    def turn(self) -> Iterator[bool]:
        """Yields whether this click may run now; a turn taken is given back however the click ends (a Stop
        or the clock's stop included)."""
        taken = self._free.acquire(blocking=False)
        try:
            yield taken
        finally:
            if taken:
                self._free.release()


# half the cores, so that a teacher's click always finds one; one on a 2-core server
TAKE_OVERS = Turns(max(1, (os.cpu_count() or 2) // 2))
