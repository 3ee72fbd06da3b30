"""A worker of `seine crawl --workers 2` killed mid-crawl is started again by the
parent, and the crawl goes on to its end: exit 0, every reachable page stored, each
with one record (counted from the WARC index, not from `seine pages`): nothing stored
or fetched before the kill is fetched again, whichever worker its partition lands on.

On the embedded broker, and with `--broker kafka` on the one-node Apache Kafka
`seine crawl` starts (tests/run.sh runs the after-commits case there)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streams.demo.server import start_server_process
from streams.demo.webgen import WebSpec
from streams.ops.multiworker import STATUS_FILE, read_status
from tests.integration.conftest import REPO, broker_kind, captures, workers_crawl_args

SPEC = WebSpec(hosts=6, pages_per_host=30, seed=37)


def fetched_five(status: dict[str, Any]) -> bool:
    return int(status.get("fetched", 0)) >= 5


def committed_past_seeds(status: dict[str, Any]) -> bool:
    """Worker-0 fetched 5 pages and committed messages of a stage topic: a worker
    started again does not handle those again."""
    return fetched_five(status) and any(
        offset > 0 and not topic.endswith(".seeds")
        for topic, _partition, offset in status.get("committed_upto", ())
    )


def broker_env() -> dict[str, str]:
    """With --broker kafka, `seine crawl` starts a one-node Apache Kafka (group
    timeouts as conftest's, which Kafka's minimum session timeout allows)."""
    if broker_kind() != "kafka":
        return {}
    return {
        "SEINE_BROKER": "kafka",
        "SEINE_SESSION_TIMEOUT": "6",
        "SEINE_REBALANCE_TIMEOUT": "6",
        "SEINE_HEARTBEAT_INTERVAL": "1",
    }


def crawl_hitting_worker_0(
    tmp_path: Path,
    hit: signal.Signals,
    ready: Callable[[dict[str, Any]], bool] = fetched_five,
    **env_extra: str,
) -> tuple[str, set[str]]:
    """`seine crawl --workers 2` over SPEC, sending `hit` to worker-0 once its status
    is `ready` (by default: it fetched 5 pages); returns the crawl's stderr and the
    reachable pages, after asserting it ended with exit 0."""
    data = tmp_path / "data"
    env = {
        **os.environ,
        "SEINE_APP_ID": f"rep{uuid.uuid4().hex[:6]}",
        "SEINE_LOG_LEVEL": "error",
        **broker_env(),
        **env_extra,
    }
    with start_server_process(SPEC, None, tmp_path / "web") as server:
        args = workers_crawl_args(server, data, "0.1")
        crawl = subprocess.Popen(
            args, env=env, cwd=REPO, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            status = data / "worker-0" / STATUS_FILE
            deadline = time.monotonic() + 90
            while not ready(read_status(status) or {}):
                assert crawl.poll() is None, crawl.communicate()
                assert time.monotonic() < deadline, "worker-0 never got there"
                time.sleep(0.1)  # polling its status file, bounded by the deadline
            os.kill(int((read_status(status) or {})["pid"]), hit)
            _stdout, stderr = crawl.communicate(timeout=240)
        finally:
            if crawl.poll() is None:
                crawl.kill()
                crawl.wait()
        assert crawl.returncode == 0, stderr[-3000:]
        return stderr, set(server.web.reachable_allowed())


def test_a_killed_worker_is_started_again_and_the_crawl_ends(tmp_path: Path) -> None:
    stderr, expected = crawl_hitting_worker_0(tmp_path, signal.SIGKILL)
    assert "worker-0 exited (-9); starting it again" in stderr, stderr[-3000:]
    stored = captures(tmp_path / "data", responses_only=False)
    assert expected <= set(stored), sorted(expected - set(stored))[:5]
    # one record per URL, revisits included: no page the dead worker stored, or
    # fetched, is fetched again (the frontier's fetched-already, link-extract's
    # body read back from the previous owner's store)
    assert max(stored.values()) == 1, [u for u, n in stored.items() if n > 1][:5]


def test_a_worker_killed_after_its_commits_is_replaced_and_the_crawl_ends(
    tmp_path: Path,
) -> None:
    """Killed once it has committed: its successor does not handle those messages
    again, so the crawl's sums and offsets need the dead worker's last status and
    the commits (a crawl on Apache Kafka killed this way never ended)."""
    stderr, expected = crawl_hitting_worker_0(tmp_path, signal.SIGKILL, committed_past_seeds)
    assert "worker-0 exited (-9); starting it again" in stderr, stderr[-3000:]
    stored = captures(tmp_path / "data", responses_only=False)
    assert expected <= set(stored), sorted(expected - set(stored))[:5]
    assert max(stored.values()) == 1, [u for u, n in stored.items() if n > 1][:5]


def test_a_stuck_worker_is_killed_and_started_again(tmp_path: Path) -> None:
    """A worker that stops reporting (here: SIGSTOP) holds partitions nobody else
    takes on the embedded broker, and in a group holds the table locks of those the
    others get: its parent kills it after `hung_after` and starts it again, and the
    crawl ends as with a killed one."""
    stderr, expected = crawl_hitting_worker_0(tmp_path, signal.SIGSTOP, SEINE_HUNG_AFTER="3")
    assert "worker-0 has not reported for 3s; killing it" in stderr, stderr[-3000:]
    assert "worker-0 exited (-9); starting it again" in stderr, stderr[-3000:]
    stored = captures(tmp_path / "data", responses_only=False)
    assert expected <= set(stored), sorted(expected - set(stored))[:5]
    once = captures(tmp_path / "data", responses_only=True)
    assert max(once.values()) == 1, [u for u, n in once.items() if n > 1][:5]
