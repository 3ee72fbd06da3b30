"""HTTP fetching: one pooled aiohttp session, with the guards a crawler needs.

No Kafka here: the fetch stage hands a URL in and gets a `FetchResult` back, and
whatever a server does (hang, trickle, reset, lie about its content, send a bomb)
becomes a result with an outcome and a reason, never an exception. Every fetch
ends within ``total_timeout``; every body held in memory is at most its cap.

* **Timeouts.** connect (TCP), first byte (request start → complete response
  headers, so headers trickled a byte at a time can't hold a slot), read (the
  longest silence, headers or body) and total (the whole fetch, redirects of
  robots.txt included). Each timeout says which it was in the reason.
* **Names and the SSRF guard.** `GuardedResolver`: ``--resolve`` overrides first,
  then a cache that honours the answer's TTL (aiodns when installed; the system
  resolver with a fixed TTL otherwise), failures cached with a growing backoff and
  recorded as "dns-error". Every address, of every hop, is checked against the
  loopback / private / link-local / multicast / reserved ranges unless private
  targets are allowed, *before* a socket is opened (verdicts memoised per
  address, never per name); IP-literal hosts (which
  aiohttp never resolves, including legacy forms such as ``http://2130706433/``)
  are checked in `Fetcher` itself.
* **Redirects.** Pages don't follow them: the target goes back through url-filter
  and url-seen like any link, so it is polite and deduplicated. robots.txt follows
  up to 5 hops (RFC 9309), followed here hop by hop so each hop is guarded.
* **Bodies.** The content type is looked up in the handler registry
  (streams/core/handlers.py) before any of the body is read; unknown types are
  refused unread. Content-Encoding is decoded here, not by aiohttp, with every
  decompression call bounded by the room left under the cap, so a 1 GiB gzip,
  deflate, brotli or zstd bomb stops at the cap. (aiohttp 3.14 bounds its own
  decoder too: 5.7 MB peak for a 5 MB cap, measured here; but older releases, which
  pyproject's aiohttp>=3.9 allows, inflate each network chunk whole, and it calls
  whichever brotli binding is installed, bounded or not. Here a brotli binding
  without an output limit is never used, nor "br" advertised.)
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import re
import socket
import sys
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Protocol

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from streams.core.handlers import (
    DEFAULT_HANDLERS,
    HTML_TYPES,
    Body,
    FetchResult,
    HandlerRegistry,
    normalize_type,
)
from streams.core.urls import resolve as resolve_url

__all__ = [
    "HTML_TYPES",
    "BlockedAddress",
    "ContentDecodeError",
    "DnsAnswer",
    "DnsError",
    "FetchConfig",
    "FetchResult",
    "Fetcher",
    "GuardedResolver",
    "accept_encoding",
    "address_class",
    "decode_bounded",
    "is_public_address",
    "literal_address",
    "make_dns_backend",
    "parse_retry_after",
]

# -- the SSRF guard ------------------------------------------------------------------------


class BlockedAddress(OSError):
    """The host resolved to an address the crawler must not contact."""


def address_class(address: str) -> str | None:
    """Why an address is not public ("loopback", "private", ...), or None if it is."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return "unparseable"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for name, hit in (
        ("unspecified", ip.is_unspecified),
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("reserved", ip.is_reserved),
        ("private", ip.is_private),
        ("non-global", not ip.is_global),
    ):
        if hit:
            return name
    return None


def is_public_address(address: str) -> bool:
    """True for globally routable unicast addresses only."""
    return address_class(address) is None


_LEGACY_IPV4 = re.compile(r"[0-9a-fA-FxX.]+")


@lru_cache(maxsize=4096)
def literal_address(host: str) -> str | None:
    """The address an IP-literal host names, or None for a host name.

    Legacy IPv4 spellings count (``2130706433``, ``0x7f.1``, ``0177.0.0.1``): aiohttp
    takes them for literals and skips the resolver, and the C library turns them
    into 127.0.0.1 when connecting, so the guard must read them the same way.
    Memoised (a pure function of the host; ~4.5 µs a fetch, and a crawl fetches
    each host many times).
    """
    host = host.strip("[]")
    try:
        return str(ipaddress.ip_address(host.split("%", 1)[0]))
    except ValueError:
        pass
    if host and _LEGACY_IPV4.fullmatch(host) and any(c.isdigit() for c in host):
        try:
            return socket.inet_ntoa(socket.inet_aton(host))
        except OSError:
            return None
    return None


class AddressGuard:
    """Refuses non-public addresses unless private targets are on (or allow-listed).

    Each address's verdict is memoised: classifying one costs ~45 µs (ipaddress's
    range properties and the allow-list), and an IP-literal host is checked on every
    fetch. The memo is keyed by the *address*, never by a host name, so every
    address a name resolves to is still checked each time it is handed out: a name
    that rebinds to a private address meets that address's own verdict.
    """

    #: Verdicts kept before the memo starts over (a crawl meets few distinct addresses).
    MEMO_SIZE = 65536

    def __init__(self, allow_private: bool, allowed_networks: Iterable[str] = ()) -> None:
        self.allow_private = allow_private
        self.allowed = [ipaddress.ip_network(n, strict=False) for n in allowed_networks]
        #: address → why it is refused, or "" when it may be contacted.
        self._verdicts: dict[str, str] = {}

    def refusal(self, address: str) -> str:
        """Why address is refused ("loopback", "private", ...), or "" if it is allowed."""
        why = self._verdicts.get(address)
        if why is None:
            why = self._classify(address)
            if len(self._verdicts) >= self.MEMO_SIZE:
                self._verdicts.clear()
            self._verdicts[address] = why
        return why

    def _classify(self, address: str) -> str:
        why = address_class(address)
        if why is None:
            return ""
        with contextlib.suppress(ValueError):
            ip = ipaddress.ip_address(address.split("%", 1)[0])
            if any(ip in net for net in self.allowed):
                return ""
        return why

    def check(self, host: str, address: str) -> None:
        if self.allow_private:
            return
        why = self.refusal(address)
        if not why:
            return
        shown = host if host == address else f"{host} resolves to {address}, which"
        raise BlockedAddress(
            f"{shown} is a {why} address (private targets are off; --allow-private lifts this)"
        )


# -- DNS -----------------------------------------------------------------------------------


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


def _split_override(override: str) -> tuple[str, int | None]:
    """'1.2.3.4' | '1.2.3.4:8080' | '::1' | '[::1]:8080' → (address, port)."""
    if override.startswith("["):
        addr, _, rest = override[1:].partition("]")
        return addr, int(rest[1:]) if rest.startswith(":") and rest[1:] else None
    if override.count(":") == 1:
        addr, _, port = override.partition(":")
        return addr, int(port) if port else None
    return override, None


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
            addr, override_port = _split_override(override)
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


# -- content decoding ------------------------------------------------------------------------


class ContentDecodeError(ValueError):
    """A Content-Encoding we can't (or won't) decode, or a corrupt compressed stream."""


#: More members than this in one gzip body is an attack (aiohttp draws the line there too).
MAX_GZIP_MEMBERS = 1024


class _Decoder(Protocol):
    def decode(self, data: bytes, limit: int) -> bytes:
        """Decode what `data` holds, returning at most `limit` (≥ 1) bytes.

        Fewer than `limit` bytes back means all input was consumed; exactly `limit`
        means there may be more, and the caller (over its cap) stops.
        """
        ...

    def finish(self) -> None:
        """At end of input: raise if the compressed stream was cut short."""
        ...


class _ZlibDecoder:
    """gzip (any number of members up to a bound) and deflate (zlib-wrapped or raw)."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self._gzip = encoding in ("gzip", "x-gzip")
        self._d: Any = None
        self._members = 0
        self._done = False  # trailing garbage after the last member: ignored, as browsers do

    def _start(self, first: bytes) -> None:
        if self._gzip:
            wbits = 16 + zlib.MAX_WBITS
        else:  # RFC 9110's deflate is zlib-wrapped; many servers send raw deflate
            wbits = zlib.MAX_WBITS if first[0] & 0x0F == 8 else -zlib.MAX_WBITS
        self._d = zlib.decompressobj(wbits)
        self._members += 1
        if self._members > MAX_GZIP_MEMBERS:
            raise ContentDecodeError(f"{self.encoding}: more than {MAX_GZIP_MEMBERS} members")

    def decode(self, data: bytes, limit: int) -> bytes:
        out: list[bytes] = []
        produced = 0
        while data and not self._done:
            if self._d is None:
                if self._members and not data.startswith(b"\x1f\x8b"):
                    self._done = True  # not another member: trailing bytes
                    break
                self._start(data)
            try:
                piece = self._d.decompress(data, limit - produced)
            except zlib.error as exc:
                raise ContentDecodeError(f"{self.encoding}: {exc}") from exc
            out.append(piece)
            produced += len(piece)
            if produced >= limit:
                break
            if self._d.eof:
                data = self._d.unused_data
                if self._gzip:
                    self._d = None  # another member may follow, now or in a later chunk
                else:
                    self._done = True
                continue
            data = self._d.unconsumed_tail
        return b"".join(out)

    def finish(self) -> None:
        if self._d is not None and not self._d.eof:
            raise ContentDecodeError(f"{self.encoding}: stream ended before its end")


class _BrotliDecoder:
    """brotli through a binding whose decoder takes an output limit (Brotli/brotlicffi ≥ 1.2)."""

    def __init__(self, make: Callable[[], Any], method: str) -> None:
        self._d = make()
        self._call = getattr(self._d, method)

    def decode(self, data: bytes, limit: int) -> bytes:
        try:
            return bytes(self._call(data, output_buffer_limit=limit))
        except Exception as exc:  # each binding has its own error class
            raise ContentDecodeError(f"br: {exc}") from exc

    def finish(self) -> None:
        if not self._d.is_finished():
            raise ContentDecodeError("br: stream ended before its end")


class _ZstdDecoder:
    """zstd (Python 3.14's compression.zstd or backports.zstd), frame after frame."""

    def __init__(self, module: Any) -> None:
        self._module = module
        self._d: Any = None
        self._frames = 0

    def decode(self, data: bytes, limit: int) -> bytes:
        out: list[bytes] = []
        produced = 0
        while data:
            if self._d is None:
                self._frames += 1
                if self._frames > MAX_GZIP_MEMBERS:
                    raise ContentDecodeError(f"zstd: more than {MAX_GZIP_MEMBERS} frames")
                self._d = self._module.ZstdDecompressor()
            try:
                piece = self._d.decompress(data, limit - produced)
            except self._module.ZstdError as exc:
                raise ContentDecodeError(f"zstd: {exc}") from exc
            out.append(piece)
            produced += len(piece)
            if produced >= limit:
                break
            if self._d.eof:
                data = self._d.unused_data
                self._d = None  # another frame may follow, now or in a later chunk
                continue
            data = b""
        return b"".join(out)

    def finish(self) -> None:
        if self._d is not None and not self._d.eof:
            raise ContentDecodeError("zstd: stream ended before its end")


def _bounded_brotli() -> tuple[Callable[[], Any], str] | None:
    """A brotli decoder factory whose output can be bounded, or None.

    brotlipy (which shares the import name ``brotli``) inflates each input whole, so a
    2 KB input can become 1 GiB in one call: such a binding is not used at all.
    """
    for name, method in (("brotlicffi", "decompress"), ("brotli", "process")):
        try:
            module = __import__(name)
            probe = module.Decompressor()
            getattr(probe, method)(b"", output_buffer_limit=1)
            probe.can_accept_more_data()
        except Exception:
            continue
        return module.Decompressor, method
    return None


def _zstd_module() -> Any:
    for name in ("compression.zstd", "backports.zstd"):
        try:
            return __import__(name, fromlist=["ZstdDecompressor"])
        except ImportError:
            continue
    return None


_BROTLI = _bounded_brotli()
_ZSTD = _zstd_module()


def accept_encoding() -> str:
    """The encodings this fetcher can decode with bounded output, for Accept-Encoding."""
    codings = ["gzip", "deflate"]
    if _BROTLI is not None:
        codings.append("br")
    if _ZSTD is not None:
        codings.append("zstd")
    return ", ".join(codings)


def _decoder_for(content_encoding: str) -> _Decoder | None:
    """The decoder for a Content-Encoding header (None: identity); raises if we won't."""
    if not content_encoding:  # most bodies: no header at all
        return None
    codings = [c.strip().lower() for c in content_encoding.split(",")]
    codings = [c for c in codings if c and c != "identity"]
    if not codings:
        return None
    if len(codings) > 1:
        raise ContentDecodeError(f"stacked content-encodings {', '.join(codings)} not supported")
    coding = codings[0]
    if coding in ("gzip", "x-gzip", "deflate"):
        return _ZlibDecoder(coding)
    if coding == "br" and _BROTLI is not None:
        return _BrotliDecoder(*_BROTLI)
    if coding == "zstd" and _ZSTD is not None:
        return _ZstdDecoder(_ZSTD)
    raise ContentDecodeError(f"unsupported content-encoding {coding!r}")


def decode_bounded(coding: str, data: bytes, cap: int) -> tuple[bytes, bool]:
    """Decode a whole compressed payload held in memory with the same bounded decoders
    as response bodies: (at most `cap` bytes, truncated?). For files that are
    compressed themselves (a sitemap.xml.gz), not by Content-Encoding; a bomb stops
    at the cap. Raises ContentDecodeError for a corrupt or unsupported stream."""
    decoder = _decoder_for(coding)
    if decoder is None:
        return data[:cap], len(data) > cap
    out = decoder.decode(data, cap + 1)
    if len(out) > cap:
        return out[:cap], True
    decoder.finish()
    return out, False


# -- results and configuration -----------------------------------------------------------------


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (delta or HTTP-date); None if unusable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        from email.utils import parsedate_to_datetime

        when = parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


@dataclass
class FetchConfig:
    """Everything a Fetcher is told; defaults suit the open web, tests shrink them."""

    user_agent: str = "SeineBot/0.1"
    #: TCP connect, per attempt.
    connect_timeout: float = 5.0
    #: Longest silence while waiting for headers or body bytes.
    read_timeout: float = 10.0
    #: The whole fetch, redirects of robots.txt included.
    total_timeout: float = 30.0
    #: Request start → complete response headers; None means connect + read.
    first_byte_timeout: float | None = None
    max_body_bytes: int = 5 * 1024 * 1024
    max_robots_bytes: int = 512 * 1024
    max_robots_redirects: int = 5
    #: A sitemap as read off the wire (a .xml.gz is inflated later, to its own cap).
    max_sitemap_bytes: int = 50 * 1024 * 1024
    allow_private: bool = False
    #: Networks reachable even when private targets are off (e.g. one intranet range).
    allowed_networks: tuple[str, ...] = ()
    resolve: dict[str, str] = field(default_factory=dict)
    pool_size: int = 512
    #: "auto" (aiodns when installed), "aiodns" or "system".
    dns_backend: str = "auto"
    dns_servers: tuple[str, ...] = ()
    #: One lookup; None means connect_timeout.
    dns_timeout: float | None = None
    #: Answers are cached for their TTL, clamped to [min, max]; system answers for default.
    dns_min_ttl: float = 5.0
    dns_max_ttl: float = 3600.0
    dns_default_ttl: float = 300.0
    #: A failed name is not asked again for this long, doubling per failure up to the max.
    dns_negative_ttl: float = 5.0
    dns_max_negative_ttl: float = 300.0


# -- the fetcher -----------------------------------------------------------------------------


class _FetchTimeout(Exception):
    """One of our own timers fired; the message is the crawl-log reason."""


@dataclass
class _Progress:
    """Where a fetch is, so a failure can say what timed out and keep partial bytes."""

    phase: str = "connect"
    partial: list[bytes] = field(default_factory=list)
    wire_bytes: int = 0


_SITEMAP_ACCEPT = "application/xml, text/xml;q=0.9, application/x-gzip;q=0.8, */*;q=0.1"


def _is_redirect(status: int) -> bool:
    return 300 <= status < 400 and status != 304


class _Response:
    """The `ResponseView` handlers get: one read, decoded, capped."""

    def __init__(
        self, raw: aiohttp.ClientResponse, url: str, max_body_bytes: int, progress: _Progress
    ) -> None:
        self._raw = raw
        self.url = url
        self.status = raw.status
        self.content_type = raw.headers.get("Content-Type", "")
        self.mime = normalize_type(self.content_type)
        self.headers: Mapping[str, str] = raw.headers
        self.max_body_bytes = max_body_bytes
        self._progress = progress
        self.truncated = False
        self.complete = False  # read to the end: the connection may go back to the pool
        self.over_wire_cap = False
        self._read = False

    @property
    def wire_bytes(self) -> int:
        return self._progress.wire_bytes

    async def read(self, cap: int | None = None) -> Body:
        if self._read:
            raise RuntimeError("the body can be read once")
        self._read = True
        cap = self.max_body_bytes if cap is None else max(0, cap)
        self._progress.phase = "body"
        decoder = _decoder_for(self._raw.headers.get("Content-Encoding", ""))
        # Compressed input far beyond the cap can only be a stream that decodes to
        # (almost) nothing, e.g. endless empty gzip members: stop reading it too.
        wire_cap = cap + cap // 8 + 65536
        out = self._progress.partial
        size = 0
        progress = self._progress
        content = self._raw.content
        if decoder is None and content.is_eof():
            # The whole body came with the head (most pages on a fast link): take it
            # as it is, without the chunk iterator; the outcome is the loop's.
            data = content.read_nowait()
            progress.wire_bytes += len(data)
            if len(data) > cap:
                out.append(data[:cap])
                self.truncated = True
            else:
                out.append(data)
                self.complete = True
            return Body(b"".join(out), self.truncated)
        async for chunk in content.iter_chunked(65536):
            progress.wire_bytes += len(chunk)
            data = chunk if decoder is None else decoder.decode(chunk, cap - size + 1)
            if size + len(data) > cap:
                out.append(data[: cap - size])
                size = cap
                self.truncated = True
                break
            out.append(data)
            size += len(data)
            if decoder is not None and progress.wire_bytes > wire_cap:
                self.truncated = self.over_wire_cap = True
                break
        else:
            if decoder is not None and progress.wire_bytes:
                decoder.finish()
            self.complete = True
        return Body(b"".join(out), self.truncated)


class Fetcher:
    """An aiohttp session shared by every fetch of a worker."""

    def __init__(
        self,
        config: FetchConfig,
        handlers: HandlerRegistry | None = None,
        resolver: GuardedResolver | None = None,
    ) -> None:
        self.config = config
        self.handlers = handlers if handlers is not None else DEFAULT_HANDLERS
        self.guard = AddressGuard(config.allow_private, config.allowed_networks)
        self._resolver = resolver
        self._session: aiohttp.ClientSession | None = None

    @property
    def first_byte_timeout(self) -> float:
        c = self.config
        return c.first_byte_timeout or c.connect_timeout + c.read_timeout

    @property
    def resolver(self) -> GuardedResolver:
        if self._resolver is None:
            c = self.config
            dns_timeout = c.dns_timeout or c.connect_timeout
            self._resolver = GuardedResolver(
                c.resolve,
                c.allow_private,
                backend=make_dns_backend(c.dns_backend, c.dns_servers, dns_timeout),
                allowed_networks=c.allowed_networks,
                min_ttl=c.dns_min_ttl,
                max_ttl=c.dns_max_ttl,
                default_ttl=c.dns_default_ttl,
                negative_ttl=c.dns_negative_ttl,
                max_negative_ttl=c.dns_max_negative_ttl,
                timeout=dns_timeout,
            )
        return self._resolver

    async def start(self) -> None:
        if self._session is not None:
            return
        connector = aiohttp.TCPConnector(
            limit=self.config.pool_size,
            limit_per_host=4,
            resolver=self.resolver,
            use_dns_cache=False,  # the resolver caches, by TTL, and guards every answer
            enable_cleanup_closed=sys.version_info < (3, 12, 7),  # aborted TLS transports leak
        )
        # total is ours (asyncio.timeout in fetch), so that robots redirects share it;
        # connect=None: DNS is bounded by the resolver, TCP by sock_connect.
        timeout = aiohttp.ClientTimeout(
            total=None,
            connect=None,
            sock_connect=self.config.connect_timeout,
            sock_read=self.config.read_timeout,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=timeout,
            headers={
                "User-Agent": self.config.user_agent,
                "Accept": "text/html,application/xhtml+xml;q=0.9,*/*;q=0.1",
                "Accept-Encoding": accept_encoding(),
            },
            auto_decompress=False,  # decoded in _Response.read, bounded by the cap
            raise_for_status=False,
            cookie_jar=aiohttp.DummyCookieJar(),
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._resolver is not None:
            await self._resolver.close()

    async def fetch(
        self, url: str, kind: str = "page", headers: Mapping[str, str] | None = None
    ) -> FetchResult:
        """Fetch one URL; every failure is folded into the result, within total_timeout.

        ``kind``: "page", "robots" or "sitemap". ``headers``: extra request headers,
        e.g. If-None-Match / If-Modified-Since for a revisit (a 304 answer becomes
        the outcome "unchanged", without a body).
        """
        if self._session is None:
            await self.start()
        started = time.monotonic()
        result = FetchResult(url=url, fetched_at=time.time())
        progress = _Progress()
        total = asyncio.timeout(self.config.total_timeout)
        try:
            async with total:
                if kind == "robots":
                    await self._fetch_robots(url, result, progress)
                elif kind == "sitemap":
                    await self._fetch_sitemap(url, result, progress)
                else:
                    await self._fetch_page(url, result, progress, headers)
        except BlockedAddress as exc:
            result.outcome, result.reason = "blocked", str(exc)
        except _FetchTimeout as exc:
            result.outcome, result.reason = "error", str(exc)
        except aiohttp.ConnectionTimeoutError:
            result.outcome = "error"
            result.reason = f"timeout: connect ({self.config.connect_timeout:g} s)"
        except aiohttp.ServerTimeoutError:
            result.outcome, result.reason = "error", self._read_timeout_reason(progress)
        except TimeoutError:
            result.outcome = "error"
            if total.expired():
                result.reason = f"timeout: total ({self.config.total_timeout:g} s)"
            else:
                result.reason = self._read_timeout_reason(progress)
        except aiohttp.ClientConnectorError as exc:
            cause = exc.os_error
            if isinstance(cause, BlockedAddress):
                result.outcome, result.reason = "blocked", str(cause)
            elif isinstance(cause, DnsError) or isinstance(exc, _DNS_ERRORS):
                result.outcome, result.reason = "dns-error", f"dns: {cause or exc}"
            else:
                result.outcome, result.reason = "error", f"connect: {cause or exc}"
        except ContentDecodeError as exc:
            result.outcome, result.reason = "error", f"content-encoding: {exc}"
        except aiohttp.ClientPayloadError as exc:
            result.outcome, result.reason = "error", f"payload: {_short(exc)}"
        except aiohttp.ClientResponseError as exc:  # the parser refused the response head
            result.outcome, result.reason = "error", f"malformed response: {_short(exc.message)}"
        except aiohttp.ServerDisconnectedError:
            result.outcome, result.reason = "error", "disconnected: closed without a response"
        except aiohttp.ClientOSError as exc:
            result.outcome, result.reason = "error", f"connection: {_short(exc)}"
        except aiohttp.ClientError as exc:
            result.outcome, result.reason = "error", f"{type(exc).__name__}: {_short(exc)}"
        except (OSError, ValueError, UnicodeError) as exc:
            result.outcome, result.reason = "error", f"{type(exc).__name__}: {_short(exc)}"
        except Exception as exc:  # a handler's bug: record it, keep the stage running
            result.outcome = "error"
            result.reason = f"unexpected {type(exc).__name__}: {_short(exc)}"
        result.wire_bytes = progress.wire_bytes
        if result.outcome in ("error", "blocked", "dns-error"):
            result.status = 0
            if progress.partial and not result.body:
                result.body = b"".join(progress.partial)
        result.elapsed_ms = (time.monotonic() - started) * 1000.0
        return result

    def _read_timeout_reason(self, progress: _Progress) -> str:
        if progress.phase == "body":
            return f"timeout: read (body stalled for {self.config.read_timeout:g} s)"
        return f"timeout: first byte (no response within {self.config.read_timeout:g} s)"

    def check_address(self, url: str | URL) -> URL:
        """aiohttp skips the resolver for IP-literal hosts, so guard those here.

        The URL is parsed by yarl, as aiohttp will parse it, so that no difference
        between two URL parsers can hide a literal from the guard.
        """
        target = url if isinstance(url, URL) else URL(url)
        host = target.host or ""
        address = literal_address(host)
        if address is not None:
            self.guard.check(host, address)
        return target

    async def _open(
        self, url: str, progress: _Progress, headers: Mapping[str, str] | None = None
    ) -> aiohttp.ClientResponse:
        """Send the request and wait for the response head, within first_byte_timeout."""
        assert self._session is not None
        target = self.check_address(url)
        progress.phase = "headers"
        timer = asyncio.timeout(self.first_byte_timeout)
        try:
            async with timer:
                return await self._session.get(target, allow_redirects=False, headers=headers)
        except TimeoutError:
            if timer.expired():
                raise _FetchTimeout(
                    f"timeout: first byte (headers incomplete after {self.first_byte_timeout:g} s)"
                ) from None
            raise

    @staticmethod
    def _peer_ip(response: aiohttp.ClientResponse) -> str | None:
        connection = response.connection
        transport = connection.transport if connection is not None else None
        peer: Any = transport.get_extra_info("peername") if transport is not None else None
        return str(peer[0]) if peer else None

    @staticmethod
    def _done(response: aiohttp.ClientResponse, view: _Response | None) -> None:
        """Pool the connection only if its body was read to the end; else drop it."""
        if view is not None and view.complete:
            response.release()
        else:
            response.close()

    async def _fetch_page(
        self,
        url: str,
        result: FetchResult,
        progress: _Progress,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        response = await self._open(url, progress, headers)
        view: _Response | None = None
        try:
            result.status = response.status
            result.ip = self._peer_ip(response)
            result.headers = [
                (k.decode("latin-1"), v.decode("latin-1")) for k, v in response.raw_headers
            ]
            result.content_type = response.headers.get("Content-Type", "")
            result.retry_after = parse_retry_after(response.headers.get("Retry-After"))
            if _is_redirect(response.status):
                location = response.headers.get("Location")
                result.location = location
                result.outcome = "redirect"
                result.reason = (
                    f"redirect to {location}" if location else "redirect without Location"
                )
                return
            if response.status == 304:
                # only ever an answer to our conditional GET: the stored copy is current
                result.outcome, result.reason = "unchanged", "HTTP 304 not modified"
                return
            if response.status >= 400:
                result.outcome, result.reason = "http-error", f"HTTP {response.status}"
                if result.retry_after is not None:
                    result.reason += f", Retry-After {result.retry_after:g} s"
                return
            mime = normalize_type(result.content_type)
            handler = self.handlers.lookup(mime)
            if handler is None:
                result.outcome, result.reason = "not-html", f"content type {mime}"
                return
            view = _Response(response, url, self.config.max_body_bytes, progress)
            await handler(view, result)
            if view.over_wire_cap:
                result.reason = (
                    f"compressed body over {view.wire_bytes} bytes for {len(result.body)} "
                    "decoded, truncated"
                )
        finally:
            self._done(response, view)

    async def _fetch_sitemap(self, url: str, result: FetchResult, progress: _Progress) -> None:
        """A sitemap: any content type (servers label them every way), read to its cap.

        Redirects are reported like a page's, so the target is checked and queued
        politely; a .xml.gz stays compressed here and is inflated, bounded, by
        streams.core.sitemaps.
        """
        response = await self._open(url, progress, {"Accept": _SITEMAP_ACCEPT})
        view: _Response | None = None
        try:
            result.status = response.status
            result.ip = self._peer_ip(response)
            result.content_type = response.headers.get("Content-Type", "")
            result.retry_after = parse_retry_after(response.headers.get("Retry-After"))
            if _is_redirect(response.status):
                result.location = response.headers.get("Location")
                result.outcome = "redirect"
                result.reason = f"redirect to {result.location}"
                return
            if not 200 <= response.status < 300:
                result.outcome, result.reason = "http-error", f"sitemap HTTP {response.status}"
                return
            view = _Response(response, url, self.config.max_sitemap_bytes, progress)
            body = await view.read()
            result.body, result.truncated = body.data, body.truncated
            result.outcome = "sitemap"
            if body.truncated:
                result.reason = f"sitemap over {self.config.max_sitemap_bytes} bytes, truncated"
        finally:
            self._done(response, view)

    async def _fetch_robots(self, url: str, result: FetchResult, progress: _Progress) -> None:
        """robots.txt, following up to max_robots_redirects hops, each one guarded."""
        result.outcome = "robots"
        current, seen, hops = url, {url}, 0
        while True:
            response = await self._open(current, progress)
            view: _Response | None = None
            try:
                result.status = response.status
                result.ip = self._peer_ip(response)
                result.retry_after = parse_retry_after(response.headers.get("Retry-After"))
                if _is_redirect(response.status):
                    location = response.headers.get("Location")
                    target = resolve_url(current, location) if location else None
                    if target is None:
                        result.reason = f"robots.txt redirect to {location!r}: not followed"
                        return
                    hops += 1
                    if hops > self.config.max_robots_redirects:
                        result.reason = (
                            f"robots.txt: more than {self.config.max_robots_redirects} redirects"
                        )
                        return
                    if target in seen:
                        result.reason = f"robots.txt: redirect loop at {target}"
                        return
                    seen.add(target)
                    current = target
                    result.location = target
                    continue
                if 200 <= response.status < 300:
                    view = _Response(response, current, self.config.max_robots_bytes, progress)
                    body = await view.read()
                    result.body, result.truncated = body.data, body.truncated
                result.reason = f"robots.txt HTTP {response.status}" + (
                    f" after {hops} redirect{'s' * (hops > 1)}" if hops else ""
                )
                return
            finally:
                self._done(response, view)


_DNS_ERRORS: tuple[type[BaseException], ...] = tuple(
    cls for cls in (getattr(aiohttp, "ClientConnectorDNSError", None),) if cls is not None
)


def _short(exc: BaseException | str, limit: int = 300) -> str:
    """One line, bounded: parser errors quote the offending bytes over several lines."""
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
