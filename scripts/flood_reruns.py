"""Issue 61's rerun flood, measured: a script's websocket tabs ask the server to rerun as fast as they can while a
teacher in Chromium presses Next token, and the teacher's clicks are timed.

    python scripts/flood_reruns.py                  # 6 flooding tabs for the teacher's 5 clicks
    python scripts/flood_reruns.py --tabs 12 --clicks 8

It starts the app (kvviz.ui.app_server.running_app) on the bundled model, opens the teacher's Prefill and decode
page at 1280x720 in Debian's Chromium, presses Prefill, then times Next token (the click to the stage's caption
naming the next step) --clicks times on a quiet server; then opens --tabs websocket clients that each send empty
rerun requests (Streamlit's BackMsg rerun_script, as a browser's devtools script would) without pause, opening a
socket the server closed again at once, and times
the same clicks again. It prints the median and the largest click of each phase, the requests the flood sent,
and the server's CPU seconds (user + system, from /proc) in each phase, as JSON. Not part of CI.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]
from load_test import server_cpu_seconds  # noqa: E402

from playwright.sync_api import sync_playwright  # noqa: E402
from streamlit.proto.BackMsg_pb2 import BackMsg  # noqa: E402

from kvviz.ui.app_server import CHROMIUM, CHROMIUM_ARGS, running_app  # noqa: E402


def flood(url: str, tabs: int, stop: threading.Event, sent: list[int], reconnects: list[int], rate: float = 0) -> None:
    """`tabs` websocket clients, each sending rerun requests until `stop`: `rate` a second each, or (0) as fast as
    the socket takes them."""
    import websockets

    message = BackMsg()
    message.rerun_script.query_string = ""
    payload = message.SerializeToString()

    async def tab() -> None:
        while not stop.is_set():  # a closed socket is opened again at once, as a determined script would
            try:
                async with websockets.connect(url.replace("http", "ws") + "/_stcore/stream", subprotocols=["streamlit"],
                                              max_size=None) as socket:
                    async def drain() -> None:
                        async for _ in socket:
                            pass
                    reader = asyncio.create_task(drain())
                    while not stop.is_set():
                        await socket.send(payload)
                        sent[0] += 1
                        await asyncio.sleep(1 / rate if rate else 0)
                    reader.cancel()
            except (OSError, websockets.exceptions.WebSocketException):
                reconnects[0] += 1

    async def run() -> None:
        await asyncio.gather(*(tab() for _ in range(tabs)), return_exceptions=True)
    asyncio.run(run())


def time_clicks(page, clicks: int) -> list[float]:
    """Seconds from each Next token click to the stage's caption naming the step it took."""
    times = []
    for _ in range(clicks):
        caption = page.locator("[data-testid='stage-step']").inner_text()
        step = (int(caption.split("step ")[-1].split(" ")[0]) if caption.startswith("Prefill")
                else int(caption.split()[1]))
        started = time.perf_counter()
        page.get_by_role("button", name="Next token").first.click()
        page.locator("[data-testid='stage-step']").filter(has_text=f"Step {step + 1} of").wait_for(timeout=300_000)
        times.append(time.perf_counter() - started)
        page.wait_for_timeout(300)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tabs", type=int, default=6)
    parser.add_argument("--clicks", type=int, default=5)
    parser.add_argument("--rate", type=float, default=0, help="messages a second per tab (0: as fast as possible)")
    args = parser.parse_args()
    with running_app(env={"KVVIZ_DEFAULT_MODEL": "bundled"}) as url, sync_playwright() as playwright:
        server = int(url.rsplit(":", 1)[1])  # its port
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        page.goto(f"{url}/prefill_decode")
        page.get_by_role("button", name="Prefill", exact=True).click()
        page.locator("[data-testid='stage-step']").wait_for(timeout=300_000)
        page.wait_for_timeout(1000)
        cpu = server_cpu_seconds(server)
        quiet = time_clicks(page, args.clicks)
        quiet_cpu, cpu = server_cpu_seconds(server) - cpu, server_cpu_seconds(server)
        stop, sent, reconnects = threading.Event(), [0], [0]
        flooder = threading.Thread(target=flood, args=(url, args.tabs, stop, sent, reconnects, args.rate), daemon=True)
        flooder.start()
        time.sleep(2.0)  # the flood under way
        flooded = time_clicks(page, args.clicks)
        stop.set()
        flooder.join(timeout=10)
        flood_cpu = server_cpu_seconds(server) - cpu
        browser.close()
    print(json.dumps({"tabs": args.tabs, "rate_per_tab": args.rate or "unlimited", "requests_sent": sent[0],
                      "sockets_closed_by_the_server": reconnects[0],
                      "quiet_click_s": {"median": round(statistics.median(quiet), 2), "max": round(max(quiet), 2)},
                      "flooded_click_s": {"median": round(statistics.median(flooded), 2),
                                          "max": round(max(flooded), 2)},
                      "server_cpu_s": {"quiet": round(quiet_cpu, 1), "flooded": round(flood_cpu, 1)}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
