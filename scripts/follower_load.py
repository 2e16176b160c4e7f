"""A lecture hall follows one teacher: hundreds of followers over Streamlit's own websocket, measured.

    python scripts/follower_load.py --followers 100                 # the usual run (issue 34)
    python scripts/follower_load.py --followers 300 --steps 5 --browsers 2
    python scripts/follower_load.py --followers 3 --teacher ws      # no Chromium at all
    python scripts/follower_load.py --followers 60 --processes 2    # a Redis room over two app processes

A teacher opens the Prefill and decode lesson, presses Prefill, opens a room ("Open a room for the
class") and reads its code, and presses Next token twice with nobody following (what its own step
costs the server). N followers join with ?room=CODE, sit still --idle seconds, then the teacher
presses Next token --steps times. The teacher is a real Chromium page (Playwright), or with --teacher ws a websocket
client like the followers. --browsers adds a few real Chromium followers beside the websocket
ones, as a check that both see the same steps.

A websocket follower is not a browser, but it speaks to the server as one does: it opens
/_stcore/stream with the "streamlit" subprotocol, asks for a script run with a BackMsg rerun_script
whose ClientState carries the page's name, its query string (room=CODE, then the seat the app
writes into the address with page_info_changed), the page_script_hash the server named, and the
hashes of the messages it keeps (the server sends a ref_hash for those). It answers what the
server asks of a browser: an auto_rerun (a fragment's run_every) reruns that fragment every
interval until stop_auto_rerun or a full run, as the frontend does. It runs no JavaScript: a
component's reports back (the stage's step) are not sent, and none are needed to follow. Hundreds
of them fit in this one asyncio process.

A follower shows step S when a delta carries "Decode step S." (or "Prefill." for step 0) in an
alert, or a component whose JSON data has "step": S; it counts the moment the message arrived
(loopback: arriving is leaving the server). A follower that does not see "Following room CODE"
holds no seat: it is counted, and the sentence it got is printed.

Figures (printed as JSON):
  followers_joined, followers_without_seat
  follower_steps_missed, why_missed   a follower that did not show a step within 300 s (its seat
                             freed on an overloaded server, its websocket closed)
  steps_done, stopped        the teacher's page that did not show its own step stops the run after
                             that step; the figures are those of the steps done
  cpu_ms_per_follower_step   server CPU during the steps, minus the idle rate times the same
                             length, minus the teacher's own step (measured before anyone
                             joined) times the steps, divided by followers (websocket and
                             Chromium ones) x steps
  cpu_ms_per_follower_step_gross   all server CPU during the steps divided by followers x steps
                             (how scripts/load_test.py --room counted its 0.19 s)
  lag_p50_s, lag_p95_s       from the teacher's click to each follower's update arriving
  teacher_next_token_s       from the teacher's click to the teacher's own page showing the step
  rss_kib_per_follower       the server's resident memory added by the joins, per follower
  idle_cpu_ms_per_follower_s server CPU while the room sat still for --idle seconds, per follower
  load_average               the machine's 1-minute load at the start and at the end
  client_cpu_s               this process's CPU: the followers share the machine with the server
Server CPU and memory come from /proc (scripts/load_test.py's helpers). Loopback only; bounded in
followers, steps and time (--timeout).

With --processes N (2 to 4) the room lives in a redis-server (Debian's, started here, nothing saved) and N app
processes point at it with KVVIZ_ROOMS_URL, the teacher on the first; the followers are dealt to the processes in
turn, and `per_process` gives each its followers, cpu_ms_per_follower_step (the first's less the teacher's own
step), lags, and rss_growth_mib_per_step: its resident memory's largest rise during a step, the median over steps.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState
from websockets.asyncio.client import connect  # Streamlit's own dependency: its server speaks it

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # load_test's helpers; the app of this checkout, not an installed one
from load_test import cpu_seconds, server_cpu_seconds, server_rss_bytes, wait_for_step, wait_idle  # noqa: E402

from kvviz.bench import busy_processes  # noqa: E402
from kvviz.ui.app_server import CHROMIUM, CHROMIUM_ARGS, running_app  # noqa: E402

sys.path.insert(0, str(HERE.parent / "tests" / "support"))
from redis_server import running_redis  # noqa: E402

PAGE = "prefill_decode"
STEP_TEXT = re.compile(r"Decode step (\d+)\.")
JSON_STEP = re.compile(r'^\{.*?"step": ?(\d+)', re.S)  # a component's data: its first "step" key
MAX_FOLLOWERS, MAX_STEPS = 500, 20
STEP_TIMEOUT_S = 300  # a follower that has not shown a step by then missed it (an overloaded server is slow)
ALONE_STEPS = 2  # Next token presses before anyone joins: what the teacher's own step costs


def step_shown(element) -> int | None:
    """The lesson step an element shows: the step's sentence, or a component's data step."""
    kind = element.WhichOneof("type")
    if kind == "alert":
        if element.alert.body.startswith("**Prefill.**"):
            return 0
        found = STEP_TEXT.search(element.alert.body)
        return int(found.group(1)) if found else None
    if kind == "bidi_component" and element.bidi_component.HasField("json"):
        found = JSON_STEP.match(element.bidi_component.json)  # stops at the first "step"
        return int(found.group(1)) if found else None
    return None


class Page:
    """One page of the app over its websocket, doing what the frontend does; no JavaScript runs."""

    def __init__(self, url: str, path: str, query: str = ""):
        self.url, self.path, self.query = url, path, query
        self.page_hash = ""  # the server names it (new_session, navigation); the page's name until then
        self.cache: dict[str, tuple[ForwardMsg, int, tuple]] = {}  # hash -> message, run count, fragments
        self.max_age, self.runs = 2, 0
        self.ticks: dict[str, tuple[float, asyncio.Task]] = {}  # fragment id -> interval, its ticker
        self.buttons: dict[str, str] = {}  # label -> widget id
        self.texts: list[str] = []  # alerts, code and markdown seen, newest last (bounded)
        self.steps: dict[int, float] = {}  # step -> when it first arrived (time.perf_counter())
        self.finished_before: dict[int, int] = {}  # step -> runs finished before the run that showed it
        self.exceptions, self.finished, self.full_runs = 0, 0, 0  # script runs finished: any, whole pages
        self.changed = asyncio.Event()
        self.socket = None
        self.missed: str | None = None  # why it did not show a step, the first time

    async def open(self) -> None:
        ws_url = self.url.replace("http://", "ws://") + "/_stcore/stream"
        self.socket = await connect(ws_url, subprotocols=["streamlit", "PLACEHOLDER_AUTH_TOKEN"],
                                    max_size=None, open_timeout=60, ping_interval=None,
                                    origin=self.url)  # a browser sends its page's origin
        self.reader = asyncio.create_task(self.read())
        await self.rerun()

    async def close(self) -> None:
        for _, task in self.ticks.values():
            task.cancel()
        self.reader.cancel()
        await self.socket.close()

    async def rerun(self, fragment_id: str = "", auto: bool = False, press: str | None = None) -> None:
        msg = BackMsg()
        state = msg.rerun_script
        state.query_string, state.page_script_hash, state.fragment_id = self.query, self.page_hash, fragment_id
        state.page_name = "" if self.page_hash else self.path
        state.is_auto_rerun = auto
        state.cached_message_hashes.extend(self.cache)
        if press is not None:
            state.widget_states.widgets.append(WidgetState(id=self.buttons[press], trigger_value=True))
        info = state.context_info
        info.timezone, info.timezone_offset, info.locale = "UTC", 0, "en-US"
        info.url = f"{self.url}/{self.path}" + (f"?{self.query}" if self.query else "")
        await self.socket.send(msg.SerializeToString())

    async def tick(self, fragment_id: str, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            await self.rerun(fragment_id, auto=True)

    async def read(self) -> None:
        async for frame in self.socket:
            arrived = time.perf_counter()
            msg = ForwardMsg()
            msg.ParseFromString(frame)
            self.handle(self.resolve(msg), arrived)

    def resolve(self, msg: ForwardMsg) -> ForwardMsg:
        """A ref_hash is a message this page said it kept; a cacheable message is kept."""
        if msg.WhichOneof("type") == "ref_hash" and msg.ref_hash in self.cache:
            kept = ForwardMsg()
            kept.CopyFrom(self.cache[msg.ref_hash][0])
            kept.metadata.CopyFrom(msg.metadata)
            return kept
        if msg.metadata.cacheable:
            self.cache[msg.hash] = (msg, self.runs, tuple(msg.metadata.run.fragment_ids))
        return msg

    def handle(self, msg: ForwardMsg, arrived: float) -> None:
        kind = msg.WhichOneof("type")
        if kind == "new_session":
            self.page_hash = msg.new_session.page_script_hash or self.page_hash
            self.max_age = msg.new_session.config.max_cached_message_age or self.max_age
            if not msg.metadata.run.fragment_ids:  # a full run: the frontend drops every auto-rerun
                for _, task in self.ticks.values():
                    task.cancel()
                self.ticks.clear()
        elif kind == "navigation":
            self.page_hash = msg.navigation.page_script_hash
        elif kind == "page_info_changed":
            self.query = msg.page_info_changed.query_string
        elif kind == "auto_rerun":
            fragment, interval = msg.auto_rerun.fragment_id, msg.auto_rerun.interval
            if fragment and self.ticks.get(fragment, (None,))[0] != interval:
                self.stop_tick(fragment)
                self.ticks[fragment] = (interval, asyncio.create_task(self.tick(fragment, interval)))
        elif kind == "stop_auto_rerun":
            for fragment in msg.stop_auto_rerun.fragment_ids:
                self.stop_tick(fragment)
        elif kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
            self.element(msg.delta.new_element, arrived)
        elif kind == "script_finished":
            self.finished += 1
            self.full_runs += msg.script_finished == ForwardMsg.FINISHED_SUCCESSFULLY
            if msg.script_finished != ForwardMsg.FINISHED_EARLY_FOR_RERUN:  # as the frontend counts runs
                self.age_cache(tuple(msg.metadata.run.fragment_ids))
        self.changed.set()

    def element(self, element, arrived: float) -> None:
        kind = element.WhichOneof("type")
        step = step_shown(element)
        if step is not None and step not in self.steps:
            self.steps[step] = arrived
            self.finished_before[step] = self.finished
        if kind == "button":
            self.buttons[element.button.label] = element.button.id
        elif kind == "exception":
            self.exceptions += 1
        elif kind in ("alert", "markdown", "code"):
            text = element.code.code_text if kind == "code" else getattr(element, kind).body
            self.texts = self.texts[-200:] + [text]

    def stop_tick(self, fragment: str) -> None:
        _, task = self.ticks.pop(fragment, (None, None))
        if task is not None:
            task.cancel()

    def age_cache(self, fragments: tuple) -> None:
        """The frontend's ForwardMsgCache: a run ages what it kept; past the server's age, it is dropped
        (a fragment's run ages only that fragment's messages)."""
        self.runs += 1
        for key, (_, run, owners) in list(self.cache.items()):
            if fragments and not set(owners) & set(fragments):
                continue
            if self.runs - run > self.max_age:
                del self.cache[key]

    async def until(self, check, timeout: float, what: str):
        """Wait until check() is truthy; its value."""
        deadline = time.perf_counter() + timeout
        while not (value := check()):
            if self.reader.done():  # the server closed the connection
                raise ConnectionError(f"the page's websocket closed, waiting for {what}: {self.reader.exception()!r}")
            self.changed.clear()
            left = deadline - time.perf_counter()
            if left <= 0:
                raise TimeoutError(f"{what} did not happen within {timeout:.0f} s (last text: {self.texts[-1:]})")
            try:
                await asyncio.wait_for(self.changed.wait(), left)
            except TimeoutError:
                pass
        return value

    def saw(self, text: str) -> str | None:
        return next((t for t in reversed(self.texts) if text in t), None)

    async def press(self, label: str, timeout: float) -> None:
        """Press a button, as a click does, and wait for the page's run it starts to finish."""
        await self.until(lambda: label in self.buttons, timeout, f"a button {label!r}")
        runs = self.full_runs
        await self.rerun(press=label)
        await self.until(lambda: self.full_runs > runs, timeout, f"the run after {label!r}")


# ---- the teacher ---------------------------------------------------------------------------------
class WsTeacher:
    """The teacher as a websocket page: presses buttons by their labels."""

    async def open(self, url: str, timeout: float) -> str:
        self.page = Page(url, PAGE)
        await self.page.open()
        await self.page.press("Prefill", timeout)
        await self.page.until(lambda: 0 in self.page.steps, timeout, "Prefill")
        await self.page.press("Open a room for the class", timeout)
        link = await self.page.until(lambda: self.page.saw("?room="), timeout, "the room's link")
        return link.strip().rsplit("=", 1)[1]

    async def next_token(self, timeout: float) -> float:
        await self.page.until(lambda: "Next token" in self.page.buttons, timeout, "the Next token button")
        clicked = time.perf_counter()
        await self.page.rerun(press="Next token")
        return clicked

    async def settle(self, step: int, timeout: float) -> None:
        """The teacher's page shows `step`."""
        await self.page.until(lambda: step in self.page.steps, timeout, f"the teacher's step {step}")

    async def close(self) -> None:
        await self.page.close()


class BrowserTeacher:
    """The teacher as a real Chromium page (Playwright); also opens --browsers Chromium followers."""

    async def open(self, url: str, timeout: float) -> str:
        from playwright.async_api import async_playwright

        self.playwright = await async_playwright().start()
        self.browser = await self.playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        self.context = await self.browser.new_context(viewport={"width": 1300, "height": 900})
        self.page = page = await self.context.new_page()
        page.set_default_timeout(timeout * 1000)
        await page.goto(f"{url}/{PAGE}")
        await page.get_by_role("button", name="Prefill").wait_for()
        await wait_idle(page, timeout)
        await page.get_by_role("button", name="Prefill").click()
        await page.get_by_text("Prefill.").first.wait_for()
        await wait_idle(page, timeout)
        await page.get_by_text("Show this lesson to the class").click()
        await page.get_by_role("button", name="Open a room for the class").click()
        link = await page.locator("[data-testid='stCode']").filter(has_text="?room=").first.inner_text()
        return link.strip().rsplit("=", 1)[1]

    async def next_token(self, timeout: float) -> float:
        clicked = time.perf_counter()
        await self.page.get_by_role("button", name=re.compile("^Next token")).click()
        return clicked

    async def settle(self, step: int, timeout: float) -> None:
        """The teacher's page shows `step` (not "idle": its room's two-second fragment keeps it busy on a
        loaded machine)."""
        await wait_for_step(self.page, step, timeout)

    async def close(self) -> None:
        await self.browser.close()
        await self.playwright.stop()


async def browser_followers(url: str, code: str, count: int, step: int, timeout: float) -> tuple:
    """`count` real Chromium followers, in a browser of their own, each showing `step` once opened."""
    if not count:
        return None, []
    from playwright.async_api import async_playwright

    playwright = await async_playwright().start()
    browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)

    async def one():
        page = await (await browser.new_context(viewport={"width": 1300, "height": 900})).new_page()
        page.set_default_timeout(timeout * 1000)
        await page.goto(f"{url}/{PAGE}?room={code}")
        await page.get_by_text(f"Following room {code}").wait_for()
        await wait_for_step(page, step, timeout)
        return page

    pages = await asyncio.wait_for(asyncio.gather(*[one() for _ in range(count)]), timeout)
    return (playwright, browser), pages


# ---- the measurement -----------------------------------------------------------------------------
async def join(urls: list[str], code: str, count: int, timeout: float) -> tuple[list[Page], list[Page]]:
    """Open `count` followers, dealt to the app processes at `urls` in turn, a few at a time as a class does;
    (seated, refused)."""
    pages = [Page(urls[index % len(urls)], PAGE, f"room={code}") for index in range(count)]
    opening = asyncio.Semaphore(20)

    async def one(page: Page) -> None:
        async with opening:
            await page.open()
            await page.until(lambda: page.finished, timeout, "a follower's first run")

    await asyncio.wait_for(asyncio.gather(*[one(page) for page in pages]), timeout)
    seated = [page for page in pages if page.saw(f"Following room {code}")]
    return seated, [page for page in pages if page not in seated]


def progress(what: str) -> None:
    print(time.strftime("%H:%M:%S"), what, file=sys.stderr, flush=True)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[int(share * (len(ordered) - 1))]


async def step_all(teacher, step: int, seated: list[Page], browsers: list,
                   left) -> tuple[list, list, int, str, float | None, float]:
    """The teacher presses Next token; when each follower showed `step`: (websocket lags, browser lags,
    followers that never did, why the teacher's page did not show it or "", seconds from the click to the
    teacher's own page showing it, the click's time.perf_counter())."""
    clicked = await teacher.next_token(left())
    within = min(left(), STEP_TIMEOUT_S)

    async def teacher_shows() -> float:
        await teacher.settle(step, within)
        return time.perf_counter() - clicked

    own = asyncio.create_task(teacher_shows())  # beside the followers: the teacher's wait is a click's time
    shown = await asyncio.gather(*[page.until(lambda page=page: step in page.steps, within, f"step {step}")
                                   for page in seated], return_exceptions=True)
    lags = [page.steps[step] - clicked for page in seated if step in page.steps]
    browser_lags = [when - clicked for when in await asyncio.gather(
        *[wait_for_step(page, step, within) for page in browsers])]
    for page, result in zip(seated, shown):
        if isinstance(result, Exception) and page.missed is None:
            page.missed = f"step {step}: {result}"[:400]
    try:
        teacher_s, stopped = await own, ""
    except (TimeoutError, ConnectionError) as error:
        teacher_s, stopped = None, f"step {step}: {error}"[:400]
    return lags, browser_lags, sum(isinstance(s, Exception) for s in shown), stopped, teacher_s, clicked


async def teacher_alone(teacher, port: int, left) -> float:
    """Server CPU seconds of one Next token with nobody following (its page's run and the engine's step)."""
    cpu = server_cpu_seconds(port)
    for step in range(1, ALONE_STEPS + 1):
        await teacher.next_token(left())
        await teacher.settle(step, min(left(), STEP_TIMEOUT_S))
    return (server_cpu_seconds(port) - cpu) / ALONE_STEPS


@contextlib.contextmanager
def app_processes(count: int):
    """The URLs of `count` app processes: one alone, or several sharing a fresh redis-server's rooms."""
    with contextlib.ExitStack() as stack:
        env = {}
        if count > 1:
            env["KVVIZ_ROOMS_URL"] = stack.enter_context(running_redis()).url
        yield [stack.enter_context(running_app(env=env)) for _ in range(count)]


class MemoryWatch:
    """The largest resident memory of some app processes, sampled every 50 ms while it runs."""

    def __init__(self, ports: list[int]):
        self.ports, self.peaks, self.task = ports, {}, None

    async def sample(self) -> None:
        while True:
            for port in self.ports:
                self.peaks[port] = max(self.peaks.get(port, 0), server_rss_bytes(port))
            await asyncio.sleep(0.05)

    def start(self) -> None:
        self.peaks = {port: server_rss_bytes(port) for port in self.ports}
        self.task = asyncio.create_task(self.sample())

    def stop(self) -> dict[int, int]:
        self.task.cancel()
        return self.peaks


async def measure(args) -> dict:
    os.environ.setdefault("KVVIZ_ROOM_STUDENTS", str(args.followers + args.browsers))
    deadline = time.perf_counter() + args.timeout
    left = lambda: max(1.0, deadline - time.perf_counter())  # noqa: E731
    load_start, client_start = os.getloadavg()[0], cpu_seconds(Path("/proc/self"))
    with app_processes(args.processes) as urls, busy_processes(args.contend):
        url = urls[0]
        port, ports = int(url.rsplit(":", 1)[1]), [int(each.rsplit(":", 1)[1]) for each in urls]
        teacher = WsTeacher() if args.teacher == "ws" else BrowserTeacher()
        code = await teacher.open(url, left())
        progress(f"room {code} open")
        alone_cpu = await teacher_alone(teacher, port, left)
        progress(f"the teacher's own step: {alone_cpu:.2f} CPU-seconds")
        rss_before = server_rss_bytes(port)
        joined_at = time.perf_counter()
        seated, refused = await join(urls, code, args.followers, left())
        join_s = time.perf_counter() - joined_at
        progress(f"{len(seated)} followers joined in {join_s:.0f} s, {len(refused)} without a seat")
        chromium, browsers = await browser_followers(url, code, args.browsers, ALONE_STEPS, left())
        rss_joined = server_rss_bytes(port)
        cpu_idle_start = server_cpu_seconds(port)
        idle_each = {each: server_cpu_seconds(each) for each in ports}
        await asyncio.sleep(args.idle)  # the followers sit in the room; what the server does for them now
        idle_rate = (server_cpu_seconds(port) - cpu_idle_start) / args.idle
        idle_each = {each: (server_cpu_seconds(each) - idle_each[each]) / args.idle for each in ports}
        cpu_steps_start, stepping = server_cpu_seconds(port), time.perf_counter()
        cpu_each = {each: server_cpu_seconds(each) for each in ports}
        runs_before = {id(page): (page.finished, page.full_runs) for page in seated}
        lags, browser_lags, missed, stopped, done, teacher_times = [], [], 0, "", 0, []
        growth = {each: [] for each in ports}  # per step, each process's largest rise in resident memory
        clicks: dict[int, float] = {}  # step -> when the teacher clicked
        for step in range(ALONE_STEPS + 1, ALONE_STEPS + args.steps + 1):
            watch = MemoryWatch(ports)
            watch.start()
            before = dict(watch.peaks)
            more, more_browser, more_missed, stopped, teacher_s, clicks[step] = await step_all(
                teacher, step, seated, browsers, left)
            for each, peak in watch.stop().items():
                growth[each].append(peak - before[each])
            teacher_times += [teacher_s] if teacher_s is not None else []
            done += 1
            progress(f"step {step}: {len(more)} followers showed it, "
                     f"the last {max(more, default=0):.1f} s after the click")
            lags, browser_lags, missed = lags + more, browser_lags + more_browser, missed + more_missed
            if stopped:  # the teacher's page did not show its step: report what was measured
                progress(stopped)
                break
        last = ALONE_STEPS + done  # the run that showed the last step ends too (it may have ended already)
        await asyncio.gather(*[page.until(lambda page=page: page.finished > page.finished_before.get(last, -1),
                                          left(), "the last run") for page in seated], return_exceptions=True)
        steps_s = time.perf_counter() - stepping
        cpu_steps = server_cpu_seconds(port) - cpu_steps_start
        cpu_each = {each: server_cpu_seconds(each) - cpu_each[each] for each in ports}
        per_process = []
        for index, (each_url, each) in enumerate(zip(urls, ports)):
            mine = [page for page in seated if page.url == each_url]
            own = [page.steps[step] - clicked
                   for page in mine for step, clicked in clicks.items() if step in page.steps]
            spent = cpu_each[each] - idle_each[each] * steps_s - (alone_cpu * done if index == 0 else 0.0)
            per_process.append({
                "followers": len(mine),
                "cpu_ms_per_follower_step": round(1000 * spent / (max(1, len(mine)) * max(1, done)), 1),
                "lag_p50_s": round(statistics.median(own), 2) if own else None,
                "lag_p95_s": round(percentile(own, 0.95), 2) if own else None,
                "rss_growth_mib_per_step": round(statistics.median(growth[each]) / 2**20, 1) if growth[each] else None,
                "runs_per_follower_step": round(sum(page.finished - runs_before[id(page)][0] for page in mine)
                                                / (max(1, len(mine)) * max(1, done)), 2),
                "whole_page_runs_per_follower_step": round(
                    sum(page.full_runs - runs_before[id(page)][1] for page in mine)
                    / (max(1, len(mine)) * max(1, done)), 2),
                "rss_mib": round(server_rss_bytes(each) / 2**20, 1)})
        exceptions = sum(page.exceptions for page in seated)
        for page in seated + refused:
            await page.close()
        await teacher.close()
        if chromium:
            await chromium[1].close()
            await chromium[0].stop()
    followers = max(1, len(seated) + len(browsers))
    followers_cpu = cpu_steps - idle_rate * steps_s - alone_cpu * done
    return {
        "teacher": args.teacher, "followers_asked": args.followers, "followers_joined": len(seated),
        "followers_without_seat": len(refused),
        "no_seat_sentence": refused[0].texts[-1:] if refused else None,
        "browser_followers": len(browsers), "teacher_steps": args.steps, "join_wall_s": round(join_s, 1),
        "steps_wall_s": round(steps_s, 1), "server_cpu_s_steps": round(cpu_steps, 2),
        "server_cpu_s_teacher_step_alone": round(alone_cpu, 2),
        "cpu_ms_per_follower_step": round(1000 * followers_cpu / (followers * max(1, done)), 1),
        "cpu_ms_per_follower_step_gross": round(1000 * cpu_steps / (followers * max(1, done)), 1),
        "steps_done": done, "stopped": stopped, "busy_processes": args.contend,
        "teacher_next_token_s": [round(t, 2) for t in teacher_times],
        "teacher_next_token_median_s": round(statistics.median(teacher_times), 2) if teacher_times else None,
        "lag_p50_s": round(statistics.median(lags), 2) if lags else None,
        "lag_p95_s": round(percentile(lags, 0.95), 2) if lags else None,
        "lag_max_s": round(max(lags), 2) if lags else None,
        "browser_lags_s": [round(lag, 2) for lag in browser_lags],
        "follower_steps_missed": missed,
        "why_missed": sorted({page.missed for page in seated if page.missed})[:3],
        "steps_every_follower_saw": sorted(set.intersection(*[set(page.steps) for page in seated])) if seated else [],
        "rss_kib_per_follower": round((rss_joined - rss_before) / 1024 / followers, 1),
        "server_rss_mib": round(rss_joined / 2**20, 1),
        "idle_cpu_ms_per_follower_s": round(1000 * idle_rate / followers, 2),
        "load_average": [round(load_start, 2), round(os.getloadavg()[0], 2)],
        "client_cpu_s": round(cpu_seconds(Path("/proc/self")) - client_start, 1),
        "exceptions": exceptions, "processes": args.processes, "per_process": per_process,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--followers", type=int, default=30, help=f"websocket followers (1 to {MAX_FOLLOWERS})")
    parser.add_argument("--steps", type=int, default=5, help=f"Next token presses (1 to {MAX_STEPS})")
    parser.add_argument("--browsers", type=int, default=0, help="real Chromium followers beside them (0 to 5)")
    parser.add_argument("--teacher", choices=["browser", "ws"], default="browser",
                        help="a real Chromium teacher (default) or a websocket one")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds the room sits still for the idle figure")
    parser.add_argument("--timeout", type=float, default=600.0, help="give up after this many seconds")
    parser.add_argument("--json", type=Path, help="also write the report here")
    parser.add_argument("--processes", type=int, default=1, help="app processes sharing a Redis room (1 to 4)")
    parser.add_argument("--contend", type=int, default=0, metavar="N",
                        help="N busy processes (python -c 'while True: pass') beside the server, as on a shared one")
    args = parser.parse_args()
    if not (1 <= args.followers <= MAX_FOLLOWERS and 1 <= args.steps <= MAX_STEPS and 0 <= args.browsers <= 5
            and 1 <= args.idle <= 120 and 0 <= args.contend <= 16 and 1 <= args.processes <= 4):
        parser.error(f"use 1 to {MAX_FOLLOWERS} followers, 1 to {MAX_STEPS} steps, 0 to 5 browsers, 1 to 120 s idle, "
                     "0 to 16 busy processes, 1 to 4 processes")
    report = asyncio.run(asyncio.wait_for(measure(args), args.timeout + 60))
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0 if not (report["exceptions"] or report["follower_steps_missed"] or report["stopped"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
