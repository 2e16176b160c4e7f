"""Issue 61 item 2, measured: tabs open Prefill and decode links whose ?model= cycles through the allowed models,
each pressing Prefill, and the server's resident memory is read after every five tabs and once they all close.

    python scripts/model_links_memory.py               # 15 tabs over bundled, tiny-gemma3, tiny-mla, smollm2, gemma3
    python scripts/model_links_memory.py --tabs 10 --models bundled,smollm2

It starts the app (kvviz.ui.app_server.running_app), drives Debian's Chromium, and prints JSON: the server's VmRSS
in GiB before the first tab, after each fifth tab, and 20 s after every tab closed; the models each tab ran on;
and any sentence a tab was refused with (the server's memory budget, KVVIZ_MEMORY_GIB). Models not fetched here
are left out. Not part of CI.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]
from load_test import server_process  # noqa: E402

from playwright.sync_api import sync_playwright  # noqa: E402

from kvviz.hub.fetch import PACKAGED, fetched_folder  # noqa: E402
from kvviz.ui.app_server import CHROMIUM, CHROMIUM_ARGS, running_app  # noqa: E402


def rss_gib(process: Path) -> float:
    for line in (process / "status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 2**20, 2)
    return 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tabs", type=int, default=15)
    parser.add_argument("--models", default="bundled,tiny-gemma3,tiny-mla,smollm2,gemma3")
    args = parser.parse_args()
    models = [m for m in args.models.split(",") if m not in PACKAGED or fetched_folder(m) is not None]
    report = {"models": models, "rss_gib": {}, "refused": []}
    with running_app(env={"KVVIZ_DEFAULT_MODEL": "bundled"}) as url, sync_playwright() as playwright:
        process = server_process(int(url.rsplit(":", 1)[1]))
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        report["rss_gib"]["before"] = rss_gib(process)
        pages = []
        for tab in range(args.tabs):
            page = browser.new_context(viewport={"width": 1280, "height": 720}).new_page()
            page.set_default_timeout(300_000)
            page.goto(f"{url}/prefill_decode?model={models[tab % len(models)]}")
            page.get_by_role("button", name="Prefill", exact=True).click()
            page.locator("[data-testid='stage-step'], [data-testid='stAlertContentError']").first.wait_for()
            errors = page.locator("[data-testid='stAlertContentError']").all_inner_texts()
            report["refused"] += errors
            pages.append(page)
            if (tab + 1) % 5 == 0:
                report["rss_gib"][f"after {tab + 1} tabs"] = rss_gib(process)
        for page in pages:
            page.context.close()
        time.sleep(20)  # the lesson sweeper runs every 10 s
        report["rss_gib"]["20 s after every tab closed"] = rss_gib(process)
        browser.close()
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
