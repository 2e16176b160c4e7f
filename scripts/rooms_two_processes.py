"""A room served by two app processes through one redis-server: how long a step takes to reach a follower.

    python scripts/rooms_two_processes.py --followers-a 2 --followers-b 2 --steps 8

Starts a redis-server (Debian's, on a free loopback port, nothing saved) and two app processes
(`streamlit run`) pointed at it with KVVIZ_ROOMS_URL. A teacher on process A runs Prefill and decode
and opens a room; the followers open its link, split between A and B, each a Chromium context of its
own. The teacher presses Next token `--steps` times; each follower's page notes, in the page, when
its sentence first names the new step. Reported: the median and the largest time from the teacher's
click to a follower showing the step, for followers on A and on B, to the teacher's own page
showing it, and the machine's load average before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "support")]  # this checkout's kvviz and app.py

from chromium import run_finished, shared_browser  # noqa: E402
from redis_server import running_redis  # noqa: E402
from room_pages import click_at, new_page, open_room, start_lesson, wait_for_step  # noqa: E402

from kvviz.ui.app_server import running_app  # noqa: E402

# Each follower's page notes when its sentence first names each step (the browser's clock is this machine's).
STEPS_JS = """() => {
  window.__kvvizSteps = window.__kvvizSteps || {};
  const note = () => {
    const found = document.querySelector("[data-testid='stAlertContentSuccess']");
    const step = found && found.innerText.match(/^Decode step (\\d+)/);
    if (step && !(step[1] in window.__kvvizSteps)) window.__kvvizSteps[step[1]] = Date.now() / 1000;
  };
  new MutationObserver(note).observe(document.body, {subtree: true, childList: true, characterData: true});
  note();
}"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--followers-a", type=int, default=2, choices=range(0, 11))
    parser.add_argument("--followers-b", type=int, default=2, choices=range(1, 11))
    parser.add_argument("--steps", type=int, default=8, choices=range(1, 41))
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(running_redis())
        os.environ["KVVIZ_ROOMS_URL"] = server.url
        url_a, url_b = stack.enter_context(running_app()), stack.enter_context(running_app())
        browser = shared_browser()
        stack.callback(browser.close)
        context, teacher = new_page(browser, f"{url_a}/prefill_decode")
        start_lesson(teacher)
        code = open_room(teacher)
        followers = []
        for where, url, count in (("A", url_a, args.followers_a), ("B", url_b, args.followers_b)):
            for _ in range(count):
                _, page = new_page(browser, f"{url}/prefill_decode?room={code}")
                try:
                    page.get_by_text(f"Following room {code}").wait_for(timeout=120_000)
                except Exception as error:
                    page.screenshot(path=str(ROOT / "artifacts" / f"follower-{where}-{len(followers)}.png"))
                    raise SystemExit(f"follower {len(followers)} on {where} did not follow: "
                                     + page.locator("[data-testid='stMain']").inner_text()[:600]) from error
                wait_for_step(page, 1, 120)
                page.evaluate(STEPS_JS)
                followers.append((where, page))
        teacher.evaluate(STEPS_JS)
        followers.append(("teacher", teacher))  # the teacher's own page: the step's run, before any follower
        waits: dict[str, list[float]] = {"A": [], "B": [], "teacher": []}
        load = os.getloadavg()[0]
        for step in range(2, args.steps + 2):
            run_finished(teacher)
            clicked = click_at(teacher, "Next token")
            for where, page in followers:
                page.wait_for_function(f"() => (window.__kvvizSteps || {{}})['{step}'] !== undefined",
                                       timeout=120_000)
                waits[where].append(page.evaluate(f"() => window.__kvvizSteps['{step}']") - clicked)
            time.sleep(1.0)  # a teacher looks at a step before the next
        report = {"followers": {"A": args.followers_a, "B": args.followers_b}, "steps": args.steps,
                  "load_average_1min": [round(load, 1), round(os.getloadavg()[0], 1)], "cpus": os.cpu_count()}
        for where, times in waits.items():
            if times:
                report[f"click_to_step_{where}_s"] = {"median": round(statistics.median(times), 3),
                                                      "max": round(max(times), 3), "n": len(times)}
        print(json.dumps(report, indent=1))
        context.close()


if __name__ == "__main__":
    main()
