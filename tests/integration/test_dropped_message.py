"""A message Faust drops on its way to the agent holds `seine crawl --workers 2` open
until it is read again, instead of ending the crawl without its pages.

A test-only sitecustomize makes one content-dedup message carry a stale consumer
generation, so Faust's stream passes over it unacknowledged (what a started-again
worker did to one message in a multi-worker crawl). The messages after it are
handled, so the offsets handed on pass it; the worker's commit is held at it, the
stuck-partition rewind reads it again, and every reachable page must be stored once.
Here the summed counts are short of it too; after a worker's restart, messages
handled twice can balance them, and only the held commit the worker reports keeps the
crawl from ending (tests/unit/test_unfinished.py).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from streams.demo.server import start_server_process
from streams.demo.webgen import WebSpec
from tests.integration.conftest import captures, crawl_env, run_seine

SPEC = WebSpec(hosts=4, pages_per_host=40, seed=41)
INJECT = Path(__file__).parent / "faultinject"


@pytest.mark.parametrize("partitions", [2, 4])
def test_a_dropped_message_holds_the_crawl_until_read_again(
    tmp_path: Path, partitions: int
) -> None:
    app_id = f"drop{uuid.uuid4().hex[:6]}"
    data = tmp_path / "data"
    env = crawl_env(
        app_id,
        SEINE_WORKERS="2",
        SEINE_LOG_LEVEL="warning",
        SEINE_TEST_STALE_MESSAGE="content-dedup:0:2",
        PYTHONPATH=os.pathsep.join(filter(None, [str(INJECT), os.environ.get("PYTHONPATH")])),
    )
    with start_server_process(SPEC, None, tmp_path / "web") as server:
        args = ["crawl", *server.seeds, "--data-dir", str(data), "--allow-private"]
        args += ["--partitions", str(partitions), "--delay", "0"]
        for host, addr in server.resolve.items():
            args += ["--resolve", f"{host}={addr}"]
        run = run_seine(args, env=env, timeout=180)
        expected = set(server.web.reachable_allowed())
    assert run.returncode == 0, run.stderr[-3000:]
    logs = "".join(p.read_text(encoding="utf-8") for p in sorted(data.glob("worker-*/worker.log")))
    assert "offset 2 made stale" in logs, logs[-3000:]  # the fault happened
    assert "reading it again from offset 2" in logs, logs[-3000:]
    assert "partitions not handled to the end" not in run.stderr, run.stderr[-3000:]
    stored = captures(data, responses_only=False)
    assert expected <= set(stored), sorted(expected - set(stored))[:5]
    assert max(stored.values()) == 1, [u for u, n in stored.items() if n > 1][:5]
