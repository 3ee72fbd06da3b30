"""A catalogue of hostile HTTP endpoints on loopback: the web at its worst, on demand.

Why raw asyncio streams rather than an HTTP framework: most of these endpoints
misbehave *below* HTTP — a status line that never comes, headers that trickle,
a chunk size that is not hex, a reset in the middle of a body, two conflicting
Content-Lengths. A framework would refuse to produce most of them, so every
response here is written byte by byte (like Scrapy's mock server, written here).

Why a subprocess (:func:`start_hostile_process`): the tests measure the client's
time and memory. A server in the same process would share the event loop (a
stuck handler would stall the client under test) and its allocations would show
up in the client's tracemalloc figures.

Two "endpoints" are not paths but ports: ``blackhole_port`` listens with a full
accept queue, so a connect hangs (a connect timeout); ``refused_port`` is bound
but not listening, so a connect is refused at once.

Every endpoint that hangs does so for at most ``max_hang`` seconds and stops as
soon as the client goes away, so a crashed test never leaves work behind.

The catalogue is split by concern: ``bodies`` (sizes and bodies tests compare
against), ``bombs`` (decompression bombs and encoders), ``serving`` (requests, routes,
connections, :class:`HostileServer`) and ``endpoints`` (every endpoint). This module
runs the server (in a subprocess too) and re-exports their public names.

Run standalone::

    python -m tests.hostile.server --host 127.0.0.1 --ready-file ready.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from streams.demo.process import ChildServer, start_child
from tests.hostile.bodies import (
    BOMB_BYTES,
    CHAIN_END,
    CHARSET_LIES_BODY,
    DEEP_NESTING_BODY,
    DEEP_NESTING_DEPTH,
    ENDLESS_LIMIT,
    GARBAGE_BODY,
    JSON_BODY,
    MALFORMED_HTML_BODY,
    MAX_HANG_S,
    META_LIES_BODY,
    NESTED_FORMS_BODY,
    NO_CHARSET_BODY,
    OK_BODY,
    OVERSIZE_BYTES,
    PARTIAL_DECLARED,
    PARTIAL_SENT,
    PNG_BODY,
    PNG_SIZE,
    RETRY_AFTER_429,
    RETRY_AFTER_503,
    ROBOTS_BODY,
    SLOW_FIRST_BYTE_S,
    UTF16_BODY,
    calendar_path,
    png_bytes,
)
from tests.hostile.bombs import brotli_bomb, brotli_compress, zstd_bomb, zstd_compress
from tests.hostile.endpoints import LEAVES_LOOPBACK
from tests.hostile.serving import _ROUTES as _ROUTES
from tests.hostile.serving import HostileServer, Request, catalogue, route

REPO = Path(__file__).resolve().parents[2]

__all__ = [
    "BOMB_BYTES",
    "CHAIN_END",
    "CHARSET_LIES_BODY",
    "DEEP_NESTING_BODY",
    "DEEP_NESTING_DEPTH",
    "ENDLESS_LIMIT",
    "GARBAGE_BODY",
    "JSON_BODY",
    "LEAVES_LOOPBACK",
    "MALFORMED_HTML_BODY",
    "MAX_HANG_S",
    "META_LIES_BODY",
    "NESTED_FORMS_BODY",
    "NO_CHARSET_BODY",
    "OK_BODY",
    "OVERSIZE_BYTES",
    "PARTIAL_DECLARED",
    "PARTIAL_SENT",
    "PNG_BODY",
    "PNG_SIZE",
    "RETRY_AFTER_429",
    "RETRY_AFTER_503",
    "ROBOTS_BODY",
    "SLOW_FIRST_BYTE_S",
    "UTF16_BODY",
    "HostileProcess",
    "HostileServer",
    "Request",
    "brotli_bomb",
    "brotli_compress",
    "calendar_path",
    "catalogue",
    "png_bytes",
    "quoted",
    "route",
    "start_hostile_process",
    "zstd_bomb",
    "zstd_compress",
]


# -- running it ---------------------------------------------------------------------------


def _write_json(path: Path, data: object) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


async def _serve(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    zstd_bomb()  # ~0.5 s of compression: now, not while a client waits on the loop
    async with HostileServer(args.host, args.port, args.max_hang) as server:
        if args.ready_file:
            _write_json(Path(args.ready_file), server.ready_info())
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--max-hang", type=float, default=MAX_HANG_S)
    parser.add_argument("--ready-file")
    parser.add_argument("--list", action="store_true", help="print the catalogue and exit")
    args = parser.parse_args(argv)
    if args.list:
        for path, desc in catalogue().items():
            print(f"{path:28} {desc}")
        return 0
    asyncio.run(_serve(args))
    return 0


@dataclass
class HostileProcess(ChildServer):
    """The server as a subprocess; ``stop()`` (or ``with``) ends it."""

    process: subprocess.Popen[bytes]
    host: str
    port: int
    blackhole_port: int
    refused_port: int
    stderr_path: Path

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.port}{path}"


def start_hostile_process(
    tmpdir: str | os.PathLike[str], host: str = "127.0.0.1", timeout: float = 30.0
) -> HostileProcess:
    """Start ``python -m tests.hostile.server`` and return once its ready file appears."""
    cmd = [sys.executable, "-m", "tests.hostile.server", "--host", host]
    process, info, stderr_path = start_child("hostile", cmd, tmpdir, timeout, cwd=REPO)
    return HostileProcess(
        process,
        host,
        int(info["port"]),
        int(info["blackhole_port"]),
        int(info["refused_port"]),
        stderr_path,
    )


def quoted(url: str) -> str:
    """For /redirect/to?url=…"""
    return quote(url, safe="")


if __name__ == "__main__":
    sys.exit(main())
