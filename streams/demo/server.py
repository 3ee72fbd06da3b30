"""Serve a :class:`~streams.demo.webgen.DemoWeb` on loopback, recording every request.

Why a hand-rolled asyncio protocol rather than an aiohttp app: the throughput benchmark
needs this server to answer >2,000 pages/s on a 2-core box while the crawler under test
competes for the same cores, so the server must not be the bottleneck. A minimal
HTTP/1.1 parser over pre-rendered, cached response bytes (keep-alive, pipelining) costs a
small fraction of what a framework request cycle costs.

Why one listening socket per host IP: every demo host has its own loopback address
(127.0.1.1, 127.0.1.2, ...), all on the same port, so per-IP politeness and DNS-override
(``--resolve``) code paths in the crawler are exercised as on the real web. The page is
chosen by the Host header, falling back to the local address the request arrived on.

Why a request log: the integration tests judge the crawler by what the *server* saw —
no URL fetched twice, nothing robots.txt forbids fetched, never two requests in flight to
one host. Each request appends one tuple in memory; JSON lines are written periodically
and at shutdown, so logging stays off the hot path. ``latency`` delays every response,
which turns "two requests in flight to one host" into overlapping [start, end] intervals
that the log can reveal.

Run as a subprocess (what tests and the benchmark do)::

    python -m streams.demo.server --hosts 50 --pages 40 --seed 1 \\
        --log requests.jsonl --ready-file ready.json

It writes ``{"port", "resolve", "seeds"}`` to the ready file once listening and exits
cleanly (log flushed) on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import IO, Any, cast

from streams.demo.webgen import DemoWeb, WebSpec

__all__ = [
    "DemoServer",
    "Quirks",
    "ServerProcess",
    "read_request_log",
    "spec_to_args",
    "start_server_process",
]

_SERVER_NAME = b"seine-demo"
_MAX_HEAD = 64 * 1024
_REPO_ROOT = Path(__file__).resolve().parents[2]

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


def _host_values(items: Sequence[str], flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        host, sep, value = item.partition("=")
        if not sep or not host or not value:
            raise ValueError(f"{flag} expects HOST=VALUE, got {item!r}")
        out[host.strip().lower()] = value.strip()
    return out


def _quirks_from_args(args: argparse.Namespace) -> Quirks:
    throttle = {}
    for host, value in _host_values(args.throttle, "--throttle").items():
        every, _, secs = value.partition(":")
        throttle[host] = (max(1, int(every)), float(secs or 1))
    return Quirks(
        throttle=throttle,
        crawl_delay={
            h: float(v) for h, v in _host_values(args.crawl_delay, "--crawl-delay").items()
        },
        latency={h: float(v) for h, v in _host_values(args.host_latency, "--host-latency").items()},
    )


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
        transport.write(head + tail + body)
        site = self.site
        site.requests += 1
        site.records.append(
            (host, target, start, time.time(), status, self.peer, self.local_ip, method)
        )
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


_json_str = json.encoder.encode_basestring_ascii  # C-accelerated str -> JSON literal


def _record_json(record: _Record) -> str:
    """One log line; hand-formatted because json.dumps(dict) costs ~5x more per record."""
    host, path, start, end, status, peer, ip, method = record
    return (
        f'{{"host": {_json_str(host)}, "path": {_json_str(path)}, "start": {start!r}, '
        f'"end": {end!r}, "status": {status}, "peer": {_json_str(peer)}, '
        f'"ip": {_json_str(ip)}, "method": {_json_str(method)}}}'
    )


def _bind(ip: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        # Lets a restarted server reuse a port whose old connections sit in TIME_WAIT;
        # on Linux it does NOT allow two listeners on one ip:port, so conflicts still show.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((ip, port))
        sock.listen(1024)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def bind_same_port(ips: Sequence[str], port: int = 0, attempts: int = 50) -> list[socket.socket]:
    """Listening sockets on every ip, all on one port (port 0: pick one free on all of them).

    The port is chosen by the kernel on the first IP and then claimed on the others; if
    another process holds it on one of them, everything is released and retried.
    """
    last: OSError | None = None
    for _ in range(attempts if port == 0 else 1):
        socks: list[socket.socket] = []
        try:
            socks.append(_bind(ips[0], port))
            chosen = socks[0].getsockname()[1]
            for ip in ips[1:]:
                socks.append(_bind(ip, chosen))
            return socks
        except OSError as exc:
            for sock in socks:
                sock.close()
            if exc.errno != errno.EADDRINUSE:
                raise
            last = exc
    raise OSError(errno.EADDRINUSE, f"no port free on all {len(ips)} demo IPs: {last}")


class DemoServer:
    """The demo web served in-process: ``async with DemoServer(web, log_path=p) as srv``.

    ``srv.port`` is the port shared by all host IPs, ``srv.web`` the web bound to that port
    (its links and ground truth carry it), ``srv.resolve_map()`` the --resolve overrides.
    """

    def __init__(
        self,
        web: DemoWeb,
        *,
        log_path: str | os.PathLike[str] | None = None,
        port: int | None = None,
        latency: float = 0.0,
        flush_interval: float = 1.0,
        prerender: bool = False,
        quirks: Quirks | None = None,
    ) -> None:
        self.quirks = quirks
        self.prerender = prerender
        self._requested_port = web.port if port is None else port
        self.web = web
        self.port = 0
        self.log_path = Path(log_path) if log_path is not None else None
        self.latency = latency
        self.flush_interval = flush_interval
        self._site: _Site | None = None
        self._servers: list[asyncio.AbstractServer] = []
        self._log_file: IO[str] | None = None
        self._flusher: asyncio.Task[None] | None = None

    @property
    def requests(self) -> int:
        """Requests answered so far (all statuses)."""
        return self._site.requests if self._site else 0

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        ips = list(dict.fromkeys(self.web.address_of(h) for h in self.web.hosts))
        socks = bind_same_port(ips, self._requested_port)
        self.port = socks[0].getsockname()[1]
        self.web = self.web.with_port(self.port)
        site = self._site = _Site(self.web, self.latency, self.quirks)
        if self.prerender:
            # Render every response before accepting connections, so a benchmark measures
            # serving, not page generation (~2-3 s for 200 hosts x 100 pages on 2 slow cores).
            for host, target in self.web.served_targets():
                site.response(host, target)
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log_file = open(self.log_path, "w", encoding="utf-8", buffering=1 << 16)  # noqa: SIM115
        try:
            for sock in socks:
                server = await loop.create_server(lambda: _HttpProtocol(site), sock=sock)
                self._servers.append(server)
        except BaseException:
            for sock in socks:
                sock.close()
            await self.stop()
            raise
        if self._log_file is not None:
            self._flusher = asyncio.create_task(self._flush_periodically())

    async def _flush_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.flush_interval)
            self.flush_log()

    def flush_log(self) -> None:
        """Write buffered request records as JSON lines (called periodically and at stop)."""
        if self._site is None or self._log_file is None:
            return
        records, self._site.records = self._site.records, []
        if records:
            self._log_file.write("\n".join(map(_record_json, records)) + "\n")
        self._log_file.flush()

    async def stop(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
            self._flusher = None
        for server in self._servers:
            server.close()
        if self._site is not None:
            for transport in list(self._site.transports):
                transport.close()
        for server in self._servers:
            await server.wait_closed()
        self._servers = []
        self.flush_log()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    async def __aenter__(self) -> DemoServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def resolve_map(self) -> dict[str, str]:
        return self.web.resolve_map(self.port)

    def seeds(self) -> list[str]:
        return self.web.seeds()

    def ready_info(self) -> dict[str, Any]:
        return {"port": self.port, "resolve": self.resolve_map(), "seeds": self.seeds()}


def read_request_log(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The request log as dicts (keys: host, path, start, end, status, peer, ip, method).

    A torn final line (server killed mid-write) is ignored rather than failing the reader.
    """
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    records: list[dict[str, Any]] = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if i != len(lines) - 1:
                raise
    return records


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


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    d = WebSpec()
    p = argparse.ArgumentParser(prog="python -m streams.demo.server", description=__doc__)
    p.add_argument("--hosts", type=int, default=d.hosts)
    p.add_argument("--pages", type=int, default=d.pages_per_host, help="pages per host")
    p.add_argument("--page-bytes", type=int, default=d.page_bytes)
    p.add_argument("--links", type=int, default=d.links_per_page, help="links per page")
    p.add_argument("--cross-host-fraction", type=float, default=d.cross_host_fraction)
    p.add_argument("--duplicate-fraction", type=float, default=d.duplicate_fraction)
    p.add_argument("--disallowed-fraction", type=float, default=d.disallowed_fraction)
    p.add_argument("--www-alias-fraction", type=float, default=d.www_alias_fraction)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--base-ip", default=d.base_ip)
    p.add_argument("--port", type=int, default=d.port, help="0 = pick a free port")
    p.add_argument("--use-ip-hosts", action="store_true")
    p.add_argument("--latency", type=float, default=0.0, help="seconds added to each response")
    p.add_argument("--log", type=Path, default=None, help="request log (JSON lines)")
    p.add_argument("--ready-file", type=Path, default=None)
    p.add_argument("--flush-interval", type=float, default=1.0)
    p.add_argument("--no-uvloop", action="store_true", help="use the stdlib event loop")
    p.add_argument(
        "--throttle",
        action="append",
        default=[],
        metavar="HOST=EVERY:SECONDS",
        help="answer every EVERY-th page request of HOST (from the first) 429 + Retry-After",
    )
    p.add_argument(
        "--crawl-delay",
        dest="crawl_delay",
        action="append",
        default=[],
        metavar="HOST=SECONDS",
        help="add a Crawl-delay to HOST's robots.txt",
    )
    p.add_argument(
        "--host-latency",
        dest="host_latency",
        action="append",
        default=[],
        metavar="HOST=SECONDS",
        help="extra seconds before each response of HOST",
    )
    p.add_argument(
        "--prerender", action="store_true", help="render every page before becoming ready"
    )
    return p.parse_args(argv)


def _spec_from_args(args: argparse.Namespace) -> WebSpec:
    return WebSpec(
        hosts=args.hosts,
        pages_per_host=args.pages,
        page_bytes=args.page_bytes,
        links_per_page=args.links,
        cross_host_fraction=args.cross_host_fraction,
        duplicate_fraction=args.duplicate_fraction,
        disallowed_fraction=args.disallowed_fraction,
        www_alias_fraction=args.www_alias_fraction,
        seed=args.seed,
        base_ip=args.base_ip,
        port=args.port,
        use_ip_hosts=args.use_ip_hosts,
    )


def write_json_atomically(path: Path, data: Any) -> None:
    """Readers polling for the file never see it half-written."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


async def _serve(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    web = DemoWeb(_spec_from_args(args))
    server = DemoServer(
        web,
        log_path=args.log,
        latency=args.latency,
        flush_interval=args.flush_interval,
        prerender=args.prerender,
        quirks=_quirks_from_args(args),
    )
    async with server:
        if args.ready_file is not None:
            write_json_atomically(args.ready_file, server.ready_info())
        await stop.wait()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    if not args.no_uvloop:
        try:
            import uvloop
        except ImportError:
            pass
        else:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                runner.run(_serve(args))
            return 0
    asyncio.run(_serve(args))
    return 0


@dataclass
class ServerProcess:
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

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM, wait for the flushed exit; SIGKILL if it overruns. Returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                return self.process.wait(timeout)
        return self.process.returncode

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


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
    tmp = Path(tmpdir)
    tmp.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:8]
    ready = tmp / f"demo-server-{tag}.ready.json"
    stderr_path = tmp / f"demo-server-{tag}.stderr"
    cmd = [sys.executable, "-m", "streams.demo.server", *spec_to_args(spec)]
    cmd += ["--ready-file", str(ready), "--latency", repr(latency), *extra_args]
    if log_path is not None:
        cmd += ["--log", str(log_path)]
    if prerender:
        cmd.append("--prerender")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_REPO_ROOT), env.get("PYTHONPATH")]))
    with open(stderr_path, "wb") as err:
        process = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env
        )
    deadline = time.monotonic() + timeout
    delay = 0.005
    while not ready.exists():
        if process.poll() is not None:
            raise RuntimeError(
                f"demo server exited with {process.returncode}: "
                + stderr_path.read_text(errors="replace")[-4000:]
            )
        if time.monotonic() > deadline:
            process.kill()
            process.wait(10)
            raise TimeoutError(f"demo server not ready within {timeout}s")
        time.sleep(delay)  # polling the ready condition, bounded by the deadline above
        delay = min(delay * 2, 0.1)
    info = json.loads(ready.read_text(encoding="utf-8"))
    return ServerProcess(
        process=process,
        spec=spec,
        port=int(info["port"]),
        resolve=dict(info["resolve"]),
        seeds=list(info["seeds"]),
        log_path=Path(log_path) if log_path is not None else None,
        stderr_path=stderr_path,
    )


if __name__ == "__main__":
    sys.exit(main())
