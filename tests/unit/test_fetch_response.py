"""Reading responses (streams/fetch/response.py) through a Fetcher and a loopback
server: connection reuse, the cap on a body that came with its head; Retry-After."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from streams.fetch.config import FetchConfig
from streams.fetch.fetcher import Fetcher
from streams.fetch.handlers import FetchResult
from streams.fetch.response import parse_retry_after

T = TypeVar("T")


def run(factory: Callable[[], Awaitable[T]]) -> T:
    """Each test gets a fresh stdlib loop (never a policy another test installed)."""

    async def main() -> T:
        return await factory()

    with asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as runner:
        return runner.run(main())


# -- connection reuse ------------------------------------------------------------------------


async def serve_names(answer: Callable[..., Awaitable[Any]]) -> tuple[Any, int]:
    """An aiohttp server on loopback answering /{name} with `answer`: (runner, port)."""
    from aiohttp import web

    app = web.Application()
    app.router.add_get("/{name}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


def test_a_connection_is_kept_after_an_unread_but_complete_answer_and_dropped_otherwise() -> None:
    """Redirects, 304s, error pages and refused types are not read, but their short
    bodies arrive with their heads, and aiohttp pools such a connection as soon as its
    response has ended (before Fetcher._done closes what is left): the host's next
    fetch reuses it. A body still on its way is not waited for: that one is dropped."""
    from aiohttp import web

    peers: list[int] = []
    finish = asyncio.Event()  # lets the unfinished answer end, for a quick server cleanup

    async def answer(request: web.Request) -> web.StreamResponse:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        peers.append(int(peer[1]) if peer else -1)
        name = request.match_info["name"]
        if name == "moved":
            return web.Response(status=302, text="moved", headers={"Location": "/ok"})
        if name == "missing":
            return web.Response(status=404, text="<p>not here</p>", content_type="text/html")
        if name == "unchanged":
            return web.Response(status=304)
        if name == "pdf":
            return web.Response(body=b"%PDF-1.7 tiny", content_type="application/pdf")
        if name == "moved-slowly":  # a body promised and not finished: never waited for
            response = web.StreamResponse(status=302, headers={"Location": "/ok"})
            response.content_length = 1000
            await response.prepare(request)
            await response.write(b"0123456789")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(finish.wait(), 10.0)
            return response
        return web.Response(text="<p>ok</p>", content_type="text/html")

    async def scenario() -> list[tuple[str, str, float]]:
        runner, port = await serve_names(answer)
        fetcher = Fetcher(FetchConfig(allow_private=True))
        out: list[tuple[str, str, float]] = []
        try:
            for name in ("ok", "moved", "missing", "unchanged", "pdf", "ok", "moved-slowly", "ok"):
                r = await fetcher.fetch(f"http://127.0.0.1:{port}/{name}")
                out.append((name, r.outcome, r.elapsed_ms))
        finally:
            finish.set()
            await fetcher.close()
            await runner.cleanup()
        return out

    results = run(scenario)
    assert [outcome for _, outcome, _ in results] == [
        "fetched", "redirect", "http-error", "unchanged", "not-html", "fetched", "redirect",
        "fetched",
    ]  # fmt: skip
    assert results[6][2] < 2000, results[6]  # the unfinished body was not waited for
    assert len(set(peers[:7])) == 1, peers  # one connection for the first seven answers
    assert peers[7] != peers[6], peers  # a new one after the unfinished body


# -- bounded decoders -----------------------------------------------------------------------


def test_a_body_that_came_with_its_head_is_capped_like_one_read_in_chunks() -> None:
    """A small body is usually whole in aiohttp's buffer by the time the head is
    parsed, and `CappedResponse.read` takes it in one piece. The cap applies as to a body
    read chunk by chunk: over it, the first `cap` bytes, truncated; within it, the whole
    body. Either way the response had ended, so aiohttp pooled its connection already
    (as before this shortcut). A body that trickles in goes through the chunk loop."""
    from aiohttp import web

    peers: list[int] = []
    body = bytes(range(256)) * 40  # 10,240 bytes, sent whole with a Content-Length

    async def answer(request: web.Request) -> web.StreamResponse:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        peers.append(int(peer[1]) if peer else -1)
        if request.match_info["name"] == "trickle":
            response = web.StreamResponse(headers={"Content-Type": "text/html"})
            response.content_length = len(body)
            await response.prepare(request)
            for i in range(0, len(body), 4096):
                await response.write(body[i : i + 4096])
                await asyncio.sleep(0.01)
            return response
        return web.Response(body=body, content_type="text/html")

    async def scenario() -> list[FetchResult]:
        runner, port = await serve_names(answer)
        small = Fetcher(FetchConfig(allow_private=True, max_body_bytes=4000))
        large = Fetcher(FetchConfig(allow_private=True, max_body_bytes=len(body)))
        try:
            return [
                await large.fetch(f"http://127.0.0.1:{port}/whole"),
                await large.fetch(f"http://127.0.0.1:{port}/whole"),
                await small.fetch(f"http://127.0.0.1:{port}/whole"),
                await small.fetch(f"http://127.0.0.1:{port}/whole"),
                await large.fetch(f"http://127.0.0.1:{port}/trickle"),
                await small.fetch(f"http://127.0.0.1:{port}/trickle"),
            ]
        finally:
            await small.close()
            await large.close()
            await runner.cleanup()

    results = run(scenario)
    assert [r.outcome for r in results] == ["fetched"] * 6
    for r in (results[0], results[1], results[4]):
        assert r.body == body and not r.truncated and r.wire_bytes == len(body)
    for r in (results[2], results[3], results[5]):
        assert r.body == body[:4000] and r.truncated and "truncated" in r.reason
    assert peers[0] == peers[1] and peers[2] == peers[3], peers  # ended: pooled, reused


# -- Retry-After ---------------------------------------------------------------------------


def test_retry_after_forms() -> None:
    assert parse_retry_after("120") == 120.0
    assert parse_retry_after(" 7 ") == 7.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    assert parse_retry_after("-5") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past
    future = parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT")
    assert future is not None and future > 10**9
