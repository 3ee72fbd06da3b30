"""Name resolution for the fetcher: `GuardedResolver`, aiohttp's resolver hook.

``--resolve`` overrides first, then a cache that honours the answer's TTL (aiodns
when installed; the system resolver with a fixed TTL otherwise), failures cached
with a growing backoff and recorded as "dns-error". Every address, of every hop, is
checked by the SSRF guard (streams/fetch/guard.py) on the way to the connector,
*before* a socket is opened, so DNS rebinding can't slip between check and connect.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp.abc import AbstractResolver, ResolveResult

from streams.fetch.guard import AddressGuard, literal_address, split_override

__all__ = [
    "AioDns",
    "DnsAnswer",
    "DnsBackend",
    "DnsError",
    "GuardedResolver",
    "SystemDns",
    "make_dns_backend",
]


class DnsError(OSError):
    """A name did not resolve (not found, timed out, server failure)."""


@dataclass
class DnsAnswer:
    addresses: list[str]
    #: Seconds the answer may be cached; None when the backend can't tell.
    ttl: float | None


class DnsBackend(Protocol):
    async def lookup(self, host: str, family: int) -> DnsAnswer: ...

    async def close(self) -> None: ...


class SystemDns:
    """The C library's getaddrinfo (in a thread): /etc/hosts, nsswitch, no TTLs."""

    async def lookup(self, host: str, family: int) -> DnsAnswer:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, None, family=family, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise DnsError(f"{host}: {exc.strerror or exc}") from exc
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        return DnsAnswer(addresses, None)

    async def close(self) -> None:
        return None


class AioDns:
    """c-ares through aiodns: non-blocking, /etc/hosts first, and the answers' TTLs."""

    def __init__(self, nameservers: Iterable[str] = (), timeout: float = 5.0, tries: int = 2):
        import aiodns  # noqa: F401  (fail here, at construction, if it isn't installed)

        self.nameservers = list(nameservers)
        self.timeout = timeout
        self.tries = tries
        self._resolver: Any = None

    async def lookup(self, host: str, family: int) -> DnsAnswer:
        import aiodns

        if self._resolver is None:
            self._resolver = aiodns.DNSResolver(
                nameservers=self.nameservers or None, timeout=self.timeout, tries=self.tries
            )
        try:
            result = await self._resolver.getaddrinfo(host, family=family, type=socket.SOCK_STREAM)
        except aiodns.error.DNSError as exc:
            message = exc.args[1] if len(exc.args) > 1 else str(exc)
            raise DnsError(f"{host}: {message}") from exc
        addresses: list[str] = []
        ttls: list[float] = []
        for node in result.nodes:
            addr = node.addr[0]
            addresses.append(addr.decode() if isinstance(addr, bytes) else str(addr))
            ttls.append(float(node.ttl))
        if not addresses:
            raise DnsError(f"{host}: no addresses")
        return DnsAnswer(list(dict.fromkeys(addresses)), min(ttls) if ttls else None)

    async def close(self) -> None:
        if self._resolver is not None:
            closing = self._resolver.close()
            if asyncio.iscoroutine(closing):
                await closing
            self._resolver = None


def make_dns_backend(
    kind: str = "auto", nameservers: Iterable[str] = (), timeout: float = 5.0
) -> DnsBackend:
    """ "aiodns", "system", or "auto" (aiodns when importable, else the system)."""
    if kind in ("auto", "aiodns"):
        try:
            return AioDns(nameservers, timeout=timeout)
        except ImportError:
            if kind == "aiodns":
                raise
    if kind not in ("auto", "system", "aiodns"):
        raise ValueError(f"unknown DNS backend {kind!r}")
    return SystemDns()


@dataclass
class _Negative:
    until: float
    failures: int
    reason: str


class GuardedResolver(AbstractResolver):
    """aiohttp's resolver hook: overrides, a TTL cache, negative caching and the guard.

    Checks happen on the addresses actually handed to the connector, so a name that
    resolves to a private address is refused before any socket is opened, and DNS
    rebinding can't slip between check and connect.
    """

    def __init__(
        self,
        overrides: Mapping[str, str],
        allow_private: bool,
        *,
        backend: DnsBackend | None = None,
        allowed_networks: Iterable[str] = (),
        min_ttl: float = 5.0,
        max_ttl: float = 3600.0,
        default_ttl: float = 300.0,
        negative_ttl: float = 5.0,
        max_negative_ttl: float = 300.0,
        timeout: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.overrides = {host.lower(): addr for host, addr in overrides.items()}
        self.guard = AddressGuard(allow_private, allowed_networks)
        self.backend: DnsBackend = backend if backend is not None else SystemDns()
        self.min_ttl, self.max_ttl, self.default_ttl = min_ttl, max_ttl, default_ttl
        self.negative_ttl, self.max_negative_ttl = negative_ttl, max_negative_ttl
        self.timeout = timeout
        self.clock = clock
        self._cache: dict[tuple[str, int], tuple[float, list[str]]] = {}
        self._negative: dict[tuple[str, int], _Negative] = {}
        self._inflight: dict[tuple[str, int], asyncio.Task[list[str]]] = {}
        #: Counters for tests and progress: backend lookups, cache hits, failures.
        self.lookups = 0
        self.hits = 0
        self.failures = 0

    @property
    def allow_private(self) -> bool:
        return self.guard.allow_private

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        name = host.lower().rstrip(".")
        override = self.overrides.get(name)
        if override:
            addr, override_port = split_override(override)
            addresses, port = [addr], override_port or port
        else:
            literal = literal_address(name)
            addresses = [literal] if literal else await self._addresses(name, int(family))
        for address in addresses:
            self.guard.check(host, address)
        return [self._result(host, address, port) for address in addresses]

    async def _addresses(self, name: str, family: int) -> list[str]:
        key = (name, family)
        now = self.clock()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            self.hits += 1
            return cached[1]
        negative = self._negative.get(key)
        if negative is not None and negative.until > now:
            self.hits += 1
            raise DnsError(f"{negative.reason} (cached; next try in {negative.until - now:.1f} s)")
        task = self._inflight.get(key)
        if task is None:  # one lookup per name at a time, however many fetches wait on it
            task = asyncio.ensure_future(self._lookup(key))
            self._inflight[key] = task
            task.add_done_callback(lambda t: self._lookup_done(key, t))
        return await asyncio.shield(task)

    def _lookup_done(self, key: tuple[str, int], task: asyncio.Task[list[str]]) -> None:
        self._inflight.pop(key, None)
        if not task.cancelled():
            task.exception()  # retrieved: every waiter may have been cancelled meanwhile

    async def _lookup(self, key: tuple[str, int]) -> list[str]:
        name, family = key
        self.lookups += 1
        try:
            answer = await asyncio.wait_for(self.backend.lookup(name, family), self.timeout)
            if not answer.addresses:
                raise DnsError(f"{name}: no addresses")
        except (OSError, TimeoutError) as exc:
            self.failures += 1
            if isinstance(exc, DnsError):
                reason = str(exc)
            elif isinstance(exc, TimeoutError):
                reason = f"{name}: no answer within {self.timeout:g} s"
            else:
                reason = f"{name}: {exc}"
            previous = self._negative.get(key)
            failures = previous.failures + 1 if previous else 1
            wait = min(self.max_negative_ttl, self.negative_ttl * 2 ** (failures - 1))
            self._negative[key] = _Negative(self.clock() + wait, failures, reason)
            raise DnsError(reason) from exc
        self._negative.pop(key, None)
        ttl = self.default_ttl if answer.ttl is None else answer.ttl
        ttl = min(self.max_ttl, max(self.min_ttl, ttl))
        self._cache[key] = (self.clock() + ttl, answer.addresses)
        return answer.addresses

    def ttl_left(self, host: str, family: int = 0) -> float | None:
        """Seconds the cached answer for host has left (None if not cached)."""
        cached = self._cache.get((host.lower(), family))
        return None if cached is None else max(0.0, cached[0] - self.clock())

    @staticmethod
    def _result(hostname: str, addr: str, port: int) -> ResolveResult:
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        return {
            "hostname": hostname,
            "host": addr,
            "port": port,
            "family": family,
            "proto": 0,
            "flags": socket.AI_NUMERICHOST,
        }

    async def close(self) -> None:
        for task in list(self._inflight.values()):
            task.cancel()
        self._cache.clear()
        self._negative.clear()
        await self.backend.close()
