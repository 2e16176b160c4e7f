"""A room full of students: start the app, drive N real browser sessions at once, measure.

    python scripts/load_test.py --sessions 30 --steps 5           # 30 separate lessons
    python scripts/load_test.py --sessions 30 --steps 5 --room    # 30 students following one teacher

Separate lessons: each session opens the "Prefill and decode" lesson in its own browser context
(its own Streamlit session), types a prompt with its own marker word, presses Prefill and then
Next token several times. The script reports the median and 95th percentile of the time from a
click to the page being idle again, and checks that every session's tokens carry its own marker
and no other session's.

--room: one teacher runs the lesson and opens a room; the N students open its link, each in a
browser context of its own, and follow while the teacher presses Next token `--steps` times. The
script reports how long after the teacher's click each student showed the new step, and the
server's CPU seconds while N followers sat idle for ten seconds.

Both report the server's resident memory and the CPU seconds it used (user + system, from
/proc), before and after. Loopback only; bounded in sessions, steps and time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from kvviz.ui.app_server import CHROMIUM, CHROMIUM_ARGS, running_app

BUSY_JS = ("() => document.querySelectorAll('[data-stale=\"true\"], [data-testid=\"stSkeleton\"], "
           "[data-testid=\"stStatusWidget\"]').length")
MARKERS = ["Romeo", "Juliet", "Hamlet", "Ophelia", "Macbeth", "Banquo", "Portia", "Shylock", "Viola",
           "Orsino", "Prospero", "Miranda", "Ariel", "Caliban", "Lear", "Cordelia", "Goneril", "Regan",
           "Othello", "Iago", "Desdemona", "Cassio", "Puck", "Oberon", "Titania", "Bottom", "Rosalind",
           "Orlando", "Beatrice", "Benedick", "Brutus", "Cassius", "Antony", "Cleopatra", "Falstaff"]


IDLE_WINDOW_S = 10.0


class RssPeak:
    """The server's peak VmRSS, sampled every 0.2 s in a thread, from `start()` on."""

    def __init__(self, status: Path):
        self.status, self.peak, self.running = status, 0, False

    def read(self) -> int:
        try:
            for line in self.status.read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def start(self) -> int:
        self.peak, self.running = self.read(), True
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()
        return self.peak

    def loop(self) -> None:
        while self.running:
            self.peak = max(self.peak, self.read())
            time.sleep(0.2)

    def stop(self) -> int:
        self.running = False
        self.thread.join()
        return max(self.peak, self.read())


def server_process(port: int) -> Path | None:
    """/proc/PID of the streamlit process listening on `port` (Linux)."""
    for cmdline_file in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            cmdline = cmdline_file.read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "streamlit" in cmdline and f"--server.port {port}" in cmdline:
            return cmdline_file.parent
    return None


def server_rss_bytes(port: int) -> int:
    """Resident memory of the streamlit process listening on `port`."""
    process = server_process(port)
    for line in (process / "status").read_text().splitlines() if process else []:
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def server_cpu_seconds(port: int) -> float:
    """CPU time the server has used so far, user and system, all its threads."""
    process = server_process(port)
    return 0.0 if process is None else cpu_seconds(process)


def cpu_seconds(process: Path) -> float:
    """CPU time a process has used so far, user and system, all its threads (0 once it is gone)."""
    try:
        fields = (process / "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


class BrowserMeter:
    """CPU time of this script's other descendants: Playwright's driver and the Chromium processes.
    They share the machine with the server, so a slow redraw on two cores is theirs as much as its.
    A closed tab's renderer takes its count with it, so the meter samples every half second and
    keeps each process's last count."""

    def __init__(self, port: int):
        self.port, self.seen = port, {}  # pid -> CPU seconds last read

    def sample(self) -> float:
        parents = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
        server = server_process(self.port)
        skip = {os.getpid(), int(server.name) if server else -1}
        ours, found = {os.getpid()}, True
        while found:
            found = False
            for pid, parent in parents.items():
                if parent in ours and pid not in ours:
                    ours.add(pid)
                    found = True
        for pid in ours - skip:
            self.seen[pid] = max(self.seen.get(pid, 0.0), cpu_seconds(Path(f"/proc/{pid}")))
        return sum(self.seen.values())

    async def run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(0.5)


def server_state(port: int, browsers: BrowserMeter) -> dict:
    return {"rss_mib": round(server_rss_bytes(port) / 2**20, 1), "cpu_s": round(server_cpu_seconds(port), 2),
            "browsers_cpu_s": round(browsers.sample(), 1)}


async def wait_idle(page, timeout: float = 300.0) -> None:
    await asyncio.sleep(0.3)
    deadline, quiet_since = time.time() + timeout, None
    while time.time() < deadline:
        if await page.evaluate(BUSY_JS) == 0:
            quiet_since = quiet_since or time.time()
            if time.time() - quiet_since >= 0.5:
                return
        else:
            quiet_since = None
        await asyncio.sleep(0.15)
    raise TimeoutError("a session stayed busy for five minutes")


async def student(browser, url: str, marker: str, steps: int, timings: list[float]) -> dict:
    context = await browser.new_context(viewport={"width": 1300, "height": 900})
    page = await context.new_page()
    page.set_default_timeout(300_000)
    await page.goto(f"{url}/prefill_decode")
    await page.get_by_role("button", name="Prefill").wait_for()
    await wait_idle(page)
    prompt = page.get_by_label("Prompt", exact=True)
    own_prompt = f"{marker.upper()}:\n{marker}, {marker}, wherefore art thou"
    await prompt.fill(own_prompt)
    await prompt.press("Control+Enter")
    await wait_idle(page)
    for step in range(steps + 1):
        start = time.perf_counter()
        await page.get_by_role("button", name="Prefill" if step == 0 else "Next token").click()
        # the step is drawn once its guided text appears; a busy server may start the rerun late
        await page.get_by_text("Prefill." if step == 0 else f"Decode step {step}.").first.wait_for()
        await wait_idle(page)
        timings.append(time.perf_counter() - start)
    # the page writes its lesson's prompt and step into its URL: they must be this session's own
    query = parse_qs(urlsplit(page.url).query)
    shown = query.get("prompt", [""])[0]
    generated = int(query.get("step", ["-1"])[0]) + 1
    errors = await page.locator("[data-testid='stException']").count()
    await context.close()
    return {"marker": marker, "own": shown == own_prompt, "shown": shown, "generated": generated,
            "exceptions": errors}


async def shown_step(page, stage: bool = False) -> int | None:
    """The step a Prefill and decode page shows: its look-back slider's value (drawn from step 1),
    else its guided text; `stage`: the sentence over the stage (a follower's moves with the teacher,
    its views below stay)."""
    try:
        box = page.locator("[data-testid='stSlider']").filter(has_text="Look back at step")
        if not stage and await box.count():
            return int(await box.first.locator("[data-testid='stSliderThumbValue']").inner_text(timeout=1000))
        text = await page.locator("[data-testid='stAlertContentSuccess']").first.inner_text(timeout=1000)
    except Exception:  # the page is redrawing
        return None
    if text.startswith("Prefill."):
        return 0
    found = re.match(r"Decode step (\d+)", text)
    return int(found.group(1)) if found else None


async def wait_for_step(page, step: int, timeout: float = 300.0, stage: bool = False) -> float:
    """When the page first showed `step` (time.perf_counter())."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if await shown_step(page, stage) == step:
            return time.perf_counter()
        await asyncio.sleep(0.1)
    shot = Path("artifacts") / f"load_test_student_step_{step}.png"
    if shot.parent.is_dir():
        await page.screenshot(path=str(shot), full_page=True)
    raise TimeoutError(f"a student still showed step {await shown_step(page)}, not {step} (see {shot})")


async def follower(browser, link: str, code: str) -> tuple:
    context = await browser.new_context(viewport={"width": 1300, "height": 900})
    page = await context.new_page()
    page.set_default_timeout(300_000)
    await page.goto(link)
    await page.get_by_text(f"Following room {code}").wait_for()
    await wait_for_step(page, 0)
    return context, page


async def room_async(args) -> dict:
    """One teacher, `args.sessions` students following; the teacher steps `args.steps` times."""
    from playwright.async_api import async_playwright

    with running_app() as url:
        port = int(url.rsplit(":", 1)[1])
        meter = BrowserMeter(port)
        sampler = asyncio.create_task(meter.run())
        started = server_state(port, meter)
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            context = await browser.new_context(viewport={"width": 1300, "height": 900})
            teacher = await context.new_page()
            teacher.set_default_timeout(300_000)
            await teacher.goto(f"{url}/prefill_decode")
            await teacher.get_by_role("button", name="Prefill").wait_for()
            await wait_idle(teacher)
            await teacher.get_by_role("button", name="Prefill").click()
            await teacher.get_by_text("Prefill.").first.wait_for()
            await wait_idle(teacher)
            await teacher.get_by_text("Show this lesson to the class").click()
            await teacher.get_by_role("button", name="Open a room for the class").click()
            code_box = teacher.locator("[data-testid='stCode']").filter(has_text="?room=").first
            code = (await code_box.inner_text()).strip().rsplit("=", 1)[1]
            link = f"{url}/prefill_decode?room={code}"  # the panel's link names this machine's network address
            teaching = server_state(port, meter)
            joined_at = time.perf_counter()
            pages = await asyncio.wait_for(asyncio.gather(
                *[follower(browser, link, code) for _ in range(args.sessions)]), args.timeout)
            join_s = time.perf_counter() - joined_at
            await teacher.get_by_text(f"{args.sessions} of {args.sessions} students following",
                                      exact=False).wait_for()
            joined = server_state(port, meter)
            await asyncio.sleep(IDLE_WINDOW_S)  # the followers' fallback checks, nothing else
            idle = server_state(port, meter)
            lags: list[float] = []
            step_cpu: list[float] = []  # the server's CPU seconds from each click to every page showing it
            stepping = time.perf_counter()
            for step in range(1, args.steps + 1):
                await asyncio.sleep(1.0)  # the previous step's last redraws end
                cpu_before = server_cpu_seconds(port)
                clicked = time.perf_counter()
                await teacher.get_by_role("button", name=re.compile("^Next token")).click()
                shown = await asyncio.wait_for(asyncio.gather(
                    *[wait_for_step(page, step, stage=True) for _, page in pages]), args.timeout)
                lags += [when - clicked for when in shown]
                await wait_idle(teacher)
                step_cpu.append(server_cpu_seconds(port) - cpu_before)
            steps_wall = time.perf_counter() - stepping
            stepped = server_state(port, meter)
            errors = sum([await page.locator("[data-testid='stException']").count() for _, page in pages])
            for student_context, _ in pages:
                await student_context.close()
            await context.close()
            await browser.close()
        sampler.cancel()
    lags.sort()
    lags = lags or [0.0]
    return {
        "mode": "room", "students": args.sessions, "teacher_steps": args.steps,
        "join_wall_s": round(join_s, 1),
        "follow_lag_median_s": round(statistics.median(lags), 2),
        "follow_lag_p95_s": round(lags[int(0.95 * (len(lags) - 1))], 2),
        "follow_lag_max_s": round(lags[-1], 2),
        "server_at_start": started, "server_teacher_ready": teaching, "server_students_joined": joined,
        "server_after_idle": idle, "server_after_steps": stepped,
        "cpu_s_students_joining": round(joined["cpu_s"] - teaching["cpu_s"], 1),
        "cpu_s_per_s_idle_following": round((idle["cpu_s"] - joined["cpu_s"]) / IDLE_WINDOW_S, 2),
        "steps_wall_s": round(steps_wall, 1),
        "cpu_s_teacher_steps": round(stepped["cpu_s"] - idle["cpu_s"], 2),
        "cpu_s_step_median": round(statistics.median(step_cpu), 3),  # the teacher's own run included
        "cpu_s_steps": [round(c, 3) for c in step_cpu],
        "browsers_cpu_s_teacher_steps": round(stepped["browsers_cpu_s"] - idle["browsers_cpu_s"], 1),
        "rss_mib_added_by_students": round(joined["rss_mib"] - teaching["rss_mib"], 1),
        "exceptions": errors,
    }


async def main_async(args) -> dict:
    from playwright.async_api import async_playwright

    markers = (MARKERS * ((args.sessions // len(MARKERS)) + 1))[:args.sessions]
    markers = [f"{m}{i}" if args.sessions > len(MARKERS) else m for i, m in enumerate(markers)]
    with running_app() as url:
        port = int(url.rsplit(":", 1)[1])
        meter = BrowserMeter(port)
        sampler = asyncio.create_task(meter.run())
        before = server_state(port, meter)
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            timings: list[float] = []
            started = time.perf_counter()
            results = await asyncio.wait_for(asyncio.gather(
                *[student(browser, url, m, args.steps, timings) for m in markers]), args.timeout)
            wall = time.perf_counter() - started
            after = server_state(port, meter)
            await browser.close()
        sampler.cancel()
    leaks = [{"session": r["marker"], "saw": r["shown"][:60]} for r in results if not r["own"]]
    short = [r["marker"] for r in results if r["generated"] != args.steps + 1]
    timings.sort()
    report = {
        "mode": "separate lessons", "sessions": args.sessions, "steps_per_session": args.steps + 1,
        "clicks": len(timings),
        "step_time_median_s": round(statistics.median(timings), 3),
        "step_time_p95_s": round(timings[int(0.95 * (len(timings) - 1))], 3),
        "wall_s": round(wall, 1),
        "server_before": before, "server_after": after,
        "cpu_s_lessons": round(after["cpu_s"] - before["cpu_s"], 1),
        "browsers_cpu_s_lessons": round(after["browsers_cpu_s"] - before["browsers_cpu_s"], 1),
        "exceptions": sum(r["exceptions"] for r in results),
        "sessions_with_foreign_tokens": leaks,
        "sessions_missing_steps": short,
    }
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=30)
    parser.add_argument("--steps", type=int, default=5, help="Next-token clicks per session after Prefill")
    parser.add_argument("--timeout", type=float, default=900.0, help="give up after this many seconds")
    parser.add_argument("--room", action="store_true", help="students follow one teacher's room")
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args()
    if not 1 <= args.sessions <= 60 or not 1 <= args.steps <= 47:
        parser.error("use 1 to 60 sessions and 1 to 47 steps")
    report = asyncio.run(room_async(args) if args.room else main_async(args))
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    failed = report.get("sessions_with_foreign_tokens") or report.get("sessions_missing_steps")
    ok = not (report["exceptions"] or failed)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
