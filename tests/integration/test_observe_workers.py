"""With several workers, any worker's dashboard data covers the whole crawl: the
worker asks the others for their figures and sums them (`seine crawl --workers 2
--web-port P` gives the workers ports P and P+1)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from streams.demo.server import start_server_process
from streams.demo.webgen import WebSpec
from streams.kafka.broker import EmbeddedBroker, free_port
from tests.integration.conftest import REPO, crawl_env, stop_process


def snapshot(port: int, scope: str) -> dict[str, Any]:
    with urllib.request.urlopen(
        f"http://127.0.0.1:{port}/stats.json?scope={scope}", timeout=10
    ) as response:
        return dict(json.loads(response.read()))


def known_crash(data: Path) -> str:
    """The line saying another process took port P+1 between the check and the
    worker's bind (a race of the test's port choice, not a fault of Seine), or ''.
    Any other crash, e.g. a table recovery error, fails the test."""
    for log in data.glob("worker-*/worker.log"):
        for line in log.read_text(errors="replace").splitlines():
            if "address already in use" in line:
                return line[:300]
    return ""


def test_dashboard_data_sums_every_worker(broker: EmbeddedBroker, tmp_path: Path) -> None:
    port = free_port()
    while True:  # the second worker takes the next port: both must be free
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 1))
            break
        except OSError:
            port = free_port()
    spec = WebSpec(hosts=8, pages_per_host=40, seed=9)
    with start_server_process(spec, None, tmp_path / "web") as server:
        args = [
            sys.executable,
            "-m",
            "streams.cli",
            "crawl",
            *server.seeds,
            "--workers",
            "2",
            "--bootstrap",
            broker.bootstrap,
            "--data-dir",
            str(tmp_path / "data"),
            "--web-port",
            str(port),
            "--allow-private",
            "--keep-running",
            "--delay",
            "0.3",
        ]
        for host, addr in server.resolve.items():
            args += ["--resolve", f"{host}={addr}"]
        log_path = tmp_path / "crawl.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                args,
                env=crawl_env(f"obw{uuid.uuid4().hex[:8]}"),
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            try:
                deadline = time.monotonic() + 120
                crawl: dict[str, Any] = {}
                while True:
                    try:
                        crawl = snapshot(port, "crawl")
                        mine = [snapshot(p, "worker") for p in (port, port + 1)]
                        if crawl["workers"] == 2 and all(
                            m["outcomes"].get("fetched", 0) > 0 for m in mine
                        ):
                            break
                    except OSError:
                        pass
                    crashed = known_crash(tmp_path / "data")
                    if crashed:
                        pytest.skip(f"another process took the second worker's port: {crashed}")
                    if time.monotonic() > deadline:
                        worker_logs = [
                            (tmp_path / "data" / f"worker-{i}" / "worker.log").read_text()[-1500:]
                            for i in range(2)
                            if (tmp_path / "data" / f"worker-{i}" / "worker.log").exists()
                        ]
                        raise AssertionError(f"never saw both workers fetch: {crawl} {worker_logs}")
                    time.sleep(0.5)  # poll interval; the condition is the snapshots
                # asked after each worker's own figures, the sum is at least their sum
                again = snapshot(port + 1, "crawl")
                assert again["workers"] == again["workers_expected"] == 2
                assert again["outcomes"]["fetched"] >= sum(m["outcomes"]["fetched"] for m in mine)
                assert again["queued"] >= 0 and again["lag"]
                hosts = {h["host"] for h in again["hosts"]}
                # hosts with work or a fetch in flight; none once the crawl has drained
                assert hosts or again["queued"] == 0, again
                assert all(h.startswith("site-") for h in hosts), hosts
            finally:
                stop_process(proc, 60)
