"""`seine crawl --until-idle` tells a script whether the crawl did anything.

A crawl whose every seed is refused up front ends at once with exit status 2 and one
line a seed; one whose every host was unreachable ends with exit status 3 and the
reason on stderr, so a cron job or CI step notices. Seeds sent to the seeds topic by
other producers are judged by the seeds stage (see test_dead_letters.py).
"""

from __future__ import annotations

import socket
from pathlib import Path

from streams.kafka.broker import EmbeddedBroker
from streams.ops.exits import EXIT_NOTHING_FETCHED
from tests.integration.conftest import crawl_env, run_crawl, run_seine


def _closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_only_invalid_seeds_are_refused_before_anything_starts(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """Each refused seed is one line with its reason; none left is exit 2, at once."""
    run = run_crawl(
        broker,
        tmp_path / "data",
        ["not a url", "javascript:alert(1)", "ftp://files.example/x"],
        partitions=1,
        resolve={},
        timeout=60,
    )
    assert run.returncode == 2, run.stderr[-3000:]
    assert run.stderr.splitlines() == [
        "seine crawl: seed 'not a url': a plain seed must be one URL on one line",
        "seine crawl: seed 'javascript:alert(1)' is not an absolute URL",
        "seine crawl: seed 'ftp://files.example/x' is not a valid http(s) URL",
        "seine crawl: no seed left to crawl",
    ]
    assert not (tmp_path / "data").exists()  # no broker, no worker, no data dir


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
    # the summary says why: the reasons reach the terminal, not only the crawl log
    why = [ln for ln in run.stdout.splitlines() if ln.startswith("seine: why pages")]
    assert len(why) == 1 and "robots-unavailable" in why[0], run.stdout[-2000:]
    # ... and stay readable from the data dir once the crawl (and its broker) is gone
    status = run_seine(["status", "--data-dir", str(tmp_path / "data")], env=crawl_env("x"))
    assert status.returncode == 0, status.stderr[-2000:]
    assert f"in {tmp_path / 'data'}" in status.stdout
    assert "robots-unavailable" in status.stdout and "Traceback" not in status.stderr
