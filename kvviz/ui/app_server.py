"""Start the real app with `streamlit run` on a free loopback port, for the browser tests and scripts.

    with running_app() as url:          # http://127.0.0.1:PORT, stopped on leaving the block
        ...

Its log goes to artifacts/streamlit-PORT.log when the checkout has an artifacts/ folder.
CHROMIUM and CHROMIUM_ARGS are the browser the tests and scripts/load_test.py drive it with; when a
page has finished is the drivers' business (tests/support/chromium.py, scripts/page_idle.py), not the app's.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout: app.py, artifacts/
CHROMIUM = os.environ.get("KVVIZ_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def running_app(timeout: float = 90.0, env: dict[str, str] | None = None):
    """Yield the base URL of a freshly started app, its server's environment this process's with `env`
    over it; stop it afterwards."""
    port = free_port()
    log = open(ROOT / "artifacts" / f"streamlit-{port}.log", "w") if (ROOT / "artifacts").is_dir() \
        else subprocess.DEVNULL
    process = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.port", str(port),
         "--server.address", "127.0.0.1", "--server.headless", "true",
         "--server.fileWatcherType", "none"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.time() > deadline or process.poll() is not None:
                raise RuntimeError("the app did not start; see artifacts/streamlit-*.log")
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
