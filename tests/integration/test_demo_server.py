"""The demo web server over real loopback sockets: subprocess, in-process, and nginx.

Every network wait is bounded (client timeouts, asyncio.wait_for, process deadlines);
readiness is signalled by the ready file / accepting sockets, never by a sleep.
"""

from __future__ import annotations

import asyncio
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from streams.demo.nginx import nginx_binary, start_nginx
from streams.demo.server import (
    DemoServer,
    ServerProcess,
    read_request_log,
    start_server_process,
)
from streams.demo.webgen import DemoWeb, WebSpec

SPEC = WebSpec(hosts=4, pages_per_host=12, seed=5, www_alias_fraction=0.5)
TIMEOUT = aiohttp.ClientTimeout(total=10)
KEEP_ALIVE_TARGETS = [
    "/page-1.html",
    "/page-2.html",
    "/docs/page-3.html",
    "/page-4.html",
    "/blog/2024/page-5.html",
]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    handle = start_server_process(SPEC, tmp_path / "requests.jsonl", tmp_path, timeout=60)
    try:
        yield handle
    finally:
        handle.stop()


async def _get(
    resolve: dict[str, str], host: str, target: str, method: str = "GET"
) -> tuple[int, dict[str, str], bytes]:
    """Connect to the host's ip:port from the resolve map, naming the host in Host."""
    async with (
        aiohttp.ClientSession(timeout=TIMEOUT) as session,
        session.request(
            method, f"http://{resolve[host]}{target}", headers={"Host": host}
        ) as response,
    ):
        return response.status, dict(response.headers), await response.read()


def _run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_ready_file_describes_the_server(server: ServerProcess) -> None:
    web = server.web
    assert server.port > 0
    assert server.seeds == web.seeds()
    assert server.resolve == web.resolve_map(server.port)
    assert server.resolve["site-0001.demo.test"] == f"127.0.1.2:{server.port}"
    assert all(seed.endswith(f":{server.port}/") for seed in server.seeds)


def test_serves_pages_robots_and_404(server: ServerProcess) -> None:
    web = server.web
    host = web.hosts[1]
    samples = [(host, "/"), (host, "/page-2.html"), (web.hosts[3], "/docs/page-3.html")]
    samples += [(host, "/page-4.html?ref=x"), (host, "/private/doc-0.html")]
    aliases = [n for n in web.all_host_names() if n.startswith("www.")]
    assert aliases
    samples.append((aliases[0], "/page-1.html"))

    async def scenario() -> None:
        for name, target in samples:
            status, headers, body = await _get(server.resolve, name, target)
            expected = web.page(name, target)
            assert expected is not None
            assert (status, body) == (200, expected[2])
            assert headers["Content-Type"] == expected[1]["Content-Type"]
        status, headers, body = await _get(server.resolve, host, "/robots.txt")
        assert status == 200 and headers["Content-Type"].startswith("text/plain")
        assert b"Disallow: /private/" in body
        assert (await _get(server.resolve, host, "/no-such-page.html"))[0] == 404
        status, headers, body = await _get(server.resolve, host, "/page-2.html", "HEAD")
        assert status == 200 and body == b"" and int(headers["Content-Length"]) > 0
        assert (await _get(server.resolve, host, "/", "POST"))[0] == 405
        # Keep-alive: many requests over one connection to one host.
        connector = aiohttp.TCPConnector(limit=1)
        async with aiohttp.ClientSession(connector=connector, timeout=TIMEOUT) as session:
            for target in KEEP_ALIVE_TARGETS:
                async with session.get(
                    f"http://{server.resolve[host]}{target}", headers={"Host": host}
                ) as response:
                    assert response.status == 200
                    await response.read()

    _run(scenario())
    assert server.stop() == 0
    log = read_request_log(server.log_path or "")
    assert len(log) == len(samples) + 4 + 5
    for record in log:
        assert set(record) >= {"host", "path", "start", "end", "status", "peer"}
        assert record["start"] <= record["end"]
        assert record["peer"].startswith("127.")
        assert record["ip"] == web.address_of(record["host"])
    first = log[0]
    assert (first["host"], first["path"], first["status"]) == (host, "/", 200)
    assert [r["status"] for r in log if r["path"] == "/no-such-page.html"] == [404]
    keep_alive = log[-5:]
    assert len({r["peer"] for r in keep_alive}) == 1  # one connection served all five


def test_host_falls_back_to_local_address(server: ServerProcess) -> None:
    """Without a known Host header the IP decides, so raw-IP clients still get the site."""
    web = server.web
    ip_port = server.resolve[web.hosts[2]]
    with socket.create_connection(_addr(ip_port), timeout=10) as sock:
        sock.sendall(b"GET /robots.txt HTTP/1.0\r\n\r\n")
        reply = _read_all(sock)
    assert reply.startswith(b"HTTP/1.1 200 ") and reply.endswith(b"Disallow: /private/\n")
    with socket.create_connection(_addr(ip_port), timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: unknown.example\r\nConnection: close\r\n\r\n")
        reply = _read_all(sock)
    page = web.page(web.hosts[2], "/")
    assert page is not None and reply.endswith(page[2])
    assert server.stop() == 0
    hosts = [r["host"] for r in read_request_log(server.log_path or "")]
    assert hosts == [web.hosts[2], web.hosts[2]]


def test_pipelined_requests_answered_in_order(server: ServerProcess) -> None:
    host = server.web.hosts[0]
    with socket.create_connection(_addr(server.resolve[host]), timeout=10) as sock:
        request = f"GET /page-1.html HTTP/1.1\r\nHost: {host}\r\n\r\n"
        last = f"GET /page-2.html HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        sock.sendall((request * 3 + last).encode())
        reply = _read_all(sock)
    assert reply.count(b"HTTP/1.1 200 OK") == 4
    assert reply.index(b"Page 1 of") < reply.rindex(b"Page 2 of")


def _addr(ip_port: str) -> tuple[str, int]:
    ip, port = ip_port.rsplit(":", 1)
    return ip, int(port)


def _read_all(sock: socket.socket) -> bytes:
    """Read until the server closes (bounded by the socket timeout and a size cap)."""
    chunks: list[bytes] = []
    total = 0
    while total < 10_000_000:
        chunk = sock.recv(65536)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def test_in_process_server_and_latency(tmp_path: Path) -> None:
    """With latency, concurrent requests to one host show as overlapping log intervals."""
    log_path = tmp_path / "inproc.jsonl"
    web = DemoWeb(WebSpec(hosts=2, pages_per_host=6, seed=2))

    async def scenario() -> int:
        async with DemoServer(web, log_path=log_path, latency=0.2) as srv:
            assert srv.web.port == srv.port > 0
            resolve = srv.resolve_map()
            host = srv.web.hosts[0]
            results = await asyncio.gather(
                _get(resolve, host, "/page-1.html"), _get(resolve, host, "/page-2.html")
            )
            assert [status for status, _, _ in results] == [200, 200]
            return srv.requests

    assert _run(scenario()) == 2
    first, second = sorted(read_request_log(log_path), key=lambda r: r["start"])
    assert first["end"] - first["start"] >= 0.19
    assert second["start"] < first["end"]  # overlap: what the politeness check detects


def test_stop_flushes_log_and_exits_cleanly_on_sigint(tmp_path: Path) -> None:
    handle = start_server_process(SPEC, tmp_path / "log.jsonl", tmp_path, timeout=60)
    try:
        _run(_get(handle.resolve, handle.web.hosts[0], "/"))
        handle.process.send_signal(signal.SIGINT)
        assert handle.process.wait(30) == 0
    finally:
        handle.stop()
    assert [r["path"] for r in read_request_log(tmp_path / "log.jsonl")] == ["/"]


@pytest.mark.skipif(nginx_binary() is None, reason="nginx not installed")
def test_nginx_serves_the_same_bytes(tmp_path: Path) -> None:
    spec = WebSpec(hosts=3, pages_per_host=10, seed=4)
    with start_nginx(spec, tmp_path / "nginx", timeout=60, workers=1) as ng:
        web = ng.web
        host = web.hosts[1]
        targets = ["/", "/page-2.html", "/page-4.html?ref=x", "/robots.txt"]

        async def scenario() -> None:
            for target in targets:
                status, _, body = await _get(ng.resolve, host, target)
                expected = web.page(host, target)
                assert expected is not None and (status, body) == (200, expected[2])
            assert (await _get(ng.resolve, host, "/nope.html"))[0] == 404

        _run(scenario())
        assert ng.stop() == 0
        log = ng.read_log()
    assert [r["path"] for r in log] == [*targets, "/nope.html"]
    assert all(r["host"] == host and r["ip"] == web.address_of(host) for r in log)
    assert all(r["start"] <= r["end"] for r in log)
    assert [r["status"] for r in log] == [200, 200, 200, 200, 404]
