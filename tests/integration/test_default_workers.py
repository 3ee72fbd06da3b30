"""`seine crawl` with no --workers runs a worker per core (at most one per partition),
as a user gets it: its own embedded broker, the summary naming the workers, every
reachable page fetched and stored once (counted from the WARC files)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from streams.demo.server import read_request_log, start_server_process
from streams.demo.webgen import WebSpec
from streams.settings import Settings, worker_count
from tests.integration.conftest import REPO, captures

SPEC = WebSpec(hosts=8, pages_per_host=12, seed=37)


def test_the_default_crawl_runs_a_worker_per_core(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SEINE_WORKERS"}
    env.update({"SEINE_APP_ID": f"dw{uuid.uuid4().hex[:6]}", "SEINE_LOG_LEVEL": "error"})
    data, log = tmp_path / "data", tmp_path / "requests.jsonl"
    with start_server_process(SPEC, log, tmp_path / "web") as server:
        args = [sys.executable, "-m", "streams.cli", "crawl", *server.seeds]
        args += ["--data-dir", str(data), "--allow-private", "--delay", "0"]
        for host, addr in server.resolve.items():
            args += ["--resolve", f"{host}={addr}"]
        done = subprocess.run(
            args, env=env, cwd=REPO, stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        expected = set(server.web.reachable_allowed())
    assert done.returncode == 0, done.stderr[-3000:]
    workers = worker_count(Settings())
    named = f"by {workers} workers" if workers > 1 else "by 1 worker"
    assert named in done.stdout, done.stdout
    if workers > 1:
        assert sorted(p.name for p in data.glob("worker-*")) == [
            f"worker-{i}" for i in range(workers)
        ]
    fetches = [(r["host"], r["path"]) for r in read_request_log(log) if r["path"] != "/robots.txt"]
    assert len(fetches) == len(set(fetches)) == len(expected)
    # one record a URL: a response, or a revisit for an exact copy of another page
    stored = captures(data)
    assert set(stored) == expected, sorted(set(stored) ^ expected)[:5]
    assert set(stored.values()) == {1}
