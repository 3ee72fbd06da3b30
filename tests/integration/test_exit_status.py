"""`seine crawl --until-idle` tells a script whether the crawl did anything.

A crawl whose every seed was rejected, or whose every host was unreachable, ends
with exit status 3 and the reason on stderr, so a cron job or CI step notices; the
rejected input itself is still in dead-letters (see test_dead_letters.py).
"""

from __future__ import annotations

import socket
from pathlib import Path

from streams.kafka.broker import EmbeddedBroker
from streams.ops.exits import EXIT_NOTHING_FETCHED
from tests.integration.conftest import run_crawl


def _closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_only_invalid_seeds_exit_non_zero(broker: EmbeddedBroker, tmp_path: Path) -> None:
    run = run_crawl(
        broker,
        tmp_path / "data",
        ["not a url", "javascript:alert(1)"],
        partitions=1,
        resolve={},
        timeout=120,
    )
    assert run.returncode == EXIT_NOTHING_FETCHED, run.stderr[-3000:]
    assert "no page was fetched" in run.stderr
    assert "2 dead letters" in run.stderr


def test_unreachable_host_exits_non_zero(broker: EmbeddedBroker, tmp_path: Path) -> None:
    port = _closed_port()
    run = run_crawl(
        broker,
        tmp_path / "data",
        [f"http://down.test:{port}/"],
        partitions=1,
        resolve={"down.test": "127.0.0.1"},
        timeout=120,
        SEINE_ROBOTS_RETRY="0.2",  # give up on robots.txt after ~0.6 s, not minutes
    )
    assert run.returncode == EXIT_NOTHING_FETCHED, run.stderr[-3000:]
    assert "no page was fetched" in run.stderr
