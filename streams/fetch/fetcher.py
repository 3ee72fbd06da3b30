"""`Fetcher`: one pooled aiohttp session per worker, with the guards a crawler needs.

No Kafka here: the fetch stage hands a URL in and gets a `FetchResult` back, and
whatever a server does (hang, trickle, reset, lie about its content, send a bomb)
becomes a result with an outcome and a reason, never an exception. Every fetch
ends within ``total_timeout``; every body held in memory is at most its cap.

* **Timeouts.** connect (TCP), first byte (request start → complete response
  headers, so headers trickled a byte at a time can't hold a slot), read (the
  longest silence, headers or body) and total (the whole fetch, redirects of
  robots.txt included). Each timeout says which it was in the reason.
* **Names and the SSRF guard.** Names go through `GuardedResolver`
  (streams/fetch/resolver.py), which checks every address it hands out;
  IP-literal hosts, which aiohttp never resolves, are checked here
  (`Fetcher.check_address`) against the same guard (streams/fetch/guard.py).
* **Redirects.** Pages don't follow them: the target goes back through url-filter
  and url-seen like any link, so it is polite and deduplicated. robots.txt follows
  up to 5 hops (RFC 9309), followed here hop by hop so each hop is guarded.
* **Bodies.** The content type is looked up in the handler registry
  (streams/fetch/handlers.py) before any of the body is read; unknown types are
  refused unread. A handler reads through `CappedResponse`
  (streams/fetch/response.py), which decodes Content-Encoding with bounded output
  (streams/core/decode.py).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Mapping
from typing import Any

import aiohttp
from yarl import URL

from streams.core.decode import ContentDecodeError, accept_encoding
from streams.core.urls import resolve as resolve_url
from streams.fetch.config import FetchConfig
from streams.fetch.guard import AddressGuard, BlockedAddress, literal_address
from streams.fetch.handlers import DEFAULT_HANDLERS, FetchResult, HandlerRegistry, normalize_type
from streams.fetch.resolver import DnsError, GuardedResolver, make_dns_backend
from streams.fetch.response import CappedResponse, Progress, parse_retry_after

__all__ = ["Fetcher"]


class _FetchTimeout(Exception):
    """One of our own timers fired; the message is the crawl-log reason."""


_SITEMAP_ACCEPT = "application/xml, text/xml;q=0.9, application/x-gzip;q=0.8, */*;q=0.1"


def _is_redirect(status: int) -> bool:
    return 300 <= status < 400 and status != 304


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
            auto_decompress=False,  # decoded in CappedResponse.read, bounded by the cap
            raise_for_status=False,
            cookie_jar=aiohttp.DummyCookieJar(),
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._resolver is not None:
            await self._resolver.close()

    async def fetch(  # noqa: C901 - each failure of a fetch folded into its one result
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
        progress = Progress()
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

    def _read_timeout_reason(self, progress: Progress) -> str:
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
        self, url: str, progress: Progress, headers: Mapping[str, str] | None = None
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
    def _done(response: aiohttp.ClientResponse, view: CappedResponse | None) -> None:
        """Pool the connection only if its body was read to the end; else drop it."""
        if view is not None and view.complete:
            response.release()
        else:
            response.close()

    async def _fetch_page(
        self,
        url: str,
        result: FetchResult,
        progress: Progress,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        response = await self._open(url, progress, headers)
        view: CappedResponse | None = None
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
            view = CappedResponse(response, url, self.config.max_body_bytes, progress)
            await handler(view, result)
            if view.over_wire_cap:
                result.reason = (
                    f"compressed body over {view.wire_bytes} bytes for {len(result.body)} "
                    "decoded, truncated"
                )
        finally:
            self._done(response, view)

    async def _fetch_sitemap(self, url: str, result: FetchResult, progress: Progress) -> None:
        """A sitemap: any content type (servers label them every way), read to its cap.

        Redirects are reported like a page's, so the target is checked and queued
        politely; a .xml.gz stays compressed here and is inflated, bounded, by
        streams.core.sitemaps.
        """
        response = await self._open(url, progress, {"Accept": _SITEMAP_ACCEPT})
        view: CappedResponse | None = None
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
            view = CappedResponse(response, url, self.config.max_sitemap_bytes, progress)
            body = await view.read()
            result.body, result.truncated = body.data, body.truncated
            result.outcome = "sitemap"
            if body.truncated:
                result.reason = f"sitemap over {self.config.max_sitemap_bytes} bytes, truncated"
        finally:
            self._done(response, view)

    async def _fetch_robots(self, url: str, result: FetchResult, progress: Progress) -> None:
        """robots.txt, following up to max_robots_redirects hops, each one guarded."""
        result.outcome = "robots"
        current, seen, hops = url, {url}, 0
        while True:
            response = await self._open(current, progress)
            view: CappedResponse | None = None
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
                    view = CappedResponse(response, current, self.config.max_robots_bytes, progress)
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
