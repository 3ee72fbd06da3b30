"""`seine replay` recrawls a page that changed: a real worker, a real broker, and a
loopback server whose page content changes between the two fetches."""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from streams.kafka.broker import EmbeddedBroker
from tests.integration.conftest import REPO, crawl_env, run_seine, stop_process

HOST = "changing.test"
URL = f"http://{HOST}/"


class ChangingSite:
    """One page whose text is `version`; every request is logged (path, time)."""

    def __init__(self) -> None:
        self.version = "version one"
        self.requests: list[tuple[str, float]] = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                site.requests.append((self.path, time.time()))
                if self.path == "/":
                    body = (
                        f"<html><head><title>Changing</title></head>"
                        f"<body><p>This page says {site.version}.</p></body></html>"
                    ).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html; charset=utf-8")
                else:
                    body = b"not here"
                    self.send_response(404)
                    self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def hits(self, path: str) -> int:
        return sum(1 for p, _ in self.requests if p == path)


@pytest.fixture
def site() -> Iterator[ChangingSite]:
    s = ChangingSite()
    s.thread.start()
    try:
        yield s
    finally:
        s.server.shutdown()
        s.server.server_close()


def stored_body(data: Path, env: dict[str, str], at: float | None = None) -> str:
    args = ["get", URL, "--data-dir", str(data)]
    if at is not None:
        args += ["--at", f"{at:.6f}"]
    done = run_seine(args, env=env, timeout=60)
    return done.stdout if done.returncode == 0 else ""


def wait_for_body(data: Path, env: dict[str, str], text: str, log: Path) -> None:
    deadline = time.monotonic() + 90
    while text not in stored_body(data, env):
        if time.monotonic() > deadline:
            raise AssertionError(f"{text!r} never stored; worker log: {log.read_text()[-2000:]}")
        time.sleep(0.3)  # poll interval; the condition is the stored body


def test_replay_recrawls_a_changed_page(
    broker: EmbeddedBroker, site: ChangingSite, tmp_path: Path
) -> None:
    app_id = f"rp{uuid.uuid4().hex[:8]}"
    env = crawl_env(app_id)
    data = tmp_path / "data"
    log_path = tmp_path / "worker.log"
    log = open(log_path, "wb")  # noqa: SIM115
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streams.cli",
            "worker",
            "--bootstrap",
            broker.bootstrap,
            "--data-dir",
            str(data),
            "--allow-private",
            "--delay",
            "0.5",
            "--resolve",
            f"{HOST}=127.0.0.1:{site.port}",
        ],
        env=env,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:  # the worker creates the topics as it starts; seed once they exist
            seeded = run_seine(["seed", URL, "--bootstrap", broker.bootstrap], env=env)
            if seeded.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)  # the worker is still creating its topics
        assert seeded.returncode == 0, seeded.stderr
        wait_for_body(data, env, "version one", log_path)
        first_stored = time.time()
        assert site.hits("/") == 1

        site.version = "version two"
        base = ["replay", "--bootstrap", broker.bootstrap, "--app-id", app_id]
        # the revisit schedule: a page fetched less than an hour ago is left alone
        young = run_seine([*base, "--since", "10m", "--min-age", "3600"], env=env)
        assert young.returncode == 0, young.stderr
        assert "0 URL(s) re-fed" in young.stderr and "1 fetched less than" in young.stderr
        listed = run_seine([*base, "--from-offset", "0", "--dry-run"], env=env)
        assert listed.returncode == 0 and listed.stdout.split() == [URL], listed
        replayed = run_seine([*base, "--since", "10m"], env=env)
        assert replayed.returncode == 0, replayed.stderr
        assert "1 URL(s) re-fed to the frontier" in replayed.stderr

        wait_for_body(data, env, "version two", log_path)
        assert "version one" in stored_body(data, env, at=first_stored)
        assert site.hits("/") == 2  # once more, not once per replay attempt
        assert site.hits("/robots.txt") == 1  # the host's robots state was kept
        times = [t for p, t in site.requests]
        assert all(b - a >= 0.45 for a, b in itertools.pairwise(times))  # --delay
    finally:
        stop_process(worker)
        log.close()
