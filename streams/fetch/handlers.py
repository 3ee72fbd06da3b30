"""Fetch handlers, registered by content type: what the fetcher does with a 2xx response.

Why a registry: the crawler indexes HTML, but what to do with other types is a
policy that grows (store PDFs, read image sizes, follow sitemaps). The fetcher
looks the response's media type up here *before* any of the body is read; a type
with no handler is refused as "not-html" without reading a byte, so a 2 GB video
costs one response head. Adding a type is one new module with an async function
and one line::

    register_handler("image/png", handle_png)

A handler gets a read-only view of the response and the `FetchResult` to fill in:
it decides whether to read the body (``await response.read(cap)``, decompressed and
capped, so a handler can't be bombed either) and which outcome to record. Only the
outcome "fetched" goes on to the HTML parser (streams/stages/fetch.py); any other
outcome is logged in the crawl log with its reason and bytes.

Registries are plain objects: the fetcher uses `DEFAULT_HANDLERS` unless given its
own, so a test can register a toy handler in a copy without touching the default.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

HTML_TYPES = ("text/html", "application/xhtml+xml")


@dataclass
class FetchResult:
    """What one fetch did, as the crawl log records it (outcome, reason, status, bytes,
    time) plus what the next stages need (body, headers, redirect target, Retry-After)."""

    url: str
    status: int = 0
    #: fetched | unchanged (304) | sitemap | not-html | http-error | redirect | error |
    #: blocked | dns-error | robots,
    #: or whatever a registered handler records.
    outcome: str = "error"
    reason: str = ""
    headers: list[tuple[str, str]] = field(default_factory=list)
    #: The body as decoded (at most the cap); partial bytes when the fetch failed midway.
    body: bytes = b""
    truncated: bool = False
    elapsed_ms: float = 0.0
    fetched_at: float = 0.0
    ip: str | None = None
    location: str | None = None
    retry_after: float | None = None
    content_type: str = ""
    #: Bytes read off the connection for the body (compressed size when encoded).
    wire_bytes: int = 0


class Body(NamedTuple):
    """A response body as read: at most the cap, decompressed; truncated if there was more."""

    data: bytes
    truncated: bool


class ResponseView(Protocol):
    """What a handler sees of a response (implemented by the fetcher)."""

    url: str
    status: int
    #: The media type, lower-cased, without parameters ("" when the header is missing).
    mime: str
    #: The Content-Type header as sent.
    content_type: str
    #: Case-insensitive response headers.
    headers: Mapping[str, str]
    #: The configured page cap, the default for `read`.
    max_body_bytes: int

    async def read(self, cap: int | None = None) -> Body:
        """The body, decompressed, up to `cap` bytes (default: max_body_bytes); once only."""
        ...


Handler = Callable[[ResponseView, FetchResult], Awaitable[None]]


def normalize_type(content_type: str) -> str:
    """'Text/HTML; charset=UTF-8' → 'text/html'."""
    return content_type.split(";", 1)[0].strip().lower()


class HandlerRegistry:
    """Media type → handler, with 'type/*' wildcards and a fallback for a missing type."""

    def __init__(
        self, handlers: Mapping[str, Handler] | None = None, fallback: Handler | None = None
    ) -> None:
        self._handlers: dict[str, Handler] = {}
        #: Used when the response has no Content-Type at all (HTML by default: the web
        #: serves plenty of untyped pages, and the parser copes with anything).
        self.fallback = fallback
        for content_type, handler in (handlers or {}).items():
            self.register(content_type, handler)

    def register(self, content_type: str, handler: Handler, *, replace: bool = False) -> None:
        """Handle `content_type` ('image/png', or 'image/*' for a whole family)."""
        key = normalize_type(content_type)
        if "/" not in key:
            raise ValueError(f"a media type looks like 'type/subtype', got {content_type!r}")
        if key in self._handlers and not replace and self._handlers[key] is not handler:
            raise ValueError(f"{key} already has a handler (pass replace=True to swap it)")
        self._handlers[key] = handler

    def unregister(self, content_type: str) -> Handler | None:
        return self._handlers.pop(normalize_type(content_type), None)

    def lookup(self, mime: str) -> Handler | None:
        """The handler for a media type: exact match, then 'type/*', else None (refuse)."""
        mime = normalize_type(mime)
        if not mime:
            return self.fallback
        handler = self._handlers.get(mime)
        if handler is None:
            handler = self._handlers.get(mime.split("/", 1)[0] + "/*")
        return handler

    def copy(self) -> HandlerRegistry:
        return HandlerRegistry(self._handlers, self.fallback)

    def types(self) -> list[str]:
        return sorted(self._handlers)

    def __contains__(self, content_type: object) -> bool:
        return isinstance(content_type, str) and normalize_type(content_type) in self._handlers

    def __iter__(self) -> Iterator[str]:
        return iter(self.types())


async def html_handler(response: ResponseView, result: FetchResult) -> None:
    """HTML: read up to the page cap and hand the bytes to the parser ("fetched").

    The bytes are kept exactly as sent (after content decoding): the charset is the
    parser's business (header, BOM, <meta>, detection), so a lying header costs
    nothing here.
    """
    body = await response.read()
    result.body, result.truncated = body.data, body.truncated
    result.outcome = "fetched"
    if body.truncated:
        result.reason = f"body over {response.max_body_bytes} bytes, truncated"


DEFAULT_HANDLERS = HandlerRegistry({t: html_handler for t in HTML_TYPES}, fallback=html_handler)


def register_handler(content_type: str, handler: Handler, *, replace: bool = False) -> None:
    """Register a handler in the registry every fetcher uses by default."""
    DEFAULT_HANDLERS.register(content_type, handler, replace=replace)


def unregister_handler(content_type: str) -> Handler | None:
    return DEFAULT_HANDLERS.unregister(content_type)
