"""HTTP fetching: one pooled aiohttp session, with the guards a crawler needs.

No Kafka here: the fetch stage hands a URL in and gets a `FetchResult` back, and
whatever a server does (hang, reset, lie about its content, send a bomb) becomes
a result with an outcome and a reason, never an exception.

* Name resolution goes through `GuardedResolver`: `--resolve` overrides first,
  then a cached system lookup, and every address is checked against the private /
  loopback / link-local / reserved ranges unless private targets are allowed
  (an SSRF guard: a link must not point the crawler at the operator's network).
* Redirects are not followed for pages: the target goes back through url-filter
  and url-seen like any link, so it is polite and deduplicated. robots.txt follows
  up to 5 hops, as RFC 9309 asks.
* The content type is checked before the body is read; the body is read up to a
  cap (after decompression, so a compression bomb stops at the cap too).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

HTML_TYPES = ("text/html", "application/xhtml+xml")


class BlockedAddress(OSError):
    """The host resolved to an address the crawler must not contact."""


def is_public_address(address: str) -> bool:
    """True for globally routable unicast addresses only."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not (
        ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
        or not ip.is_global
    )


class GuardedResolver(AbstractResolver):
    """Resolver with `--resolve` overrides, a small TTL cache and the SSRF guard."""

    def __init__(
        self, overrides: dict[str, str], allow_private: bool, cache_ttl: float = 300.0
    ) -> None:
        self.overrides = {host.lower(): addr for host, addr in overrides.items()}
        self.allow_private = allow_private
        self.cache_ttl = cache_ttl
        self._cache: dict[tuple[str, int], tuple[float, list[ResolveResult]]] = {}

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        key = (host.lower(), port)
        cached = self._cache.get(key)
        if cached and cached[0] > time.monotonic():
            return cached[1]
        override = self.overrides.get(host.lower())
        if override:
            addr, _, override_port = (
                override.rpartition(":") if override.count(":") == 1 else (override, "", "")
            )
            if not addr:
                addr, override_port = override, ""
            target_port = int(override_port) if override_port else port
            results = [self._result(host, addr, target_port)]
        else:
            loop = asyncio.get_running_loop()
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, family=family)
            results = [self._result(host, str(info[4][0]), port) for info in infos]
        for result in results:
            if not self.allow_private and not is_public_address(result["host"]):
                raise BlockedAddress(
                    f"{host} resolves to non-public address {result['host']} "
                    "(private targets are off; --allow-private lifts this)"
                )
        self._cache[key] = (time.monotonic() + self.cache_ttl, results)
        return results

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
        self._cache.clear()


@dataclass
class FetchResult:
    url: str
    status: int = 0
    #: fetched | not-html | http-error | redirect | error | blocked | robots
    outcome: str = "error"
    reason: str = ""
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    truncated: bool = False
    elapsed_ms: float = 0.0
    fetched_at: float = 0.0
    ip: str | None = None
    location: str | None = None
    retry_after: float | None = None
    content_type: str = ""


def parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        from email.utils import parsedate_to_datetime

        when = parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError, IndexError):
        return None


@dataclass
class FetchConfig:
    user_agent: str = "SeineBot/0.1"
    connect_timeout: float = 5.0
    read_timeout: float = 10.0
    total_timeout: float = 30.0
    max_body_bytes: int = 5 * 1024 * 1024
    max_robots_bytes: int = 512 * 1024
    allow_private: bool = False
    resolve: dict[str, str] = field(default_factory=dict)
    pool_size: int = 512


class Fetcher:
    """An aiohttp session shared by every fetch of a worker."""

    def __init__(self, config: FetchConfig) -> None:
        self.config = config
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        if self._session is not None:
            return
        resolver = GuardedResolver(self.config.resolve, self.config.allow_private)
        connector = aiohttp.TCPConnector(
            limit=self.config.pool_size,
            limit_per_host=4,
            resolver=resolver,
            use_dns_cache=False,
            enable_cleanup_closed=True,
        )
        timeout = aiohttp.ClientTimeout(
            total=self.config.total_timeout,
            connect=self.config.connect_timeout,
            sock_read=self.config.read_timeout,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=timeout,
            headers={"User-Agent": self.config.user_agent, "Accept": "text/html,*/*;q=0.1"},
            auto_decompress=True,
            raise_for_status=False,
            cookie_jar=aiohttp.DummyCookieJar(),
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def fetch(self, url: str, kind: str = "page") -> FetchResult:
        """Fetch one URL; every failure is folded into the result."""
        if self._session is None:
            await self.start()
        assert self._session is not None
        started = time.monotonic()
        result = FetchResult(url=url, fetched_at=time.time())
        try:
            self._check_literal_address(url)
            if kind == "robots":
                await self._fetch_robots(url, result)
            else:
                await self._fetch_page(url, result)
        except BlockedAddress as exc:
            result.outcome, result.reason = "blocked", str(exc)
        except aiohttp.ClientConnectorError as exc:
            cause = exc.os_error if isinstance(exc.os_error, BlockedAddress) else None
            if cause is not None:
                result.outcome, result.reason = "blocked", str(cause)
            else:
                result.outcome, result.reason = "error", f"connect: {exc.os_error or exc}"
        except TimeoutError:
            result.outcome, result.reason = "error", "timeout"
        except aiohttp.ClientPayloadError as exc:
            result.outcome, result.reason = "error", f"payload: {exc}"
        except aiohttp.ClientError as exc:
            result.outcome, result.reason = "error", f"{type(exc).__name__}: {exc}"
        except (OSError, ValueError, UnicodeError) as exc:
            result.outcome, result.reason = "error", f"{type(exc).__name__}: {exc}"
        if result.outcome in ("error", "blocked"):
            result.status = 0
        result.elapsed_ms = (time.monotonic() - started) * 1000.0
        return result

    def _check_literal_address(self, url: str) -> None:
        """aiohttp skips the resolver for IP-literal hosts, so guard those here."""
        if self.config.allow_private:
            return
        host = (urlsplit(url).hostname or "").strip("[]")
        try:
            ipaddress.ip_address(host)
        except ValueError:
            return
        if not is_public_address(host):
            raise BlockedAddress(
                f"{host} is a non-public address "
                "(private targets are off; --allow-private lifts this)"
            )

    async def _read_capped(self, response: aiohttp.ClientResponse, cap: int) -> tuple[bytes, bool]:
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.content.iter_chunked(65536):
            room = cap - size
            if len(chunk) > room:
                chunks.append(chunk[:room])
                return b"".join(chunks), True
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks), False

    @staticmethod
    def _peer_ip(response: aiohttp.ClientResponse) -> str | None:
        connection = response.connection
        transport = connection.transport if connection is not None else None
        peer: Any = transport.get_extra_info("peername") if transport is not None else None
        return str(peer[0]) if peer else None

    async def _fetch_page(self, url: str, result: FetchResult) -> None:
        assert self._session is not None
        async with self._session.get(url, allow_redirects=False) as response:
            result.status = response.status
            result.ip = self._peer_ip(response)
            result.headers = [
                (k.decode("latin-1"), v.decode("latin-1")) for k, v in response.raw_headers
            ]
            result.content_type = response.headers.get("Content-Type", "")
            result.retry_after = parse_retry_after(response.headers.get("Retry-After"))
            if 300 <= response.status < 400 and response.status != 304:
                location = response.headers.get("Location")
                result.location = location
                result.outcome = "redirect"
                result.reason = (
                    f"redirect to {location}" if location else "redirect without Location"
                )
                return
            if response.status >= 400:
                result.outcome, result.reason = "http-error", f"HTTP {response.status}"
                return
            mime = result.content_type.split(";", 1)[0].strip().lower()
            if mime and mime not in HTML_TYPES:
                result.outcome, result.reason = "not-html", f"content type {mime}"
                return
            result.body, result.truncated = await self._read_capped(
                response, self.config.max_body_bytes
            )
            result.outcome = "fetched"
            if result.truncated:
                result.reason = f"body over {self.config.max_body_bytes} bytes, truncated"

    async def _fetch_robots(self, url: str, result: FetchResult) -> None:
        assert self._session is not None
        async with self._session.get(url, allow_redirects=True, max_redirects=5) as response:
            result.status = response.status
            result.ip = self._peer_ip(response)
            result.retry_after = parse_retry_after(response.headers.get("Retry-After"))
            result.outcome = "robots"
            if 200 <= response.status < 300:
                result.body, result.truncated = await self._read_capped(
                    response, self.config.max_robots_bytes
                )
            result.reason = f"robots.txt HTTP {response.status}"
