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

from streams.broker import EmbeddedBroker, free_port
from streams.demo.server import start_server_process
from streams.demo.webgen import WebSpec
from tests.integration.conftest import REPO, crawl_env, run_seine


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
