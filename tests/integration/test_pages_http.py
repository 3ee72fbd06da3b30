"""`GET /pages?url=` on a running worker returns the stored capture (real worker,
real broker, demo web on loopback)."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import topology
from streams.demo.server import start_server_process
from streams.demo.webgen import WebSpec
from streams.kafka.broker import EmbeddedBroker, free_port
from tests.integration.conftest import REPO, crawl_env, run_seine

#: Settings.kafka.partitions by default: the workers are started without --partitions.
PARTITIONS = 4


def fetch(url: str) -> tuple[int, bytes, dict[str, str]]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)
    except OSError:
        return 0, b"", {}


def wait_for_status(url: str, want: int, deadline_s: float) -> tuple[int, bytes, dict[str, str]]:
    deadline = time.monotonic() + deadline_s
    while True:
        got = fetch(url)
        if got[0] == want or time.monotonic() >= deadline:
            return got
        time.sleep(0.2)  # poll interval; the condition is the HTTP status


def test_pages_endpoint_serves_stored_captures(broker: EmbeddedBroker, tmp_path: Path) -> None:
    app_id = f"pg{uuid.uuid4().hex[:8]}"
    port = free_port()
    spec = WebSpec(hosts=3, pages_per_host=6, seed=4)
    with start_server_process(spec, None, tmp_path / "web") as server:
        args = [
            sys.executable,
            "-m",
            "streams.cli",
            "worker",
            "--bootstrap",
            broker.bootstrap,
            "--data-dir",
            str(tmp_path / "data"),
            "--web-port",
            str(port),
            "--allow-private",
        ]
        for host, addr in server.resolve.items():
            args += ["--resolve", f"{host}={addr}"]
        log = open(tmp_path / "worker.log", "wb")  # noqa: SIM115
        worker = subprocess.Popen(
            args,
            env=crawl_env(app_id),
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            base = f"http://127.0.0.1:{port}/pages?url="
            target = sorted(server.web.reachable_allowed())[0]
            # the worker creates the topics as it starts; seed once they exist
            deadline = time.monotonic() + 60
            while True:
                seeded = run_seine(
                    ["seed", *server.seeds, "--bootstrap", broker.bootstrap],
                    env=crawl_env(app_id),
                )
                if seeded.returncode == 0 or time.monotonic() > deadline:
                    break
                time.sleep(0.5)  # the worker is still creating its topics
            assert seeded.returncode == 0, seeded.stderr
            status, body, headers = wait_for_status(
                base + urllib.parse.quote(target, safe=""), 200, 90
            )
            assert status == 200, (
                status,
                body[:300],
                (tmp_path / "worker.log").read_text()[-2000:],
            )
            parts = urllib.parse.urlsplit(target)
            served = server.web.page(parts.hostname or "", parts.path or "/")
            assert served is not None and body == served[2]
            assert headers["X-Seine-Url"] == target and headers["X-Seine-Status"] == "200"
            missing = fetch(base + urllib.parse.quote("http://nowhere.example/", safe=""))
            assert missing[0] == 404 and b"not stored" in missing[1]
            assert fetch(base + "javascript:alert(1)")[0] == 400
            assert fetch(f"http://127.0.0.1:{port}/pages")[0] == 400
        finally:
            worker.terminate()
            try:
                worker.wait(20)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
            log.close()


def _start_worker(
    broker: EmbeddedBroker, app_id: str, data_dir: Path, port: int, resolve: dict[str, str]
) -> tuple[subprocess.Popen[bytes], Any]:
    args = [
        *(sys.executable, "-m", "streams.cli", "worker", "--bootstrap", broker.bootstrap),
        *("--data-dir", str(data_dir), "--web-port", str(port), "--allow-private"),
    ]
    for host, addr in resolve.items():
        args += ["--resolve", f"{host}={addr}"]
    log = open(data_dir.with_suffix(".log"), "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        args,
        # Longer group timeouts than crawl_env's: two members that miss a 4 s session
        # on a busy machine rebalance over and over and never fetch.
        env=crawl_env(
            app_id,
            SEINE_SESSION_TIMEOUT="20",
            SEINE_REBALANCE_TIMEOUT="10",
            SEINE_HEARTBEAT_INTERVAL="2",
        ),
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    return proc, log


def _probe_urls(partitions: int) -> list[str]:
    """One unstored URL per partition: a worker answers 404 for each once it owns or can
    relay every partition (503 while the group is rebalancing)."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < partitions:
        host = f"probe-{i}.example"
        found.setdefault(topology.host_partition(host, partitions), f"http://{host}/")
        i += 1
    return list(found.values())


def _wait_settled(ports: list[int], procs: list[Any], deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    for port in ports:
        for url in _probe_urls(PARTITIONS):
            while fetch(f"http://127.0.0.1:{port}/pages?url={urllib.parse.quote(url)}")[0] != 404:
                assert all(p.poll() is None for p in procs), "a worker exited"
                assert time.monotonic() < deadline, f"port {port} not settled"
                time.sleep(0.2)  # poll interval; the condition is the 404


def test_pages_relayed_to_the_worker_owning_the_host(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """Two worker processes: a page stored by one is returned through the other."""
    app_id = f"pr{uuid.uuid4().hex[:8]}"
    spec = WebSpec(hosts=8, pages_per_host=3, seed=5)
    with start_server_process(spec, None, tmp_path / "web") as server:
        ports = [free_port(), free_port()]
        workers: list[tuple[subprocess.Popen[bytes], Any]] = []
        try:
            # The second joins once the first has settled (one rebalance, not many).
            workers.append(_start_worker(broker, app_id, tmp_path / "w1", ports[0], server.resolve))
            _wait_settled(ports[:1], [w[0] for w in workers], 90)
            workers.append(_start_worker(broker, app_id, tmp_path / "w2", ports[1], server.resolve))
            _wait_settled(ports, [w[0] for w in workers], 90)
            seeded = run_seine(
                ["seed", *server.seeds, "--bootstrap", broker.bootstrap], env=crawl_env(app_id)
            )
            assert seeded.returncode == 0, seeded.stderr
            # One stored page per host, over every partition.
            targets: dict[str, str] = {}
            for url in sorted(server.web.reachable_allowed()):
                targets.setdefault(urllib.parse.urlsplit(url).hostname or "", url)
            relayed: dict[int, int] = {0: 0, 1: 0}
            for host, url in sorted(targets.items()):
                served = server.web.page(host, urllib.parse.urlsplit(url).path or "/")
                assert served is not None
                for i, port in enumerate(ports):
                    status, body, headers = wait_for_status(
                        f"http://127.0.0.1:{port}/pages?url={urllib.parse.quote(url, safe='')}",
                        200,
                        180,  # the first page waits for the crawl; the rest are stored
                    )
                    assert status == 200, (url, status, body[:200])
                    assert body == served[2] and headers["X-Seine-Url"] == url
                    if "X-Seine-Served-By" in headers:
                        assert headers["X-Seine-Served-By"].endswith(f":{ports[1 - i]}")
                        relayed[i] += 1
            # Each worker returned at least one page that the other one stores.
            assert relayed[0] > 0 and relayed[1] > 0, relayed
        finally:
            for proc, _ in workers:
                proc.terminate()
            for proc, log in workers:
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                log.close()
