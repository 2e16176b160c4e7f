"""The one door to Streamlit's internals: everything kvviz needs that st.* does not offer.

    session_id()              # this script run's Streamlit session, or None (a script outside a server)
    session_ended(sid)        # whether that session's tab has closed (False when no server runs)
    rerun(sid, fragment_id)   # ask a session to rerun, as its browser would (kvviz.ui.room_wake)
    pace_browser_reruns(paced)   # every browser's rerun request through paced(session, state, run) (fair_share)
    screen_browser_messages(f)   # every browser message passes f(session) first; False drops it (fair_share)
    drop_browser(sid)            # close a session's websocket, its session not to be resumed (a flood's)

Written for Streamlit WRITTEN_FOR (requirements.txt pins it). Rooms wake followers from the server
(room_wake), free the lessons of closed tabs (live_lessons, rooms) and scale every chart in presenter
mode (presenter); none of that has a public API, so each reach into Streamlit's private modules is
here and nowhere else. tests/core/test_streamlit_door.py checks that each name below still exists
in the installed Streamlit: an upgrade that moves one fails there, by name, before a page does.
"""

from __future__ import annotations

from collections.abc import Callable

import asyncio

from streamlit.delta_generator import DeltaGenerator
from streamlit.runtime.app_session import AppSession
from streamlit.proto.ClientState_pb2 import ClientState
from streamlit.runtime import Runtime
from streamlit.runtime.scriptrunner_utils.script_run_context import ThreadState, get_script_run_ctx
from streamlit.web.server.starlette.starlette_websocket import StarletteSessionClient

WRITTEN_FOR = "1.67.0"
# (object, attribute) pairs the functions below use: the test reads them from the installed Streamlit
USED = (("Runtime", "exists"), ("Runtime", "instance"), ("Runtime", "is_active_session"), ("Runtime", "_session_mgr"),
        ("SessionManager", "get_active_session_info"), ("AppSession", "_call_soon_on_event_loop"),
        ("AppSession", "_client_state"), ("AppSession", "request_rerun"), ("ScriptRunContext", "session_id"),
        ("ScriptRunContext", "fragment_ids_this_run"), ("ThreadState", "get"),
        ("FragmentThreadState", "fragment_id"),
        ("ClientState", "fragment_id"), ("DeltaGenerator", "plotly_chart"),
        ("AppSession", "_handle_rerun_script_request"), ("AppSession", "handle_backmsg"), ("AppSession", "id"),
        ("StarletteSessionClient", "_websocket"))


def server_runs() -> bool:
    """Whether a Streamlit server runs in this process (False under AppTest and in plain scripts)."""
    return Runtime.exists()


def session_id() -> str | None:
    """Streamlit's id of the session this script run serves; None outside one."""
    ctx = get_script_run_ctx(suppress_warning=True)
    return ctx.session_id if ctx is not None else None


def session_ended(session: str) -> bool:
    """Whether the session `session` has ended (its tab closed); never, where no server runs."""
    return Runtime.exists() and not Runtime.instance().is_active_session(session)


def fragment_id() -> str | None:
    """The id of the fragment this code runs in; None when it runs in the whole page (or in no script)."""
    try:
        return ThreadState.get().fragment_id or None
    except RuntimeError:  # no script run has set this thread up
        return None


def whole_page_runs() -> bool:
    """Whether this script run is the whole page's, not one fragment's rerun."""
    ctx = get_script_run_ctx(suppress_warning=True)
    return ctx is None or not ctx.fragment_ids_this_run


def rerun(session: str, fragment: str) -> bool:
    """Ask session `session` to rerun, as its browser last asked ("" : the whole page, else only `fragment`),
    on the server's event loop; safe from any thread. False when the session is gone or no server runs."""
    manager = getattr(Runtime.instance(), "_session_mgr", None) if Runtime.exists() else None
    if manager is None:  # under AppTest: no server, no sessions
        return False
    info = manager.get_active_session_info(session)
    if info is None:  # the tab closed
        return False
    app_session = info.session

    def again() -> None:
        state = ClientState()
        state.CopyFrom(app_session._client_state)  # its page and address; no widget changes
        state.fragment_id = fragment
        app_session.request_rerun(state)
    app_session._call_soon_on_event_loop(again)
    return True


def wrap_plotly_chart(wrapper: Callable, main) -> Callable:
    """Route every st.plotly_chart and container.plotly_chart through `wrapper(plain, self, figure, ...)`
    (`main`: st._main, where st.plotly_chart was bound at import); once per process. The plain method back."""
    plain = getattr(DeltaGenerator.plotly_chart, "__kvviz_plain__", DeltaGenerator.plotly_chart)

    def chart(self, figure_or_data, *args, **kwargs):
        return wrapper(plain, self, figure_or_data, *args, **kwargs)
    chart.__kvviz_plain__ = plain
    if not hasattr(DeltaGenerator.plotly_chart, "__kvviz_plain__"):
        DeltaGenerator.plotly_chart = chart
    return DeltaGenerator.plotly_chart.__get__(main)


def pace_browser_reruns(paced: Callable) -> None:
    """Route every rerun request a browser sends (a click, a widget, a stage report; not the server's own, such as
    rerun above) through `paced(app_session, client_state, run)`, on the server's event loop; `run(client_state)`
    asks for the rerun as Streamlit would have. Once per process."""
    plain = getattr(AppSession._handle_rerun_script_request, "__kvviz_plain__", AppSession._handle_rerun_script_request)

    def handle(self, client_state=None):
        paced(self, client_state, lambda state: plain(self, state))
    handle.__kvviz_plain__ = plain
    AppSession._handle_rerun_script_request = handle


def call_later(delay: float, callback: Callable[[], None]):
    """Call `callback` on the server's event loop after `delay` seconds; from code running on that loop."""
    return asyncio.get_running_loop().call_later(delay, callback)


def screen_browser_messages(admits: Callable) -> None:
    """Every message a browser sends its session goes through `admits(app_session)` first, on the server's event
    loop: False drops it. Once per process."""
    plain = getattr(AppSession.handle_backmsg, "__kvviz_plain__", AppSession.handle_backmsg)

    def handle(self, msg):
        if admits(self):
            plain(self, msg)
    handle.__kvviz_plain__ = plain
    AppSession.handle_backmsg = handle


def drop_browser(session: str) -> bool:
    """Close session `session`'s websocket (policy violation), on the server's event loop, and forget the session so
    that a reconnection starts afresh. False when it is gone already or no server runs."""
    manager = getattr(Runtime.instance(), "_session_mgr", None) if Runtime.exists() else None
    info = manager.get_active_session_info(session) if manager is not None else None
    if info is None:
        return False
    websocket = getattr(info.client, "_websocket", None) if isinstance(info.client, StarletteSessionClient) else None
    if websocket is not None:
        asyncio.ensure_future(websocket.close(code=1008))
    manager.close_session(session)
    return True
