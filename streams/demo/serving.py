"""The demo web served in-process: listening sockets, :class:`DemoServer`, the request log.

The sockets are one per host IP, all on one port (:func:`bind_same_port`); the request
log is JSON lines, one per answered request, read back by :func:`read_request_log`.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import socket
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from streams.demo.protocol import Quirks, _HttpProtocol, _Record, _Site
from streams.demo.webgen import DemoWeb

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
