"""The hostile server's machinery: requests, the route table, connections, the server.

Endpoints register themselves with :func:`route` (they live in
:mod:`tests.hostile.endpoints`, which must be imported for the table to be filled;
:mod:`tests.hostile.server` does). :class:`HostileServer` reads one request per
connection and hands it to its handler on a :class:`_Conn` that writes raw bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from tests.hostile.bodies import MAX_HANG_S, _page

# -- the server ---------------------------------------------------------------------------


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]

    def arg(self, name: str, default: str = "") -> str:
        return self.query.get(name, [default])[0]


Handler = Callable[["_Conn", Request], Awaitable[None]]
_ROUTES: dict[str, tuple[Handler, str]] = {}
_PREFIX_ROUTES: list[tuple[str, Handler, str]] = []


def route(path: str, description: str) -> Callable[[Handler], Handler]:
    """Register an endpoint; a path ending in '/' (other than '/') matches every path under it."""

    def register(handler: Handler) -> Handler:
        if path.endswith("/") and path != "/":
            _PREFIX_ROUTES.append((path, handler, description))
        else:
            _ROUTES[path] = (handler, description)
        return handler

    return register


def catalogue() -> dict[str, str]:
    """Every endpoint with what it does (the index page lists the same)."""
    out = {path: desc for path, (_, desc) in _ROUTES.items()}
    out.update({prefix + "…": desc for prefix, _, desc in _PREFIX_ROUTES})
    return out


class _Conn:
    """One accepted connection: raw writes, bounded hangs, resets."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: HostileServer
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.server = server

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def respond(
        self,
        status: int,
        body: bytes = b"",
        *,
        content_type: str | None = "text/html; charset=utf-8",
        headers: list[tuple[str, str]] | None = None,
        reason: str = "",
    ) -> None:
        lines = [f"HTTP/1.1 {status} {reason or _REASONS.get(status, 'Whatever')}"]
        if content_type is not None:
            lines.append(f"Content-Type: {content_type}")
        lines += [f"{k}: {v}" for k, v in headers or []]
        lines += [f"Content-Length: {len(body)}", "Connection: close"]
        await self.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)

    async def stream(self, pieces: Iterator[bytes], *, pace: float = 0.0) -> None:
        """Write pieces until done, the client leaves, or MAX_HANG_S passes."""
        deadline = time.monotonic() + self.server.max_hang
        for piece in pieces:
            if time.monotonic() > deadline:
                return
            await self.write(piece)
            if pace:
                await asyncio.sleep(pace)

    async def hang(self, seconds: float | None = None) -> None:
        """Say nothing until the client closes (or the hang's bound passes)."""
        limit = self.server.max_hang if seconds is None else min(seconds, self.server.max_hang)
        with contextlib.suppress(TimeoutError, ConnectionError):
            await asyncio.wait_for(self.reader.read(), limit)

    def reset(self) -> None:
        """Close with a TCP RST instead of a FIN (SO_LINGER 0, then abort)."""
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()


_REASONS = {
    200: "OK",
    301: "Moved Permanently",
    302: "Found",
    404: "Not Found",
    410: "Gone",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class HostileServer:
    """The catalogue served on one loopback address: ``async with HostileServer() as s``."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, max_hang: float = MAX_HANG_S):
        self.host = host
        self.port = port
        self.max_hang = max_hang
        self.requests = 0
        self._server: asyncio.Server | None = None
        self._blackhole: socket.socket | None = None
        self._blackhole_filler: socket.socket | None = None
        self._refused: socket.socket | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def blackhole_port(self) -> int:
        assert self._blackhole is not None
        return int(self._blackhole.getsockname()[1])

    @property
    def refused_port(self) -> int:
        assert self._refused is not None
        return int(self._refused.getsockname()[1])

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.port}{path}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._on_client, self.host, self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])
        # Black hole: a backlog of 0 holds one pending connection; once a filler takes
        # it, the kernel drops further SYNs and a client's connect hangs.
        hole = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        hole.bind((self.host, 0))
        hole.listen(0)
        filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        filler.settimeout(2.0)
        filler.connect(hole.getsockname())
        self._blackhole, self._blackhole_filler = hole, filler
        # Refused: bound (so no one else takes the port) but never listening.
        refused = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        refused.bind((self.host, 0))
        self._refused = refused

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5)
        for sock in (self._blackhole_filler, self._blackhole, self._refused):
            if sock is not None:
                sock.close()

    async def __aenter__(self) -> HostileServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def ready_info(self) -> dict[str, object]:
        return {
            "host": self.host,
            "port": self.port,
            "blackhole_port": self.blackhole_port,
            "refused_port": self.refused_port,
        }

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = _Conn(reader, writer, self)
        try:
            request = await self._read_request(reader)
            if request is None:
                return
            self.requests += 1
            handler = self._handler_for(request.path)
            await handler(conn, request)
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError, OSError):
            pass  # the client left: that is what clients of this server do
        finally:
            self._tasks.discard(task)
            if not writer.transport.is_closing():
                writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    async def _read_request(self, reader: asyncio.StreamReader) -> Request | None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10.0)
        except (asyncio.LimitOverrunError, asyncio.IncompleteReadError, TimeoutError):
            return None
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) < 2:
            return None
        headers = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        target = urlsplit(parts[1])
        query = parse_qs(target.query, keep_blank_values=True)
        return Request(parts[0], target.path or "/", query, headers)

    @staticmethod
    def _handler_for(path: str) -> Handler:
        if path in _ROUTES:
            return _ROUTES[path][0]
        for prefix, handler, _ in _PREFIX_ROUTES:
            if path.startswith(prefix):
                return handler
        return _not_found


async def _not_found(conn: _Conn, req: Request) -> None:
    await conn.respond(404, _page("Not found", req.path))
