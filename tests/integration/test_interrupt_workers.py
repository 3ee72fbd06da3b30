"""Ctrl-C on `seine crawl --workers 2` drains every worker and exits 130: each page the
server answered before the stop is in the page store (nothing was in transit between
stages when the embedded broker went), and no traceback. The same command run again
finishes the crawl without fetching a stored page again, whichever worker each
partition lands on: one capture a URL in the WARC files."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

from streams.demo.server import read_request_log, start_server_process
from streams.demo.webgen import WebSpec
from streams.store.storeset import open_stores
from tests.integration.conftest import REPO, captures, workers_crawl_args

SPEC = WebSpec(hosts=6, pages_per_host=30, seed=29)


def test_ctrl_c_drains_every_worker_and_exits_130(tmp_path: Path) -> None:
    data, log = tmp_path / "data", tmp_path / "requests.jsonl"
    env = {**os.environ, "SEINE_APP_ID": f"int{uuid.uuid4().hex[:6]}", "SEINE_LOG_LEVEL": "error"}
    with start_server_process(SPEC, log, tmp_path / "web") as server:
        args = workers_crawl_args(server, data, "0.1")
        crawl = subprocess.Popen(
            args, env=env, cwd=REPO, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True,  # its own group: the Ctrl-C of a terminal
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 90
            expected = len(server.web.reachable_allowed())
            while not log.exists() or len(read_request_log(log)) < expected // 3:
                assert crawl.poll() is None, crawl.communicate()
                assert time.monotonic() < deadline, "the crawl fetched too little"
                time.sleep(0.1)  # polling the server's log, bounded by the deadline
            os.killpg(crawl.pid, signal.SIGINT)
            stdout, stderr = crawl.communicate(timeout=120)
            stopped_at = time.time()
        finally:
            if crawl.poll() is None:
                os.killpg(crawl.pid, signal.SIGKILL)
                crawl.wait()
        assert crawl.returncode == 130, stderr[-3000:]
        assert "draining" in stderr and "Traceback" not in stderr, stderr[-3000:]
        assert "by 2 workers" in stdout
        with open_stores(data) as stores:
            stored = {url for url, _original in stores.url_kinds()}
        rerun = subprocess.run(
            args, env=env, cwd=REPO, stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        assert rerun.returncode == 0, rerun.stderr[-3000:]
    again = {
        f"http://{r['host']}:{server.port}{r['path']}"
        for r in read_request_log(log)
        if r["path"] != "/robots.txt" and r["start"] > stopped_at
    }
    assert not again & stored, sorted(again & stored)[:5]
    in_warc = captures(data)
    assert set(in_warc) == set(server.web.reachable_allowed()), len(in_warc)
    assert set(in_warc.values()) == {1}, [u for u, n in in_warc.items() if n > 1][:5]
    answered = {
        f"http://{r['host']}:{server.port}{r['path']}"
        for r in read_request_log(log)
        if r["path"] != "/robots.txt" and r["start"] < stopped_at and r["status"] == 200
    }
    assert answered and answered <= stored, sorted(answered - stored)[:5]
    assert len(stored) < expected  # stopped mid-crawl
