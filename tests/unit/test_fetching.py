"""The fetcher's parts without a web server: the SSRF guard, the caching resolver,
the bounded decoders, the handler registry, Retry-After.

The resolver tests use a scripted backend and an injected clock, so TTLs and
backoffs are checked exactly and nothing waits; one test runs aiodns against a
toy DNS server on loopback (no query ever leaves 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import socket
import zlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from streams.core import fetching
from streams.core.fetching import (
    BlockedAddress,
    ContentDecodeError,
    DnsAnswer,
    DnsError,
    FetchConfig,
    Fetcher,
    FetchResult,
    GuardedResolver,
    address_class,
    is_public_address,
    literal_address,
    parse_retry_after,
)
from streams.core.handlers import (
    DEFAULT_HANDLERS,
    HandlerRegistry,
    ResponseView,
    html_handler,
)
from tests.hostile.dns import QTYPE_A, FakeDns, ToyDns, Zone

T = TypeVar("T")


def run(factory: Callable[[], Awaitable[T]]) -> T:
    """Each test gets a fresh stdlib loop (never a policy another test installed)."""

    async def main() -> T:
        return await factory()

    with asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as runner:
        return runner.run(main())


# -- the SSRF guard ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("10.0.0.1", "private"),
        ("172.16.5.4", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("0.0.0.0", "unspecified"),
        ("100.64.0.1", "non-global"),  # carrier-grade NAT
        ("192.0.2.7", "private"),  # TEST-NET-1 (documentation)
        ("::1", "loopback"),
        ("fe80::1", "link-local"),
        ("fc00::1", "private"),
        ("ff02::1", "multicast"),
        ("::ffff:10.0.0.1", "private"),  # IPv4-mapped: judged as the IPv4 it maps
        ("::", "unspecified"),
        ("93.184.216.34", None),
        ("2606:4700::1111", None),
    ],
)
def test_address_classes(address: str, why: str | None) -> None:
    assert address_class(address) == why
    assert is_public_address(address) is (why is None)


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("[::1]", "::1"),
        ("2130706433", "127.0.0.1"),  # one decimal number
        ("0x7f.1", "127.0.0.1"),  # hex, short form
        ("0177.0.0.1", "127.0.0.1"),  # octal
        ("017700000001", "127.0.0.1"),
        ("10.1", "10.0.0.1"),
        ("example.com", None),
        ("deadbeef.cafe", None),  # hex letters alone are a name
        ("site-0001.demo.test", None),
    ],
)
def test_literal_addresses_in_every_spelling(host: str, address: str | None) -> None:
    assert literal_address(host) == address


def test_allowed_networks_open_only_what_they_name() -> None:
    guard = fetching.AddressGuard(False, ["127.0.0.1/32"])
    guard.check("127.0.0.1", "127.0.0.1")
    with pytest.raises(BlockedAddress, match="loopback"):
        guard.check("127.0.0.2", "127.0.0.2")
    with pytest.raises(BlockedAddress, match=r"x\.test resolves to 10\.0\.0\.1, which is a priv"):
        guard.check("x.test", "10.0.0.1")
    fetching.AddressGuard(True).check("x", "10.0.0.1")  # allow_private lifts it all


# -- the resolver ---------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_resolver(
    dns: FakeDns, clock: Clock, allow_private: bool = True, **kw: Any
) -> GuardedResolver:
    return GuardedResolver({}, allow_private, backend=dns, clock=clock, **kw)


def test_answers_are_cached_for_their_ttl() -> None:
    dns, clock = FakeDns(), Clock()
    dns.answers["a.test"] = DnsAnswer(["127.0.0.9"], 30.0)
    resolver = make_resolver(dns, clock)

    async def scenario() -> None:
        first = await resolver.resolve("a.test", 80, socket.AF_INET)
        assert [(r["host"], r["port"]) for r in first] == [("127.0.0.9", 80)]
        await resolver.resolve("A.test", 8080, socket.AF_INET)  # case and port don't matter
        assert dns.calls == ["a.test"]
        assert resolver.ttl_left("a.test", socket.AF_INET) == 30.0
        clock.now += 29.9
        await resolver.resolve("a.test", 80, socket.AF_INET)
        assert dns.calls == ["a.test"]
        clock.now += 0.2  # past the TTL: asked again
        await resolver.resolve("a.test", 80, socket.AF_INET)
        assert dns.calls == ["a.test", "a.test"]

    run(scenario)
    assert resolver.hits == 2 and resolver.lookups == 2


@pytest.mark.parametrize(
    ("ttl", "cached_for"),
    [(0.0, 5.0), (2.0, 5.0), (600.0, 600.0), (10**9, 3600.0), (None, 300.0)],
)
def test_ttls_are_clamped_and_missing_ttls_get_the_default(
    ttl: float | None, cached_for: float
) -> None:
    dns, clock = FakeDns(), Clock()
    dns.answers["a.test"] = DnsAnswer(["127.0.0.9"], ttl)
    resolver = make_resolver(dns, clock)
    run(lambda: resolver.resolve("a.test", 80, socket.AF_INET))
    assert resolver.ttl_left("a.test", socket.AF_INET) == cached_for


def test_failures_are_negative_cached_with_a_growing_backoff() -> None:
    dns, clock = FakeDns(), Clock()
    resolver = make_resolver(dns, clock, negative_ttl=5.0, max_negative_ttl=30.0)

    async def fail_expecting(lookups: int, cached: bool) -> None:
        with pytest.raises(DnsError) as info:
            await resolver.resolve("nx.test", 80, socket.AF_INET)
        assert "nx.test: Domain name not found" in str(info.value)
        assert ("cached" in str(info.value)) is cached
        assert len(dns.calls) == lookups

    async def scenario() -> None:
        await fail_expecting(1, cached=False)
        for wait in (5.0, 10.0, 20.0, 30.0, 30.0):  # doubling, capped at the max
            clock.now += wait - 0.01
            await fail_expecting(len(dns.calls), cached=True)
            clock.now += 0.02
            await fail_expecting(len(dns.calls) + 1, cached=False)
        # the name comes back: the answer is used and the failure count forgotten
        dns.answers["nx.test"] = DnsAnswer(["127.0.0.9"], 60.0)
        clock.now += 30.0
        assert (await resolver.resolve("nx.test", 80, socket.AF_INET))[0]["host"] == "127.0.0.9"
        dns.answers["nx.test"] = DnsError("nx.test: gone again")
        clock.now += 61.0
        with pytest.raises(DnsError):
            await resolver.resolve("nx.test", 80, socket.AF_INET)
        clock.now += 5.01  # back to the first backoff step
        with pytest.raises(DnsError, match=r"gone again$"):
            await resolver.resolve("nx.test", 80, socket.AF_INET)

    run(scenario)


def test_a_lookup_that_hangs_fails_after_the_dns_timeout() -> None:
    dns, clock = FakeDns(), Clock()
    dns.hang = True
    resolver = make_resolver(dns, clock, timeout=0.05)
    with pytest.raises(DnsError, match=r"slow.test: no answer within 0.05 s"):
        run(lambda: resolver.resolve("slow.test", 80, socket.AF_INET))


def test_concurrent_lookups_of_one_name_share_one_query() -> None:
    dns, clock = FakeDns(), Clock()
    dns.answers["a.test"] = DnsAnswer(["127.0.0.9"], 30.0)
    dns.gate = asyncio.Event()
    resolver = make_resolver(dns, clock)

    async def scenario() -> list[list[Any]]:
        waiting = [
            asyncio.ensure_future(resolver.resolve("a.test", 80, socket.AF_INET)) for _ in range(20)
        ]
        await asyncio.sleep(0)  # let every resolve reach the shared lookup
        assert dns.gate is not None
        dns.gate.set()
        return list(await asyncio.gather(*waiting))

    results = run(scenario)
    assert dns.calls == ["a.test"]
    assert all(r[0]["host"] == "127.0.0.9" for r in results)


def test_overrides_and_literals_never_reach_the_backend() -> None:
    dns, clock = FakeDns(), Clock()
    resolver = GuardedResolver(
        {"a.test": "127.0.0.5:8080", "b.test": "[::1]:9000", "c.test": "127.0.0.6"},
        True,
        backend=dns,
        clock=clock,
    )

    async def scenario() -> list[tuple[str, int]]:
        out = []
        for host in ("a.test", "b.test", "c.test", "2130706433"):
            result = (await resolver.resolve(host, 80, socket.AF_INET))[0]
            out.append((result["host"], result["port"]))
        return out

    assert run(scenario) == [
        ("127.0.0.5", 8080),
        ("::1", 9000),
        ("127.0.0.6", 80),
        ("127.0.0.1", 80),
    ]
    assert dns.calls == []


@pytest.mark.parametrize(
    "addresses", [["10.0.0.1"], ["93.184.216.34", "10.0.0.1"], ["169.254.169.254"]]
)
def test_the_guard_checks_every_resolved_address(addresses: list[str]) -> None:
    dns, clock = FakeDns(), Clock()
    dns.answers["evil.test"] = DnsAnswer(addresses, 60.0)
    resolver = make_resolver(dns, clock, allow_private=False)
    for _ in range(2):  # refused again from the cache, without a new lookup
        with pytest.raises(BlockedAddress, match=r"evil\.test resolves to"):
            run(lambda: resolver.resolve("evil.test", 80, socket.AF_INET))
    assert dns.calls == ["evil.test"]


def test_a_name_rebinding_to_a_private_address_is_refused_despite_the_verdict_memo() -> None:
    """The guard memoises verdicts per address, never per name: a name whose answer
    turns from public to private (DNS rebinding) meets the private address's verdict."""
    dns, clock = FakeDns(), Clock()
    dns.answers["rebind.test"] = DnsAnswer(["93.184.216.34"], 5.0)
    resolver = make_resolver(dns, clock, allow_private=False)
    for _ in range(2):  # the second check is answered from the memo
        assert run(lambda: resolver.resolve("rebind.test", 80, socket.AF_INET))[0]["host"] == (
            "93.184.216.34"
        )
    dns.answers["rebind.test"] = DnsAnswer(["127.0.0.1"], 5.0)
    clock.now += 6.0
    for _ in range(2):
        with pytest.raises(BlockedAddress, match=r"rebind\.test resolves to 127\.0\.0\.1"):
            run(lambda: resolver.resolve("rebind.test", 80, socket.AF_INET))
    assert dns.calls == ["rebind.test", "rebind.test"]


def test_the_verdict_memo_is_bounded_and_keeps_the_allow_list() -> None:
    guard = fetching.AddressGuard(False, ["10.1.0.0/16"])
    guard.MEMO_SIZE = 3
    for _ in range(2):
        guard.check("a", "10.1.2.3")  # allow-listed, from the memo the second time
        with pytest.raises(BlockedAddress, match="private"):
            guard.check("b", "10.2.0.1")
        with pytest.raises(BlockedAddress, match="link-local"):
            guard.check("c", "169.254.169.254")
        guard.check("d", "93.184.216.34")
    assert len(guard._verdicts) <= 3


def test_aiodns_backend_reads_ttls_from_the_answer() -> None:
    pytest.importorskip("aiodns")
    zone = Zone(records={"ttl.test": ("127.0.0.1", 42)}, servfail={"broken.test"})

    async def scenario() -> tuple[list[str], float | None, str, str]:
        async with ToyDns(zone) as server:
            backend = fetching.AioDns([server.server], timeout=1.0, tries=1)
            resolver = GuardedResolver({}, True, backend=backend)
            try:
                results = await resolver.resolve("ttl.test", 80, socket.AF_INET)
                ttl = resolver.ttl_left("ttl.test", socket.AF_INET)
                errors = []
                for name in ("nx.test", "broken.test"):
                    try:
                        await resolver.resolve(name, 80, socket.AF_INET)
                    except DnsError as exc:
                        errors.append(str(exc))
                return [r["host"] for r in results], ttl, errors[0], errors[1]
            finally:
                await resolver.close()

    hosts, ttl, nx, servfail = run(scenario)
    assert hosts == ["127.0.0.1"]
    assert ttl is not None and 41.0 < ttl <= 42.0
    assert nx.startswith("nx.test:") and "not found" in nx.lower()
    assert servfail.startswith("broken.test:")
    assert zone.queries[("ttl.test", QTYPE_A)] == 1


def test_make_dns_backend_prefers_aiodns_when_installed() -> None:
    try:
        import aiodns  # noqa: F401
    except ImportError:
        expected: type = fetching.SystemDns
    else:
        expected = fetching.AioDns
    assert isinstance(fetching.make_dns_backend("auto"), expected)
    assert isinstance(fetching.make_dns_backend("system"), fetching.SystemDns)
    with pytest.raises(ValueError):
        fetching.make_dns_backend("carrier-pigeon")


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
    parsed, and `_Response.read` takes it in one piece. The cap applies as to a body
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


def decode_all(decoder: Any, data: bytes, cap: int, chunk: int = 4096) -> tuple[bytes, bool]:
    """Drive a decoder the way _Response.read does."""
    out = b""
    for i in range(0, len(data), chunk):
        piece = decoder.decode(data[i : i + chunk], cap - len(out) + 1)
        assert len(piece) <= cap - len(out) + 1, "a decoder returned more than it was allowed"
        if len(out) + len(piece) > cap:
            return out + piece[: cap - len(out)], True
        out += piece
    decoder.finish()
    return out, False


def test_gzip_members_are_decoded_and_trailing_garbage_ignored() -> None:
    data = gzip.compress(b"one ") + gzip.compress(b"two") + b"\r\n\x00junk"
    assert decode_all(fetching._decoder_for("gzip"), data, 100, chunk=7) == (b"one two", False)


@pytest.mark.parametrize("wbits", [zlib.MAX_WBITS, -zlib.MAX_WBITS])
def test_deflate_with_or_without_the_zlib_wrapper(wbits: int) -> None:
    comp = zlib.compressobj(6, zlib.DEFLATED, wbits)
    data = comp.compress(b"hello deflate") + comp.flush()
    assert decode_all(fetching._decoder_for("deflate"), data, 100) == (b"hello deflate", False)


def test_a_small_input_cannot_produce_more_than_the_room_asked_for() -> None:
    bomb = zlib.compress(b"\0" * (8 << 20), 9)  # 8 MiB in ~8 KB
    decoder = fetching._decoder_for("deflate, identity")  # identity in a list is no coding
    body, truncated = decode_all(decoder, bomb, 1000)
    assert truncated and body == b"\0" * 1000


def test_a_cut_short_stream_is_an_error() -> None:
    data = gzip.compress(b"x" * 10_000)[:-20]
    with pytest.raises(ContentDecodeError, match="ended before its end"):
        decode_all(fetching._decoder_for("gzip"), data, 100_000)


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ("compress", "unsupported content-encoding 'compress'"),
        ("gzip, gzip", "stacked content-encodings gzip, gzip"),
        ("sdch", "unsupported"),
    ],
)
def test_encodings_we_wont_decode(header: str, message: str) -> None:
    with pytest.raises(ContentDecodeError, match=message):
        fetching._decoder_for(header)


def test_identity_means_no_decoder() -> None:
    assert fetching._decoder_for("") is None
    assert fetching._decoder_for("identity") is None


def test_accept_encoding_names_only_bounded_decoders() -> None:
    offered = fetching.accept_encoding().split(", ")
    assert offered[:2] == ["gzip", "deflate"]
    assert ("br" in offered) is (fetching._BROTLI is not None)
    assert ("zstd" in offered) is (fetching._ZSTD is not None)


def test_an_unbounded_brotli_binding_is_not_used() -> None:
    """brotlipy's decompress() takes no output limit: using it would inflate a bomb whole."""
    found = fetching._bounded_brotli()
    if found is None:
        pytest.skip("no brotli binding with an output limit installed")
    make, method = found
    decoder = make()
    assert hasattr(decoder, "can_accept_more_data")
    getattr(decoder, method)(b"", output_buffer_limit=1)


# -- handler registry ------------------------------------------------------------------------


async def toy_handler(response: ResponseView, result: FetchResult) -> None:
    result.outcome = "toy"


async def other_handler(response: ResponseView, result: FetchResult) -> None:
    result.outcome = "other"


def test_registry_lookup_order() -> None:
    registry = HandlerRegistry({"image/*": other_handler}, fallback=html_handler)
    registry.register("image/PNG", toy_handler)
    assert registry.lookup("image/png; charset=binary") is toy_handler
    assert registry.lookup("image/gif") is other_handler
    assert registry.lookup("application/pdf") is None
    assert registry.lookup("") is html_handler  # no Content-Type at all: treated as HTML
    assert "image/png" in registry and registry.types() == ["image/*", "image/png"]


def test_registering_twice_needs_replace() -> None:
    registry = HandlerRegistry()
    registry.register("image/png", toy_handler)
    registry.register("image/png", toy_handler)  # the same handler again is harmless
    with pytest.raises(ValueError, match="already has a handler"):
        registry.register("image/png", other_handler)
    registry.register("image/png", other_handler, replace=True)
    assert registry.lookup("image/png") is other_handler
    with pytest.raises(ValueError, match="type/subtype"):
        registry.register("png", toy_handler)


def test_a_copy_leaves_the_default_registry_alone() -> None:
    registry = DEFAULT_HANDLERS.copy()
    registry.register("image/png", toy_handler)
    assert DEFAULT_HANDLERS.lookup("image/png") is None
    assert DEFAULT_HANDLERS.lookup("text/html") is html_handler
    assert registry.lookup("application/xhtml+xml") is html_handler


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
