"""What a class of students each running a lesson of their own costs the server in memory, per model.

    python scripts/students_memory.py --students 60 --steps 5 --models smollm2,gemma3

For each model: start the app, open one page on ?model=NAME (the server loads the model once), then open
--students pages of Prefill and decode over Streamlit's websocket (scripts/follower_load.py's Page, which speaks
to the server as a browser does), each pressing Prefill and then Next token --steps times at the page's defaults,
a few students at a time. Reported per model (JSON): the server's resident memory with the model loaded and no
lesson, after every student's lesson, and the difference per student in MiB; the students whose lesson the
server refused (its live-lesson or memory limit) with the sentence they got; the wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]
from follower_load import Page  # noqa: E402
from load_test import server_rss_bytes  # noqa: E402

from kvviz.ui.app_server import running_app  # noqa: E402

PAGE = "prefill_decode"
AT_ONCE = 6  # students pressing at the same moment


async def one_student(url: str, model: str, steps: int, timeout: float) -> str | None:
    """One student's lesson; None when it ran, else the last sentence the page showed."""
    page = Page(url, PAGE, f"model={model}")
    await page.open()
    try:
        await page.until(lambda: page.finished, timeout, "the first run")
        await page.press("Prefill", timeout)
        for _ in range(steps):
            if "Next token" not in page.buttons:
                return (page.texts[-1:] or ["no Next token button"])[0][:300]
            await page.press("Next token", timeout)
        return None if page.steps else (page.texts[-1:] or ["no step shown"])[0][:300]
    finally:
        await page.close()


async def measure(model: str, students: int, steps: int, timeout: float) -> dict:
    started = time.perf_counter()
    with running_app(env={"KVVIZ_MAX_LESSONS": str(students + 10)}) as url:
        port = int(url.rsplit(":", 1)[1])
        first = Page(url, PAGE, f"model={model}")  # loads the model; no lesson yet
        await first.open()
        await first.until(lambda: "Prefill" in first.buttons, timeout, "the page on the model")
        rss_model = server_rss_bytes(port)
        gate, refused = asyncio.Semaphore(AT_ONCE), []

        async def student() -> None:
            async with gate:
                said = await one_student(url, model, steps, timeout)
                if said is not None:
                    refused.append(said)

        await asyncio.gather(*[student() for _ in range(students)])
        rss_lessons = server_rss_bytes(port)
        await first.close()
    ran = students - len(refused)
    return {"model": model, "students": students, "steps": steps, "ran": ran,
            "rss_model_mib": round(rss_model / 2**20, 1), "rss_after_lessons_mib": round(rss_lessons / 2**20, 1),
            "mib_per_student": round((rss_lessons - rss_model) / 2**20 / max(1, ran), 2),
            "refused": sorted(set(refused))[:3], "wall_s": round(time.perf_counter() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=60, help="students, each with a lesson of their own (1 to 200)")
    parser.add_argument("--steps", type=int, default=5, help="Next token presses after Prefill (0 to 48)")
    parser.add_argument("--models", default="smollm2,gemma3", help="comma-separated model names")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds one press may take")
    args = parser.parse_args()
    if not (1 <= args.students <= 200 and 0 <= args.steps <= 48):
        parser.error("use 1 to 200 students and 0 to 48 steps")
    reports = [asyncio.run(measure(model.strip(), args.students, args.steps, args.timeout))
               for model in args.models.split(",") if model.strip()]
    print(json.dumps(reports, indent=2))


if __name__ == "__main__":
    main()
