"""`seine crawl` shows a rich progress display on a terminal (a real pseudo-terminal
here) and plain lines when its output is a pipe."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
import uuid
from pathlib import Path

from streams.demo.server import ServerProcess, start_server_process
from streams.demo.webgen import WebSpec
from streams.kafka.broker import EmbeddedBroker
from tests.integration.conftest import REPO, crawl_env, run_crawl


def crawl_args(broker: EmbeddedBroker, data: Path, server: ServerProcess) -> list[str]:
    args = [
        "crawl",
        *server.seeds,
        "--bootstrap",
        broker.bootstrap,
        "--data-dir",
        str(data),
        "--allow-private",
        "--until-idle",
    ]
    for host, addr in server.resolve.items():
        args += ["--resolve", f"{host}={addr}"]
    return args


def test_progress_on_a_terminal_is_a_rich_display(broker: EmbeddedBroker, tmp_path: Path) -> None:
    spec = WebSpec(hosts=3, pages_per_host=8, seed=11)
    with start_server_process(spec, None, tmp_path / "web") as server:
        master, slave = pty.openpty()
        env = {**crawl_env(f"tty{uuid.uuid4().hex[:8]}"), "COLUMNS": "150", "TERM": "xterm"}
        proc = subprocess.Popen(
            [sys.executable, "-m", "streams.cli", *crawl_args(broker, tmp_path / "d", server)],
            env=env,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=slave,
        )
        os.close(slave)
        seen = b""
        deadline = time.monotonic() + 180
        try:
            while time.monotonic() < deadline:
                ready, _, _ = select.select([master], [], [], 0.5)
                if ready:
                    try:
                        chunk = os.read(master, 65536)
                    except OSError:  # the child closed the terminal
                        break
                    if not chunk:
                        break
                    seen += chunk
                elif proc.poll() is not None:
                    break
            out = proc.communicate(timeout=60)[0].decode()
        finally:
            os.close(master)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = seen.decode("utf-8", "replace")
    assert proc.returncode == 0, text[-2000:]
    assert "\x1b[" in text and "crawling" in text  # drawn in place with escapes
    assert "\r" in text or "\x1b[2K" in text
    assert "pages stored" in out  # the summary still goes to stdout


def test_progress_in_a_pipe_is_plain_lines(broker: EmbeddedBroker, tmp_path: Path) -> None:
    spec = WebSpec(hosts=3, pages_per_host=8, seed=12)
    with start_server_process(spec, None, tmp_path / "web") as server:
        run = run_crawl(
            broker, tmp_path / "d", list(server.seeds), partitions=2, resolve=server.resolve
        )
    assert run.returncode == 0, run.stderr[-2000:]
    lines = [line for line in run.stderr.splitlines() if line.startswith("pages ")]
    assert lines and "fetched" in lines[0] and "frontier size" in lines[0]
    assert "\x1b" not in run.stderr
