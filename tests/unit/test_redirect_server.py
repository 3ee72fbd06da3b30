"""The dedicated redirect listener over real loopback sockets, with a table of codes
in place of a worker (the worker-backed path is in tests/integration/test_shortlinks.py).

What must hold: the same answers as the web server's route (301/302 with Location,
404/410 with a JSON reason), answers in request order even when a forwarded one comes
back late, keep-alive per HTTP/1.0 and 1.1 rules, and bounds: oversized heads get 431,
garbage gets 400, idle connections and connections over the limit are closed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from streams.web.redirect_server import FORWARD, RedirectServer, location_bytes

T = TypeVar("T")

LINKS = {
    "TempAbc": (302, "https://example.com/a?x=1"),
    "PermAbc": (301, "https://example.com/p"),
    "GoneAbc": (410, "this link has expired"),
}


def resolve(code: str) -> tuple[int, str]:
    if code.startswith("Fwd"):
        return FORWARD, ""
    return LINKS.get(code, (404, "unknown code"))


class Forwarder:
    """Answers forwarded codes once released, so tests choose the order of completion."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.calls: list[tuple[str, str, str]] = []

    async def __call__(
        self, code: str, method: str, remote: str
    ) -> tuple[int, dict[str, str], bytes]:
        self.calls.append((code, method, remote))
        await self.release.wait()
        if code == "FwdFail":
            raise RuntimeError("owner went away")
        return 302, {"Location": f"https://owner.example/{code}"}, b""


def run(coro_fn: Callable[[], Awaitable[T]], timeout: float = 10) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro_fn(), timeout)

    return asyncio.run(bounded())


async def started(**limits: float) -> tuple[RedirectServer, int, Forwarder]:
    forwarder = Forwarder()
    server = RedirectServer(resolve, forwarder, **limits)  # type: ignore[arg-type]
    port = await server.start("127.0.0.1", 0)
    return server, port, forwarder


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers, body


def test_redirects_and_errors_like_the_web_route() -> None:
    async def scenario() -> None:
        server, port, _ = await started()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            cases = [
                ("GET /s/TempAbc HTTP/1.1", 302, "https://example.com/a?x=1", None),
                ("GET /s/PermAbc?utm=1 HTTP/1.1", 301, "https://example.com/p", None),
                ("GET /s/GoneAbc HTTP/1.1", 410, None, "this link has expired"),
                ("GET /s/Nothing HTTP/1.1", 404, None, "unknown code"),
                ("GET /links/TempAbc HTTP/1.1", 404, None, "not found"),
                ("POST /s/TempAbc HTTP/1.1", 405, None, "only GET and HEAD"),
            ]
            for line, status, location, reason in cases:
                writer.write(f"{line}\r\nHost: x\r\nContent-Length: 0\r\n\r\n".encode())
                got_status, headers, body = await read_response(reader)
                assert got_status == status, line
                assert headers.get("location") == location, line
                assert "date" in headers
                if reason is None:
                    assert body == b""
                else:
                    assert headers["content-type"] == "application/json"
                    assert reason in json.loads(body)["error"]
            # HEAD: the same status and headers, no body.
            writer.write(b"HEAD /s/Nothing HTTP/1.1\r\nHost: x\r\n\r\n")
            writer.write(b"GET /s/TempAbc HTTP/1.1\r\nHost: x\r\n\r\n")
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 404") and b"Content-Length: 25" in head
            assert (await read_response(reader))[0] == 302  # no stray body in between
            assert server.requests == len(cases) + 2
        finally:
            writer.close()
            await server.stop()

    run(scenario)


def test_pipelined_answers_keep_request_order_around_a_forward() -> None:
    async def scenario() -> None:
        server, port, forwarder = await started()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(
                b"GET /s/TempAbc HTTP/1.1\r\nHost: x\r\n\r\n"
                b"GET /s/FwdAbcd HTTP/1.1\r\nHost: x\r\n\r\n"
                b"GET /s/PermAbc HTTP/1.1\r\nHost: x\r\n\r\n"
            )
            first = await read_response(reader)
            assert first[0] == 302 and first[1]["location"] == "https://example.com/a?x=1"
            # The third answer is ready, but must wait for the forwarded second one.
            await asyncio.sleep(0)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 0.2)
            assert forwarder.calls == [("FwdAbcd", "GET", "127.0.0.1")]
            forwarder.release.set()
            second, third = await read_response(reader), await read_response(reader)
            assert (second[0], second[1]["location"]) == (302, "https://owner.example/FwdAbcd")
            assert (third[0], third[1]["location"]) == (301, "https://example.com/p")
        finally:
            writer.close()
            await server.stop()

    run(scenario)


def test_a_failed_forward_answers_503_and_closes() -> None:
    async def scenario() -> None:
        server, port, forwarder = await started()
        forwarder.release.set()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(b"GET /s/FwdFail HTTP/1.1\r\nHost: x\r\n\r\n")
            status, headers, _ = await read_response(reader)
            assert status == 503 and headers["connection"] == "close"
            assert await reader.read() == b""  # closed
        finally:
            writer.close()
            await server.stop()

    run(scenario)


def test_keep_alive_rules() -> None:
    async def scenario() -> None:
        server, port, _ = await started()
        try:
            # HTTP/1.0 without keep-alive: answered, then closed.
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /s/TempAbc HTTP/1.0\r\n\r\n")
            status, headers, _ = await read_response(reader)
            assert status == 302 and headers["connection"] == "close"
            assert await reader.read() == b""
            writer.close()
            # HTTP/1.0 asking for keep-alive: told so, and the connection stays.
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            for _ in range(2):
                writer.write(b"GET /s/TempAbc HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
                status, headers, _ = await read_response(reader)
                assert status == 302 and headers["connection"] == "keep-alive"
            writer.close()
            # HTTP/1.1 with Connection: close.
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /s/TempAbc HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            status, headers, _ = await read_response(reader)
            assert status == 302 and headers["connection"] == "close"
            assert await reader.read() == b""
            writer.close()
        finally:
            await server.stop()

    run(scenario)


def test_bad_and_oversized_requests_are_refused_and_closed() -> None:
    async def scenario() -> None:
        server, port, _ = await started(max_head_bytes=1024)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(
                b"GET /s/TempAbc HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 4096 + b"\r\n\r\n"
            )
            status, headers, body = await read_response(reader)
            assert status == 431 and headers["connection"] == "close"
            assert "larger than 1024 bytes" in json.loads(body)["error"]
            assert await reader.read() == b""
            writer.close()

            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"\x16\x03\x01 not http at all\r\n\r\n")
            status, headers, body = await read_response(reader)
            assert status == 400 and "malformed HTTP request" in json.loads(body)["error"]
            assert await reader.read() == b""
            writer.close()
        finally:
            await server.stop()

    run(scenario)


def test_idle_connections_and_connections_over_the_limit_are_closed() -> None:
    async def scenario() -> None:
        server, port, _ = await started(idle_timeout=0.3, max_connections=2)
        try:
            first = await asyncio.open_connection("127.0.0.1", port)
            second = await asyncio.open_connection("127.0.0.1", port)
            # Wait until the server has both (accepting is asynchronous).
            while len(server.connections) < 2:
                await asyncio.sleep(0.01)  # poll; the condition is the count
            third_reader, third_writer = await asyncio.open_connection("127.0.0.1", port)
            assert await asyncio.wait_for(third_reader.read(), 2) == b""  # over the limit
            third_writer.close()
            # An idle connection (here: a request never finished) is closed after the
            # timeout, whatever it trickles meanwhile.
            first[1].write(b"GET /s/TempAbc HTTP/1.1\r\n")
            assert await asyncio.wait_for(first[0].read(), 3) == b""
            assert await asyncio.wait_for(second[0].read(), 3) == b""
            first[1].close()
            second[1].close()
            assert not server.connections
        finally:
            await server.stop()

    run(scenario)


def test_location_is_always_a_safe_header_value() -> None:
    assert location_bytes("https://example.com/a?b=c") == b"https://example.com/a?b=c"
    assert location_bytes("https://example.com/é") == b"https://example.com/%C3%A9"
    assert b"\r" not in location_bytes("https://example.com/\r\nSet-Cookie: x=1")
    assert b"\n" not in location_bytes("https://example.com/\r\nSet-Cookie: x=1")
