"""What the tests of the Fetcher against the hostile catalogue share (test_fetch_hostile*.py):
the timeouts, the cap, a fresh event loop per fetch, the connection spy, the configuration
that sends every case name to the hostile server."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest

from streams.core import decode
from streams.fetch.config import FetchConfig
from tests.hostile import server as hs
from tests.hostile.server import HostileProcess

T = TypeVar("T")

CAP = 256 * 1024
#: Scheduling slack on a loaded 2-core machine, on top of a timeout.
SLACK = 0.5
UA = "SeineTest/1.0 (+hostile)"
TIMEOUTS: dict[str, Any] = {
    "connect_timeout": 0.5,
    "read_timeout": 0.5,
    "first_byte_timeout": 1.0,
    "total_timeout": 2.0,
}
#: For cases that test content, not time: loose enough never to fire under load.
RELAXED: dict[str, Any] = {
    "connect_timeout": 5.0,
    "read_timeout": 5.0,
    "first_byte_timeout": 8.0,
    "total_timeout": 10.0,
}


def run(factory: Callable[[], Awaitable[T]]) -> T:
    """A fresh stdlib event loop per call (the spy patches what it uses to connect)."""

    async def main() -> T:
        return await factory()

    with asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as runner:
        return runner.run(main())


@contextlib.contextmanager
def connection_spy() -> Iterator[list[tuple[str, int]]]:
    """Record every TCP connect; refuse any that would leave loopback (a safety net)."""
    seen: list[tuple[str, int]] = []
    original = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> None:
        if isinstance(address, tuple):
            host = str(address[0])
            seen.append((host, int(address[1])))
            if not ipaddress.ip_address(host.split("%", 1)[0]).is_loopback:
                raise ConnectionRefusedError(f"test safety net: {host} is not loopback")
        return original(self, address)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket.socket, "connect", connect)
        yield seen


def make_config(hp: HostileProcess, names: list[str], **changes: Any) -> FetchConfig:
    """Every case name resolves (by override) to the hostile server."""
    base = FetchConfig(
        user_agent=UA,
        max_body_bytes=CAP,
        allow_private=True,
        dns_backend="system",  # never asked: every name has an override
        resolve={name: f"{hp.host}:{hp.port}" for name in names},
        **RELAXED,
    )
    return dataclasses.replace(base, **changes)


def host_of(case: str) -> str:
    return re.sub(r"[^a-z0-9-]", "-", case.lower()).strip("-") + ".hostile.test"


def _has_br() -> bool:
    return decode._BROTLI is not None


def _zstd() -> bool:
    return decode._ZSTD is not None and hs.zstd_bomb() is not None
