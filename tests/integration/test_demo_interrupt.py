"""Ctrl-C on `seine demo` is an interrupted crawl, not a finished one: it drains what is
in flight and exits 130, like `seine crawl`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.conftest import REPO


def test_ctrl_c_on_the_demo_drains_and_exits_130(tmp_path: Path) -> None:
    data = tmp_path / "demo"
    web = ["--hosts", "20", "--pages", "40", "--delay", "0.5"]
    demo = subprocess.Popen(
        [sys.executable, "-m", "streams.cli", "demo", *web, "--data-dir", str(data)],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's Ctrl-C reaches
    )
    try:
        deadline = time.monotonic() + 90
        while not any(p.stat().st_size > 0 for p in data.rglob("*.warc.gz")):
            assert demo.poll() is None, demo.communicate()
            assert time.monotonic() < deadline, "the demo stored nothing"
            time.sleep(0.1)  # polling the data dir, bounded by the deadline
        os.killpg(demo.pid, signal.SIGINT)
        stdout, stderr = demo.communicate(timeout=60)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
    assert demo.returncode == 130, stdout[-2000:] + stderr[-2000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert "pages stored" in stdout
