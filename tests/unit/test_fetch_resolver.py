"""The caching, guarded resolver (streams/fetch/resolver.py) without a web server.

The resolver tests use a scripted backend and an injected clock, so TTLs and
backoffs are checked exactly and nothing waits; one test runs aiodns against a
toy DNS server on loopback (no query ever leaves 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from streams.fetch.guard import AddressGuard, BlockedAddress
from streams.fetch.resolver import (
    AioDns,
    DnsAnswer,
    DnsError,
    GuardedResolver,
    SystemDns,
    make_dns_backend,
)
from tests.hostile.dns import QTYPE_A, FakeDns, ToyDns, Zone

T = TypeVar("T")


def run(factory: Callable[[], Awaitable[T]]) -> T:
    """Each test gets a fresh stdlib loop (never a policy another test installed)."""

    async def main() -> T:
        return await factory()

    with asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as runner:
        return runner.run(main())


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
    guard = AddressGuard(False, ["10.1.0.0/16"])
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
            backend = AioDns([server.server], timeout=1.0, tries=1)
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
        expected: type = SystemDns
    else:
        expected = AioDns
    assert isinstance(make_dns_backend("auto"), expected)
    assert isinstance(make_dns_backend("system"), SystemDns)
    with pytest.raises(ValueError):
        make_dns_backend("carrier-pigeon")
