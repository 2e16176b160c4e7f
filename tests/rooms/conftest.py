"""What the rooms' tests share: a fresh redis-server for a test (redis_url)."""

import pytest

from redis_server import REDIS_SERVER, running_redis


@pytest.fixture()
def redis_url(monkeypatch):
    """A fresh redis-server for one test, and KVVIZ_ROOMS_URL naming it; skipped where Debian's redis-server is
    not installed."""
    if not REDIS_SERVER.exists():
        pytest.skip("redis-server is not installed (/usr/bin/redis-server; scripts/test.sh installs it)")
    with running_redis() as server:
        monkeypatch.setenv("KVVIZ_ROOMS_URL", server.url)
        yield server
