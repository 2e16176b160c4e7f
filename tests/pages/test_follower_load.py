"""scripts/follower_load.py (issue 34): its websocket followers, against the real app in a real
Streamlit server, follow a websocket teacher through every step, and the figures it prints are numbers.
No Chromium; no timing is asserted (the machine is shared)."""

import importlib
import json
import subprocess
import sys

import pytest

from app_tests import ROOT

FOLLOWERS, STEPS, ALONE_STEPS = 3, 2, 2  # the script presses Next token ALONE_STEPS times before anyone joins


@pytest.mark.slow
def test_websocket_followers_see_every_step_and_the_figures_are_numbers(tmp_path):
    report_file = tmp_path / "report.json"
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "follower_load.py"), "--teacher", "ws", "--followers", str(FOLLOWERS),
         "--steps", str(STEPS), "--idle", "2", "--timeout", "240", "--json", str(report_file)],
        cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    report = json.loads(report_file.read_text())
    assert json.loads(run.stdout) == report  # what it prints is what it writes
    assert report["followers_joined"] == FOLLOWERS and report["followers_without_seat"] == 0
    assert report["steps_every_follower_saw"] == list(range(ALONE_STEPS, ALONE_STEPS + STEPS + 1))
    assert report["follower_steps_missed"] == 0 and report["exceptions"] == 0
    for figure in ("cpu_ms_per_follower_step", "lag_p50_s", "lag_p95_s", "rss_kib_per_follower",
                   "idle_cpu_ms_per_follower_s", "server_cpu_s_teacher_step_alone", "client_cpu_s"):
        assert isinstance(report[figure], (int, float)), figure
    assert 0 <= report["lag_p50_s"] <= report["lag_p95_s"] <= report["lag_max_s"]


def test_help_explains_the_figures(monkeypatch, capsys):
    """In this process, whose torch is loaded already (a process of its own spends 5 s importing it)."""
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    monkeypatch.setattr(sys, "argv", ["follower_load.py", "--help"])
    follower_load = importlib.import_module("follower_load")
    with pytest.raises(SystemExit) as ended:
        follower_load.main()
    assert ended.value.code == 0
    shown = capsys.readouterr().out
    for words in ("--followers", "--browsers", "--teacher", "cpu_ms_per_follower_step", "lag_p95_s",
                  "rss_kib_per_follower", "idle_cpu_ms_per_follower_s"):
        assert words in shown
