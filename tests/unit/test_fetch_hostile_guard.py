"""The Fetcher's SSRF guard and DNS failures, against the hostile catalogue and fake DNS
(see test_fetch_hostile.py for the connection spy)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from streams.fetch.config import FetchConfig
from streams.fetch.fetcher import Fetcher
from streams.fetch.handlers import FetchResult
from streams.fetch.resolver import DnsAnswer, GuardedResolver
from tests.hostile import server as hs
from tests.hostile.dns import FakeDns
from tests.hostile.server import HostileProcess
from tests.unit.hostile_helpers import (
    CAP,
    RELAXED,
    TIMEOUTS,
    UA,
    connection_spy,
    run,
)

# -- the SSRF guard: refusals without a connection -----------------------------------------------

ADDRESS_CLASSES = {
    "10.0.0.1": "private",
    "172.16.5.4": "private",
    "192.168.1.1": "private",
    "127.0.0.2": "loopback",
    "169.254.169.254": "link-local",
    "224.0.0.1": "multicast",
    "240.0.0.1": "reserved",
    "0.0.0.0": "unspecified",
    "100.64.0.1": "non-global",
    "::1": "loopback",
    "fe80::1": "link-local",
    "fc00::1": "private",
    "ff02::1": "multicast",
    "::ffff:10.0.0.1": "private",
}
LEGACY_LITERALS = {"2130706433": "loopback", "0x7f.1": "loopback", "0177.0.0.1": "loopback"}


def fetch_guarded(
    urls: list[tuple[str, str]], **changes: Any
) -> tuple[list[FetchResult], list[tuple[str, int]]]:
    config = dataclasses.replace(
        FetchConfig(user_agent=UA, max_body_bytes=CAP, dns_backend="system", **TIMEOUTS),
        **changes,
    )
    assert not config.allow_private

    async def go() -> list[FetchResult]:
        fetcher = Fetcher(config)
        try:
            return list(await asyncio.gather(*(fetcher.fetch(u, k) for u, k in urls)))
        finally:
            await fetcher.close()

    with connection_spy() as seen:
        results = run(go)
    return results, seen


def url_host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


@pytest.mark.parametrize("kind", ["page", "robots"])
def test_ip_literals_of_every_class_are_refused_without_connecting(kind: str) -> None:
    classes = {**ADDRESS_CLASSES, **LEGACY_LITERALS}
    urls = [(f"http://{url_host(a)}:8080/robots.txt", kind) for a in classes]
    results, seen = fetch_guarded(urls)
    assert seen == [], "a connection was attempted"
    for (address, why), r in zip(classes.items(), results, strict=True):
        assert r.outcome == "blocked", (address, r.outcome, r.reason)
        assert f"is a {why} address" in r.reason, (address, r.reason)
        assert r.status == 0 and r.body == b""
        assert r.elapsed_ms < 500


def test_names_resolving_to_every_class_are_refused_without_connecting() -> None:
    resolve = {f"h{i}.evil.test": a for i, a in enumerate(ADDRESS_CLASSES)}
    results, seen = fetch_guarded(
        [(f"http://{host}/", "page") for host in resolve], resolve=resolve
    )
    assert seen == []
    for (host, address), r in zip(resolve.items(), results, strict=True):
        why = ADDRESS_CLASSES[address]
        assert r.outcome == "blocked", (host, r.reason)
        assert f"{host} resolves to {address}, which is a {why} address" in r.reason


def test_dns_answers_pointing_inside_are_refused() -> None:
    dns = FakeDns({"rebind.test": DnsAnswer(["10.0.0.7"], 60.0)})
    resolver = GuardedResolver({}, False, backend=dns)
    config = FetchConfig(user_agent=UA, dns_backend="system", **TIMEOUTS)

    async def go() -> FetchResult:
        fetcher = Fetcher(config, resolver=resolver)
        try:
            return await fetcher.fetch("http://rebind.test/")
        finally:
            await fetcher.close()

    with connection_spy() as seen:
        r = run(go)
    assert seen == []
    assert r.outcome == "blocked" and "rebind.test resolves to 10.0.0.7" in r.reason


def test_redirects_to_private_addresses_are_refused(hostile: HostileProcess) -> None:
    """The server itself (127.0.0.1) is allow-listed; everything it points at is not."""
    base = f"http://{hostile.host}:{hostile.port}"
    inside = f"http://inside.test:{hostile.port}/robots.txt"
    other_loopback = f"http://127.0.0.2:{hostile.port}/robots.txt"
    urls = [
        (f"{base}/redirect/private", "page"),
        (f"{base}/redirect/private", "robots"),
        (f"{base}/redirect/metadata", "robots"),
        (f"{base}/redirect/to?url={hs.quoted(inside)}", "robots"),
        (f"{base}/redirect/to?url={hs.quoted(other_loopback)}", "robots"),
        ("http://10.0.0.1/", "page"),  # the page redirect's target, when it comes back
    ]
    results, seen = fetch_guarded(
        urls, allowed_networks=("127.0.0.1/32",), resolve={"inside.test": "10.9.8.7"}
    )
    page, robots_private, robots_metadata, robots_inside, robots_loopback, target = results
    assert page.outcome == "redirect" and page.location == "http://10.0.0.1/"
    assert robots_private.outcome == "blocked"
    assert "10.0.0.1 is a private address" in robots_private.reason
    assert "169.254.169.254 is a link-local address" in robots_metadata.reason
    assert "inside.test resolves to 10.9.8.7, which is a private address" in robots_inside.reason
    assert "127.0.0.2 is a loopback address" in robots_loopback.reason
    assert target.outcome == "blocked" and "10.0.0.1 is a private address" in target.reason
    assert {host for host, _ in seen} == {"127.0.0.1"}, seen  # only the allow-listed server


# -- DNS failures -------------------------------------------------------------------------------


def test_dns_failures_are_recorded_and_negative_cached(hostile: HostileProcess) -> None:
    dns = FakeDns({"up.test": DnsAnswer(["127.0.0.1"], 60.0)})
    resolver = GuardedResolver({}, True, backend=dns)
    config = FetchConfig(user_agent=UA, allow_private=True, dns_backend="system", **RELAXED)
    port = hostile.port

    async def go() -> list[FetchResult]:
        fetcher = Fetcher(config, resolver=resolver)
        try:
            return [
                await fetcher.fetch(f"http://nx.test:{port}/ok"),
                await fetcher.fetch(f"http://nx.test:{port}/ok"),
                await fetcher.fetch(f"http://up.test:{port}/ok"),
                await fetcher.fetch(f"http://up.test:{port}/ok"),
            ]
        finally:
            await fetcher.close()

    with connection_spy():
        first, again, up, up_again = run(go)
    assert first.outcome == "dns-error" and first.status == 0
    assert first.reason == "dns: nx.test: Domain name not found"
    assert again.outcome == "dns-error" and "cached; next try in" in again.reason
    assert up.outcome == up_again.outcome == "fetched"
    assert dns.calls == ["nx.test", "up.test"], "a failure or an answer was asked twice"
