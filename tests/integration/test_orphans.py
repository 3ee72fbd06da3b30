"""SIGKILL of `seine crawl --workers 2`'s parent leaves no orphan: its embedded broker
and both workers die with it, so nothing holds the RocksDB locks and the same command
run again finishes the crawl: every reachable page stored, each with one record (from
the CDXJ index), no page stored before the kill fetched again whichever worker its
partition lands on this time, no traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

from streams.demo.server import read_request_log, start_server_process
from streams.demo.webgen import WebSpec
from streams.ops.multiworker import STATUS_FILE, read_status
from streams.store.storeset import open_stores
from tests.integration.conftest import REPO, captures, workers_crawl_args

SPEC = WebSpec(hosts=4, pages_per_host=30, seed=31)


def children(pid: int) -> set[int]:
    """Every live descendant of `pid`, from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_killing_the_parent_takes_its_workers_and_broker_along(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {**os.environ, "SEINE_APP_ID": f"orph{uuid.uuid4().hex[:6]}", "SEINE_LOG_LEVEL": "error"}
    log = tmp_path / "requests.jsonl"
    with start_server_process(SPEC, log, tmp_path / "web") as server:
        args = workers_crawl_args(server, data, "0.2")
        first = subprocess.Popen(
            args, env=env, cwd=REPO, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 90
            statuses = [data / f"worker-{i}" / STATUS_FILE for i in range(2)]
            while sum((read_status(p) or {}).get("fetched", 0) for p in statuses) < 10:
                assert first.poll() is None, "the crawl ended before the kill"
                assert time.monotonic() < deadline, "the workers fetched nothing"
                time.sleep(0.1)  # polling their status files, bounded by the deadline
            family = children(first.pid)
            assert len(family) >= 3, family  # the broker and two workers, at least
            first.send_signal(signal.SIGKILL)
            first.wait()
            killed_at = time.time()
            deadline = time.monotonic() + 20
            while any(alive(p) for p in family):
                assert time.monotonic() < deadline, [p for p in family if alive(p)]
                time.sleep(0.1)  # polling /proc, bounded by the deadline
        finally:
            if first.poll() is None:
                first.kill()
        stored_at_kill = set(captures(data))
        again = subprocess.run(
            args, env=env, cwd=REPO, stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        assert again.returncode == 0, again.stderr[-3000:]
        assert "Traceback" not in again.stderr
        expected = set(server.web.reachable_allowed())
        port = server.port
    with open_stores(data) as stores:
        stored = {url for url, _original in stores.url_kinds()}
    # the rerun's own account (what its resume re-queued) beside the pages it lacks
    assert expected <= stored, (sorted(expected - stored)[:5], again.stderr[-2000:])
    # one record a URL (a response, or a revisit for an exact copy of another page)
    in_warc = captures(data)
    assert set(in_warc.values()) == {1}, [u for u, n in in_warc.items() if n > 1][:5]
    # what the first run had stored when it was killed is not fetched again: each
    # partition's tables are where its next worker looks; only the fetches then in
    # flight, whose pages were not stored, are done again
    assert stored_at_kill, "the first run stored nothing before the kill"
    requests = [r for r in read_request_log(log) if r["path"] != "/robots.txt"]
    after = {f"http://{r['host']}:{port}{r['path']}" for r in requests if r["start"] > killed_at}
    assert not after & stored_at_kill, sorted(after & stored_at_kill)[:5]
