"""Issue 35 items 1-4 in Chromium, timed and memory-checked: scripts/probe_hostile.py starts its own app and
browser, uploads the crafted files (a Paged file of 2,000 records, one of 256 layers x 1,000,000 blocks, a
Prefill file of block_size 1024 x 4,096 blocks, one with room answers at their limits) and opens a link
whose values are markdown, and measures the server's CPU seconds and peak memory per case. Each must be
refused in one sentence or handled within 30 s of CPU and 500 MiB above idle, with no exception box and no
element pointing at the link's address. (Cases 7 and E, a late-step link and the Eviction lab at its
largest, run 20-25 CPU s each and stay in the script: the per-click table in the README quotes them.)"""

import json
import subprocess
import sys

from kvviz.ui.app_server import ROOT

from app_tests import one_sentence


def test_crafted_files_and_a_markdown_link_are_refused_or_handled_within_the_bounds(tmp_path):
    out = tmp_path / "probe.json"
    done = subprocess.run([sys.executable, "scripts/probe_hostile.py", "--cases", "1,1b,2,3,4", "--timeout", "240",
                           "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    print(done.stdout[-4000:])
    results = {r["case"]: r for r in json.loads(out.read_text())}
    assert set(results) == {"1", "1b", "2", "3", "4"}
    for case in results.values():
        assert case["pass"], (case, done.stderr[-3000:])
        assert case["cpu_s"] <= 30 and case["rss_above_idle_mib"] <= 500 and not case["exceptions"]
    for refused in ("1b", "3"):
        assert one_sentence(results[refused]["outcome"]) and "export the lesson again" in results[refused]["outcome"]
    assert results["1"]["outcome"] == "handled" and results["4"]["outcome"] == "handled"
    assert "is not a number" in results["2"]["outcome"] and "0 elements point at kvviz.invalid" in results["2"]["notes"]
    assert done.returncode == 0
