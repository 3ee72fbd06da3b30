"""The records stages hand each other, as the codec decodes them (streams/codec/).

A TypedDict per shape, so a stage's reads are checked by mypy against what its
topic carries. What a stage builds may leave out a field the codec defaults
(`total=False`); what it reads from a decoded batch has every field set.
Pure: imports nothing of Seine.
"""

from __future__ import annotations

from typing import Required, TypedDict


class UrlCandidate(TypedDict, total=False):
    """A URL on its way to the frontier (url_batch, and frontier_event's new_urls)."""

    url: Required[str]
    #: links followed from a seed (0 for a seed)
    depth: int
    priority: int
    #: where it came from (streams.core.provenance.Via, or the URL of a redirect)
    via: str | None
    #: links to it seen in this batch (url-seen counts them)
    inlinks: int
    #: "page" or "sitemap"
    kind: str
    #: the queue slot (tier, sequence) a re-tier moves it from
    slot: tuple[int, int]


class UrlBatch(TypedDict):
    """One url_batch message: url-filter's and url-seen's input."""

    urls: list[UrlCandidate]


class FetchRequest(TypedDict, total=False):
    """A fetch the frontier made due (fetch_batch's requests)."""

    url: Required[str]
    host: Required[str]
    #: "page", "robots" or "sitemap"
    kind: Required[str]
    depth: int
    #: when the frontier dispatched it: the fetch stage performs only the dispatch
    #: the frontier waits for (`Frontier.claim`)
    dispatched_at: Required[float]
    url_id: int


class FetchBatch(TypedDict):
    """One fetch_batch message: the fetch stage's input."""

    requests: list[FetchRequest]


class FetchCompletion(TypedDict, total=False):
    """A fetch's end, for the frontier (frontier_event's completions)."""

    url: Required[str]
    host: Required[str]
    kind: Required[str]
    status: Required[int]
    outcome: Required[str]
    elapsed_ms: Required[float]
    finished_at: Required[float]
    #: seconds the server asked to wait (429/503 Retry-After), if it did
    retry_after: float | None
    #: robots.txt's body, which the frontier parses into the host's rules
    body: bytes | None
    dispatched_at: float
    reason: str


class FrontierEvent(TypedDict, total=False):
    """One frontier_event message: new URLs, completions, and the partition's tick."""

    new_urls: list[UrlCandidate]
    completions: list[FetchCompletion]
    tick: bool


class _Capture(TypedDict, total=False):
    """What a page's fetch recorded, bar its body."""

    url: Required[str]
    status: Required[int]
    #: {"name", "value"} each, in the order the server sent them
    headers: Required[list[dict[str, str]]]
    fetched_at: Required[float]
    elapsed_ms: float
    #: the server's address
    ip: str | None
    depth: int
    #: cut at max_body_bytes
    truncated: bool


class FetchedPage(_Capture, total=False):
    """A fetched page (page_batch's pages)."""

    body: Required[bytes]


class CapturedPage(_Capture, total=False):
    """A parsed page's capture: its body is None while it waits in the worker's
    hand-off cache (streams/core/handoff.py) under the page's digest."""

    body: Required[bytes | None]


class PageBatch(TypedDict):
    """One page_batch message: parse's input."""

    pages: list[FetchedPage]


class DuplicateOf(TypedDict):
    """The first capture of an identical payload."""

    url: str
    digest: str
    fetched_at: float


class NearDuplicateOf(TypedDict):
    """The page a near-duplicate's simhash is close to."""

    url: str
    distance: int


class ParsedPage(TypedDict, total=False):
    """A parsed page (parsed_batch's pages: content-dedup's and link-extract's input)."""

    page: Required[CapturedPage]
    #: the payload's digest ("sha1:..."), the hand-off cache's key with the URL
    digest: str
    size: int
    fingerprint: str
    title: str
    links: list[str]
    #: the document's <base href>, if any
    base: str | None
    nofollow: bool
    noindex: bool
    duplicate_of: DuplicateOf | None
    simhash: int | None
    band: int
    near_duplicate_of: NearDuplicateOf | None


class ParsedBatch(TypedDict):
    """One parsed_batch message (content-dedup's and link-extract's topics)."""

    pages: list[ParsedPage]
