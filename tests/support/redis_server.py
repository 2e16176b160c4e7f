"""A real redis-server for the rooms' tests (Debian's package, scripts/test.sh installs it).

    with running_redis() as server:     # server.url: redis://127.0.0.1:PORT/0
        server.stop()                   # the server goes away mid-test (a crash, not a shutdown)

It listens on a free loopback port, keeps nothing on disk (--save '' --appendonly no) and runs in a
temporary folder; it is stopped on leaving the block.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from kvviz.ui.app_server import free_port

REDIS_SERVER = Path("/usr/bin/redis-server")


@dataclass
class RedisServer:
    process: subprocess.Popen
    port: int

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        """Kill the server (SIGKILL: nothing is flushed, clients see the connection drop)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


@contextlib.contextmanager
def running_redis(timeout: float = 10.0):
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="kvviz-redis-") as folder:
        process = subprocess.Popen(
            [str(REDIS_SERVER), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", folder], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        server = RedisServer(process, port)
        try:
            deadline = time.time() + timeout
            while True:
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
                if time.time() > deadline or process.poll() is not None:
                    raise RuntimeError("redis-server did not start")
                time.sleep(0.05)
            yield server
        finally:
            server.stop()
