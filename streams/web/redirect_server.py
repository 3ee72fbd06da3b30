"""A dedicated listener for short-link redirects: ``GET /s/{code}`` and nothing else.

Why a second listener when the worker has a web server: a redirect is the one
request of Seine that comes in thousands per second, and through Faust's aiohttp
server it costs ~200 µs of the worker's core (aiohttp's request and response
objects, the router, Faust's view dispatch and sensors, CORS signals) for what is a
dictionary lookup and a 60-byte answer. Measured on one core of the shared test
machine (BENCHMARKS.md, short links), even a bare aiohttp app answering from a dict
needs ~100 µs a request; this listener — an ``asyncio.Protocol`` parsing with
``httptools`` (the C parser uvicorn uses) and writing pre-built bytes — needs a
fraction of that. It runs in the redirect process beside the worker
(``streams.web.redirect_process``: its resolver answers the worker's own codes, its
forwarder asks the worker's aiohttp route for everything else), so it gives the
same status codes as that route; the route stays for clients of the main port.

Bounded by construction: at most ``max_connections`` connections; a request's line
and headers at most ``max_head_bytes`` (else 431 and close); a connection that has not
completed a request for ``idle_timeout`` seconds is closed (slow or idle clients
cannot hold connections); pipelined requests are answered in order, and reading
pauses while ``max_pipelined`` answers are pending or the client does not read.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Awaitable, Callable
from email.utils import formatdate
from typing import cast
from urllib.parse import quote

import httptools

#: (301/302, Location) or (404/410, reason) or (FORWARD, ""): see ShortLinks.redirect_answer.
Answer = tuple[int, str]
#: Answers a code now (sync, the common case) or says it must be forwarded.
Resolve = Callable[[str], Answer]
#: (code, method, client address) → the owner's answer: (status, headers, body).
Forward = Callable[[str, str, str], Awaitable[tuple[int, dict[str, str], bytes]]]

FORWARD = -1
REASONS = {
    301: b"Moved Permanently",
    302: b"Found",
    400: b"Bad Request",
    404: b"Not Found",
    405: b"Method Not Allowed",
    410: b"Gone",
    431: b"Request Header Fields Too Large",
    503: b"Service Unavailable",
}


def location_bytes(url: str) -> bytes:
    """A canonical URL as a header value: ASCII already (ada percent-encodes and
    punycodes); anything else is percent-encoded rather than sent raw, and CR/LF can
    never reach the header block."""
    try:
        raw = url.encode("ascii")
    except UnicodeEncodeError:
        raw = quote(url, safe="!#$%&'()*+,/:;=?@[]~").encode("ascii")
    if b"\r" in raw or b"\n" in raw:
        raw = raw.replace(b"\r", b"%0D").replace(b"\n", b"%0A")
    return raw


class RedirectServer:
    """The listener's state: resolver, forwarder, limits, open connections, Date header."""

    def __init__(
        self,
        resolve: Resolve,
        forward: Forward,
        *,
        max_connections: int = 10_000,
        max_head_bytes: int = 16 * 1024,
        idle_timeout: float = 30.0,
        max_pipelined: int = 64,
    ) -> None:
        self.resolve = resolve
        self.forward = forward
        self.max_connections = max_connections
        self.max_head_bytes = max_head_bytes
        self.idle_timeout = idle_timeout
        self.max_pipelined = max_pipelined
        self.connections: set[RedirectProtocol] = set()
        self.requests = 0
        self._date_second = 0
        self._date = b""
        self._server: asyncio.AbstractServer | None = None
        self._reaper: asyncio.TimerHandle | None = None

    async def start(self, host: str, port: int) -> int:
        """Listen on host:port (port 0: any free port); return the port."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: RedirectProtocol(self), host, port)
        self._reaper = loop.call_later(self._reap_interval(), self._reap)
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.close()
        if self._server is not None:
            await self._server.wait_closed()

    def _reap_interval(self) -> float:
        return max(0.05, min(5.0, self.idle_timeout / 4))

    def _reap(self) -> None:
        """Close connections that completed no request for idle_timeout seconds."""
        cutoff = time.monotonic() - self.idle_timeout
        for connection in [c for c in self.connections if c.last_active < cutoff]:
            connection.close()
        self._reaper = asyncio.get_running_loop().call_later(self._reap_interval(), self._reap)

    def date_header(self) -> bytes:
        """RFC 9110 wants a Date on 3xx/4xx answers; formatted once a second."""
        now = int(time.time())
        if now != self._date_second:
            self._date_second = now
            self._date = b"Date: " + formatdate(now, usegmt=True).encode() + b"\r\n"
        return self._date

    def render(
        self,
        status: int,
        headers: dict[str, str] | None = None,
        body: bytes = b"",
        *,
        location: bytes | None = None,
        keep_alive: bool = True,
        http10: bool = False,
        head: bool = False,
    ) -> bytes:
        status_line = b"HTTP/1.1 %d %s\r\n" % (status, REASONS.get(status, b"Status"))
        parts = [status_line, self.date_header()]
        if location is not None:
            parts.append(b"Location: " + location + b"\r\n")
        for name, value in (headers or {}).items():
            parts.append(f"{name}: {value}\r\n".encode("latin-1", "replace"))
        if not keep_alive:
            parts.append(b"Connection: close\r\n")
        elif http10:
            parts.append(b"Connection: keep-alive\r\n")
        parts.append(b"Content-Length: %d\r\n\r\n" % len(body))
        if not head:
            parts.append(body)
        return b"".join(parts)

    def error(
        self,
        status: int,
        reason: str,
        *,
        keep_alive: bool = True,
        http10: bool = False,
        head: bool = False,
    ) -> bytes:
        body = json.dumps({"error": reason}).encode()
        return self.render(
            status,
            {"Content-Type": "application/json"},
            body,
            keep_alive=keep_alive,
            http10=http10,
            head=head,
        )


class RedirectProtocol(asyncio.Protocol):
    """One client connection: parse, answer in order, keep alive."""

    def __init__(self, server: RedirectServer) -> None:
        self.server = server
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.head_bytes = 0
        self.too_large = False
        self.pending: deque[bytes | asyncio.Future[bytes]] = deque()
        self.closing = False
        self.reading_paused = False
        self.writing_paused = False
        self.last_active = time.monotonic()
        self.remote = ""

    # -- asyncio.Protocol --------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have its methods.
        transport = cast(asyncio.Transport, transport)
        self.transport = transport
        if len(self.server.connections) >= self.server.max_connections:
            transport.close()
            self.closing = True
            return
        self.server.connections.add(self)
        peer = transport.get_extra_info("peername")
        self.remote = str(peer[0]) if peer else ""

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self.closing = True
        for item in self.pending:
            if isinstance(item, asyncio.Future):
                item.cancel()
        self.pending.clear()

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(400, "protocol upgrades are not supported here")
        except httptools.HttpParserError as exc:
            if self.too_large:
                self._fail(431, f"request head larger than {self.server.max_head_bytes} bytes")
            else:
                self._fail(400, f"malformed HTTP request: {exc}")

    def pause_writing(self) -> None:
        self.writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._update_reading()

    # -- httptools callbacks -------------------------------------------------------

    def on_message_begin(self) -> None:
        self.url = b""
        self.head_bytes = 0

    def on_url(self, url: bytes) -> None:
        self.url += url
        self._count(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)

    def on_message_complete(self) -> None:
        if self.closing:
            return
        self.last_active = time.monotonic()
        self.server.requests += 1
        parser = self.parser
        keep_alive = bool(parser.should_keep_alive())
        http10 = parser.get_http_version() == "1.0"
        self._respond(parser.get_method(), keep_alive, http10)
        if not keep_alive:
            self.closing = True
            self._drain()

    # -- answering ---------------------------------------------------------------------

    def _count(self, n: int) -> None:
        self.head_bytes += n
        if self.head_bytes > self.server.max_head_bytes:
            self.too_large = True
            raise ValueError("request head too large")  # httptools → HttpParserCallbackError

    def _respond(self, method: bytes, keep_alive: bool, http10: bool) -> None:
        server = self.server
        head = method == b"HEAD"
        if method != b"GET" and not head:
            self._push(
                server.error(
                    405, "only GET and HEAD are served here", keep_alive=keep_alive, http10=http10
                )
            )
            return
        path = self.url.split(b"?", 1)[0].split(b"#", 1)[0]
        if not path.startswith(b"/s/"):
            reason = "not found: short links are at /s/{code}"
            self._push(server.error(404, reason, keep_alive=keep_alive, http10=http10, head=head))
            return
        code = path[3:].decode("latin-1")
        status, text = server.resolve(code)
        if status in (301, 302):
            self._push(
                server.render(
                    status,
                    location=location_bytes(text),
                    keep_alive=keep_alive,
                    http10=http10,
                    head=head,
                )
            )
        elif status == FORWARD:
            future = asyncio.ensure_future(self._forwarded(code, method, keep_alive, http10))
            future.add_done_callback(lambda _: self._drain())
            self._push(future)
        else:
            self._push(server.error(status, text, keep_alive=keep_alive, http10=http10, head=head))

    async def _forwarded(self, code: str, method: bytes, keep_alive: bool, http10: bool) -> bytes:
        status, headers, body = await self.server.forward(code, method.decode(), self.remote)
        return self.server.render(
            status, headers, body, keep_alive=keep_alive, http10=http10, head=method == b"HEAD"
        )

    def _push(self, item: bytes | asyncio.Future[bytes]) -> None:
        if not self.pending and isinstance(item, bytes):
            assert self.transport is not None
            self.transport.write(item)
            return
        self.pending.append(item)
        self._drain()

    def _drain(self) -> None:
        """Write the answers that are ready, in request order."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        while self.pending:
            item = self.pending[0]
            if isinstance(item, asyncio.Future):
                if not item.done():
                    break
                if item.cancelled() or item.exception() is not None:
                    data = self.server.error(503, "owner unreachable; retry", keep_alive=False)
                    self.closing = True
                else:
                    data = item.result()
            else:
                data = item
            self.pending.popleft()
            transport.write(data)
        if self.closing and not self.pending:
            transport.close()
        self._update_reading()

    def _update_reading(self) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        pause = self.writing_paused or len(self.pending) >= self.server.max_pipelined
        if pause and not self.reading_paused:
            transport.pause_reading()
            self.reading_paused = True
        elif not pause and self.reading_paused:
            transport.resume_reading()
            self.reading_paused = False

    def _fail(self, status: int, reason: str) -> None:
        """Answer a request we cannot parse, after the answers owed, and close."""
        self.pending.append(self.server.error(status, reason, keep_alive=False))
        self.closing = True
        self._drain()

    def close(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.close()
