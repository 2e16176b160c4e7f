"""Issue 61 item 1: one script's tabs flooding the server with rerun requests froze a teacher's Next token for over a
minute. Each session's reruns are paced (kvviz.ui.fair_share) and a tab that floods is closed; a real server and
a real websocket show it (scripts/flood_reruns.py measures the teacher's clicks beside a flood)."""

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ClientState_pb2 import ClientState

from kvviz.ui import fair_share
from kvviz.ui.app_server import running_app


def client_state(click: bool = False, value: float = 0.0) -> ClientState:
    state = ClientState()
    widget = state.widget_states.widgets.add()
    widget.id = "a button" if click else "a slider"
    if click:
        widget.trigger_value = True
    else:
        widget.double_value = value
    return state


def test_a_bucket_lets_a_burst_through_then_makes_requests_wait():
    pacer, now = fair_share.Pacer(tokens=fair_share.BURST), 100.0
    waits = [pacer.admit(now) for _ in range(fair_share.BURST + 1)]
    assert waits[:-1] == [0.0] * fair_share.BURST and waits[-1] > 0
    pacer.last_run_s = 2.0  # a slow page: past its bucket, a session waits as long as its run took
    assert pacer.admit(now) >= fair_share.DUTY * 2.0
    assert pacer.admit(now + 10.0) == 0.0  # refilled


def test_a_new_session_starts_with_a_small_bucket():
    pacer = fair_share.Pacer()
    waits = [pacer.admit(5.0) for _ in range(fair_share.FIRST_BURST + 1)]
    assert waits.count(0.0) == fair_share.FIRST_BURST


def test_new_sessions_draw_their_first_runs_from_one_bucket_the_server_shares(monkeypatch):
    """A script's tab that the server closed for flooding came back as a new session with a new bucket, 17 times a
    second, four free page runs each: the reconnecting flood ran more page runs than the flood itself."""
    arrivals = fair_share.Arrivals(burst=8, rate=4)
    assert [arrivals.take(4, 10.0) for _ in range(4)] == [4, 4, 0, 0]
    assert arrivals.take(4, 10.5) == pytest.approx(2)  # half a second at 4 a second
    monkeypatch.setattr(fair_share, "_arrivals", fair_share.Arrivals(burst=2 * fair_share.FIRST_BURST, rate=0))
    fresh = [fair_share.pacer_of(f"arrival test {i}") for i in range(4)]
    assert [pacer.tokens for pacer in fresh] == [fair_share.FIRST_BURST] * 2 + [0, 0]
    assert fair_share.pacer_of("arrival test 0") is fresh[0]  # a session keeps its bucket
    assert fresh[3].admit(time.monotonic()) == pytest.approx(1 / fair_share.RATE)  # an empty one's first run waits


def test_waiting_requests_merge_but_keep_every_click_in_order():
    waiting = []
    for value in range(5):  # a slider moved five times while the session waits: only the newest waits
        waiting = fair_share.keep_waiting(waiting, client_state(value=value))
    assert len(waiting) == 1 and waiting[0].widget_states.widgets[0].double_value == 4
    first, second = client_state(click=True), client_state(click=True)
    waiting = fair_share.keep_waiting(waiting, first)
    waiting = fair_share.keep_waiting(waiting, client_state(value=9))
    waiting = fair_share.keep_waiting(waiting, second)
    at = [next(i for i, w in enumerate(waiting) if w is click) for click in (first, second)]  # by identity
    assert at[0] < at[1]
    assert [w.widget_states.widgets[0].double_value for w in waiting if not fair_share.has_click(w)] == [9]
    for _ in range(10):  # clicks past MOST_WAITING: the queue stays bounded
        waiting = fair_share.keep_waiting(waiting, client_state(click=True))
    assert len(waiting) == fair_share.MOST_WAITING


@pytest.mark.slow
def test_a_flooding_tab_is_closed_and_a_polite_one_is_answered():
    import websockets

    flood = BackMsg()
    flood.rerun_script.query_string = ""
    payload = flood.SerializeToString()

    async def scenario(url: str) -> tuple[int | None, int, bool]:
        address = url.replace("http", "ws") + "/_stcore/stream"
        async with websockets.connect(address, subprotocols=["streamlit"], max_size=None) as polite, \
                websockets.connect(address, subprotocols=["streamlit"], max_size=None) as flooding:
            await polite.send(payload)  # the first page run: the server has imported the app
            await asyncio.wait_for(polite.recv(), timeout=120)
            sent, code = 0, None
            deadline = time.monotonic() + 30
            try:
                while time.monotonic() < deadline:
                    await flooding.send(payload)
                    sent += 1
                    if sent % 4 == 0:  # about a thousand a second: far past a browser's few, and the socket stays read
                        await asyncio.sleep(0.002)
            except websockets.exceptions.ConnectionClosed as closed:
                code = closed.rcvd.code if closed.rcvd else None
            await polite.send(payload)  # one rerun request: the page runs and answers
            answered = False
            try:
                while not answered:
                    answered = len(await asyncio.wait_for(polite.recv(), timeout=60)) > 0
            except TimeoutError:
                pass
            return code, sent, answered

    with running_app(env={"KVVIZ_DEFAULT_MODEL": "bundled"}) as url, ThreadPoolExecutor(1) as thread:
        # a thread of its own: another test in this worker may have left an event loop running (Playwright's)
        code, sent, answered = thread.submit(asyncio.run, scenario(url)).result()
    assert code == 1008, f"the flooding tab was not closed after {sent:,} requests"  # a policy violation
    assert answered


def test_a_json_value_python_cannot_read_never_reaches_the_session():
    """Issue 61 item 10: the stage's report is parsed by Streamlit itself on every later run of its session, before
    kvviz.ui.stage.reported_step sees it. A 5,000-digit step (past Python's 4,300-digit limit), text that is not JSON
    or 100,000 nested brackets raised there, and every later click of that tab showed an error box
    (scripts/probe_hostile.py r10). Such a value is dropped where the request enters; the widget keeps its own."""
    state = ClientState()
    for number, text in enumerate(['{"step": ' + "9" * 5000 + "}", "not json", "[" * 100_000, '{"step": 3}']):
        widget = state.widget_states.widgets.add(id=f"stage {number}")
        widget.json_value = text
    clicked = state.widget_states.widgets.add(id="events")
    clicked.json_trigger_value = "9" * 5000
    state.widget_states.widgets.add(id="a button", trigger_value=True)
    kept = fair_share.readable(state)
    assert [(w.id, w.WhichOneof("value")) for w in kept.widget_states.widgets] == [
        ("stage 3", "json_value"), ("a button", "trigger_value")]
    assert fair_share.readable(None) is None
