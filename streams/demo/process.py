"""The demo server as a subprocess: :func:`start_server_process` and :class:`ServerProcess`.

What tests and the benchmark use: the child runs ``python -m streams.demo.server`` with
the flags :func:`spec_to_args` makes of a :class:`~streams.demo.webgen.WebSpec`.
:func:`start_child` and :class:`ChildServer` are the start (a ready file written once
the child listens) and the stop every such test server shares, tests/hostile's too.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Self

from streams.demo.webgen import DemoWeb, WebSpec

_REPO_ROOT = Path(__file__).resolve().parents[2]


def spec_to_args(spec: WebSpec) -> list[str]:
    """Command-line flags for `python -m streams.demo.server` reproducing spec."""
    args = [
        f"--hosts={spec.hosts}",
        f"--pages={spec.pages_per_host}",
        f"--page-bytes={spec.page_bytes}",
        f"--links={spec.links_per_page}",
        f"--cross-host-fraction={spec.cross_host_fraction!r}",
        f"--duplicate-fraction={spec.duplicate_fraction!r}",
        f"--disallowed-fraction={spec.disallowed_fraction!r}",
        f"--www-alias-fraction={spec.www_alias_fraction!r}",
        f"--seed={spec.seed}",
        f"--base-ip={spec.base_ip}",
        f"--port={spec.port}",
    ]
    if spec.use_ip_hosts:
        args.append("--use-ip-hosts")
    return args


class ChildServer:
    """A server child process; `stop()` (or ``with``) ends it: SIGTERM, then SIGKILL
    if it overruns."""

    process: subprocess.Popen[bytes]

    def stop(self, timeout: float = 15.0) -> int:
        """Returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                return self.process.wait(timeout)
        return self.process.returncode

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_child(
    name: str,
    cmd: list[str],
    tmpdir: str | os.PathLike[str],
    timeout: float,
    cwd: Path | None = None,
) -> tuple[subprocess.Popen[bytes], dict[str, Any], Path]:
    """Run `cmd` (given ``--ready-file PATH``) with the repo root on PYTHONPATH; return
    the process, the JSON it wrote to the ready file, and its stderr's path. Waits
    with a deadline, and fails fast with the child's stderr if it dies first."""
    tmp = Path(tmpdir)
    tmp.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:8]
    ready = tmp / f"{name}-{tag}.ready.json"
    stderr_path = tmp / f"{name}-{tag}.stderr"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_REPO_ROOT), env.get("PYTHONPATH")]))
    with open(stderr_path, "wb") as err:
        process = subprocess.Popen(
            [*cmd, "--ready-file", str(ready)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
            cwd=cwd,
        )
    deadline = time.monotonic() + timeout
    delay = 0.005
    while not ready.exists():
        if process.poll() is not None:
            raise RuntimeError(
                f"{name} exited with {process.returncode}: "
                + stderr_path.read_text(errors="replace")[-4000:]
            )
        if time.monotonic() > deadline:
            process.kill()
            process.wait(10)
            raise TimeoutError(f"{name} not ready within {timeout}s")
        time.sleep(delay)  # polling the ready condition, bounded by the deadline above
        delay = min(delay * 2, 0.1)
    return process, json.loads(ready.read_text(encoding="utf-8")), stderr_path


@dataclass
class ServerProcess(ChildServer):
    """A demo server running as a subprocess; `stop()` (or ``with``) ends it cleanly."""

    process: subprocess.Popen[bytes]
    spec: WebSpec
    port: int
    resolve: dict[str, str]
    seeds: list[str]
    log_path: Path | None
    stderr_path: Path
    _web: DemoWeb | None = field(default=None, repr=False)

    @property
    def web(self) -> DemoWeb:
        """The served web bound to the server's port (for ground truth comparisons)."""
        if self._web is None:
            self._web = DemoWeb(replace(self.spec, port=self.port))
        return self._web


def start_server_process(
    spec: WebSpec,
    log_path: str | os.PathLike[str] | None,
    tmpdir: str | os.PathLike[str],
    *,
    latency: float = 0.0,
    prerender: bool = False,
    timeout: float = 60.0,
    extra_args: Sequence[str] = (),
) -> ServerProcess:
    """Start `python -m streams.demo.server` and return once its ready file appears.

    Waits with a deadline and fails fast (with the child's stderr) if it dies first.
    """
    cmd = [sys.executable, "-m", "streams.demo.server", *spec_to_args(spec)]
    cmd += ["--latency", repr(latency), *extra_args]
    if log_path is not None:
        cmd += ["--log", str(log_path)]
    if prerender:
        cmd.append("--prerender")
    process, info, stderr_path = start_child("demo-server", cmd, tmpdir, timeout)
    return ServerProcess(
        process=process,
        spec=spec,
        port=int(info["port"]),
        resolve=dict(info["resolve"]),
        seeds=list(info["seeds"]),
        log_path=Path(log_path) if log_path is not None else None,
        stderr_path=stderr_path,
    )
