"""The demo server's HTTP side: cached response bytes, per-host quirks, the protocol.

:class:`_Site` is the state every connection shares (the web, the response cache, the
request records); :class:`_HttpProtocol` is the hand-rolled HTTP/1.1 server side that
answers from it (why hand-rolled: see :mod:`streams.demo.server`).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import cast

from streams.demo.webgen import DemoWeb

_SERVER_NAME = b"seine-demo"
_MAX_HEAD = 64 * 1024


# One log record: host, path, start, end, status, peer, local ip, method.
_Record = tuple[str, str, float, float, int, str, str, str]


def _status_line(status: int) -> bytes:
    reason = {
        200: "OK",
        400: "Bad Request",
        404: "Not Found",
        405: "Method Not Allowed",
        429: "Too Many Requests",
    }
    return f"HTTP/1.1 {status} {reason.get(status, 'Error')}\r\n".encode("ascii")


def _head_bytes(status: int, headers: dict[str, str], length: int) -> bytes:
    """Status line + headers without the final CRLF (Connection may still be appended)."""
    lines = [_status_line(status)]
    lines.extend(f"{k}: {v}\r\n".encode("latin-1") for k, v in headers.items())
    lines.append(f"Content-Length: {length}\r\nServer: seine-demo\r\n".encode("ascii"))
    return b"".join(lines)


_NOT_FOUND_BODY = b"not found\n"
_NOT_FOUND = (404, _head_bytes(404, {"Content-Type": "text/plain"}, 10), _NOT_FOUND_BODY)


@dataclass(frozen=True)
class Quirks:
    """Per-host behaviour a polite crawler must cope with, for the politeness tests.

    * ``throttle``: host → (every, seconds): page request number 0, every, 2·every, … of
      the host is answered 429 with ``Retry-After: seconds`` (the page itself is fine).
    * ``crawl_delay``: host → seconds: its robots.txt also says ``Crawl-delay``.
    * ``latency``: host → seconds added to each of its responses (on top of the server's).

    The ground truth of the web is unchanged: every page is still there to be had.
    """

    throttle: dict[str, tuple[int, float]] = field(default_factory=dict)
    crawl_delay: dict[str, float] = field(default_factory=dict)
    latency: dict[str, float] = field(default_factory=dict)

    def to_args(self) -> list[str]:
        args = [f"--throttle={h}={every}:{secs!r}" for h, (every, secs) in self.throttle.items()]
        args += [f"--crawl-delay={h}={secs!r}" for h, secs in self.crawl_delay.items()]
        args += [f"--host-latency={h}={secs!r}" for h, secs in self.latency.items()]
        return args


class _Site:
    """State shared by all connections: the web, response cache, log buffer, live transports."""

    def __init__(self, web: DemoWeb, latency: float, quirks: Quirks | None = None) -> None:
        self.web = web
        self.latency = latency
        self.quirks = quirks or Quirks()
        self._page_requests: dict[str, int] = {}
        self.records: list[_Record] = []
        self.transports: set[asyncio.Transport] = set()
        self.requests = 0
        # Host header bytes -> served host name (None: unknown, fall back to local address).
        self._host_by_header: dict[bytes, str | None] = {}
        self._host_by_ip: dict[str, str] = {}
        for name in web.hosts:
            self._host_by_ip.setdefault(web.address_of(name), name)
        self._names = set(web.all_host_names())
        self._cache: dict[tuple[str, str], tuple[int, bytes, bytes]] = {}

    def host_for(self, header: bytes | None, local_ip: str) -> str:
        if header is not None:
            name = self._host_by_header.get(header, "")
            if name == "":
                text = header.decode("latin-1").strip().lower()
                if text.startswith("[") or text.count(":") > 1:
                    candidate = text  # IPv6 literal: never one of ours
                else:
                    candidate = text.rsplit(":", 1)[0] if ":" in text else text
                name = candidate if candidate in self._names else None
                if len(self._host_by_header) < 10_000:
                    self._host_by_header[header] = name
            if name is not None:
                return name
        return self._host_by_ip.get(local_ip, local_ip)

    def latency_of(self, host: str) -> float:
        return self.latency + self.quirks.latency.get(host, 0.0)

    def response(self, host: str, target: str) -> tuple[int, bytes, bytes]:
        """(status, head without final CRLF, body), cached for every page that exists."""
        throttle = self.quirks.throttle.get(host)
        if throttle is not None and target != "/robots.txt":
            n = self._page_requests.get(host, 0)
            self._page_requests[host] = n + 1
            every, seconds = throttle
            if n % every == 0:
                body = b"slow down\n"
                headers = {"Content-Type": "text/plain", "Retry-After": f"{seconds:g}"}
                return 429, _head_bytes(429, headers, len(body)), body
        key = (host, target)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        page = self.web.page(host, target)
        if page is None:
            return _NOT_FOUND
        status, headers, body = page
        crawl_delay = self.quirks.crawl_delay.get(host)
        if crawl_delay is not None and target == "/robots.txt":
            body = body + f"Crawl-delay: {crawl_delay:g}\n".encode("ascii")
        result = (status, _head_bytes(status, headers, len(body)), body)
        self._cache[key] = result
        return result


class _HttpProtocol(asyncio.Protocol):
    """Minimal HTTP/1.1 server side: GET/HEAD, keep-alive, pipelining, no request bodies."""

    def __init__(self, site: _Site) -> None:
        self.site = site
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.peer = ""
        self.local_ip = ""
        self.pending = False
        self.closing = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport is not an asyncio.Transport subclass, hence a cast, not a check.
        self.transport = cast(asyncio.Transport, transport)
        self.site.transports.add(self.transport)
        peer = transport.get_extra_info("peername")
        local = transport.get_extra_info("sockname")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else ""
        self.local_ip = local[0] if local else ""
        # No TCP_NODELAY here: asyncio and uvloop both set it on TCP transports already.

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None:
            self.site.transports.discard(self.transport)
        self.closing = True

    def data_received(self, data: bytes) -> None:
        self.buf = self.buf + data if self.buf else data
        if not self.pending:
            self._process()

    def _process(self) -> None:
        buf = self.buf
        pos = 0
        while not self.pending and not self.closing:
            end = buf.find(b"\r\n\r\n", pos)
            if end < 0:
                break
            consumed = self._handle(buf[pos:end], buf, end + 4)
            if consumed < 0:  # request body not fully received yet
                break
            pos = consumed
        self.buf = buf[pos:]
        if len(self.buf) > _MAX_HEAD and not self.closing:
            self._send_error(400)

    def _handle(self, head: bytes, buf: bytes, body_start: int) -> int:
        """Answer (or schedule) one request; returns where the next one starts, -1 if partial."""
        start = time.time()
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ")
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
            self._send_error(400)
            return body_start
        method, raw_target, version = parts
        host_header: bytes | None = None
        connection = b""
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"host":
                host_header = value.strip()
            elif name == b"connection":
                connection = value.strip().lower()
            elif name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    self._send_error(400)
                    return body_start
            elif name == b"transfer-encoding":
                self._send_error(400)  # chunked request bodies: never sent by a crawler
                return body_start
        if length:
            if len(buf) < body_start + length:
                return -1
            body_start += length
        target = raw_target.decode("latin-1")
        if target.startswith(("http://", "https://")):  # absolute-form request target
            scheme_end = target.index("//") + 2
            slash = target.find("/", scheme_end)
            host_header = target[scheme_end : slash if slash >= 0 else None].encode("latin-1")
            target = target[slash:] if slash >= 0 else "/"
        if version == b"HTTP/1.0":
            keep_alive = connection == b"keep-alive"
        else:
            keep_alive = b"close" not in connection
        site = self.site
        host = site.host_for(host_header, self.local_ip)
        if method == b"GET" or method == b"HEAD":
            status, head_bytes, body = site.response(host, target)
            if method == b"HEAD":
                body = b""
        else:
            status, head_bytes, body = 405, _head_bytes(405, {"Allow": "GET, HEAD"}, 0), b""
        m = method.decode("latin-1")
        latency = site.latency_of(host)
        if latency > 0:
            self.pending = True
            asyncio.get_running_loop().call_later(
                latency,
                self._finish,
                host,
                target,
                start,
                status,
                head_bytes,
                body,
                keep_alive,
                version,
                m,
            )
        else:
            self._finish(host, target, start, status, head_bytes, body, keep_alive, version, m)
        return body_start

    def _finish(
        self,
        host: str,
        target: str,
        start: float,
        status: int,
        head: bytes,
        body: bytes,
        keep_alive: bool,
        version: bytes,
        method: str,
    ) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            self.closing = True
            return
        if not keep_alive:
            tail = b"Connection: close\r\n\r\n"
        elif version == b"HTTP/1.0":
            tail = b"Connection: keep-alive\r\n\r\n"
        else:
            tail = b"\r\n"
        # The end is stamped before the write, not after: on a loaded machine this
        # process was preempted between the two while the client read the whole
        # response, and the log had the host's next request 6 ms "too soon".
        end = time.time()
        transport.write(head + tail + body)
        site = self.site
        site.requests += 1
        site.records.append((host, target, start, end, status, self.peer, self.local_ip, method))
        if not keep_alive:
            self.closing = True
            transport.close()
        elif self.pending:
            self.pending = False
            if self.buf:
                self._process()

    def _send_error(self, status: int) -> None:
        if self.transport is not None:
            body = f"{status}\n".encode("ascii")
            head = _head_bytes(status, {"Content-Type": "text/plain"}, len(body))
            self.transport.write(head + b"Connection: close\r\n\r\n" + body)
            self.transport.close()
        self.closing = True
