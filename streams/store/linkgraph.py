"""The crawl's link graph, read back from the page stores: page edges and host edges.

A page's links are what link-extract followed: the stored HTML parsed by the crawl's
own parser (``rel=nofollow`` links dropped), resolved against the page URL or its
``<base href>`` and canonicalized by ``resolve_and_canonicalize``; a page whose meta
robots or ``X-Robots-Tag`` says nofollow has none. Every response capture of a URL
adds its links (a page recrawled after it changed has the links of each version);
revisit records hold no body of their own and add nothing, their links being the
original capture's. A near-duplicate page is stored whole and gives its links too
(the crawl follows them only with ``near_dup_extract_links``: they are the page's
links all the same). A page's links to itself (``#top``) are not edges.

Memory stays bounded by one URL's captures: the stores' URLs are merged in index
order, each URL's edges deduplicated by a set of its own. The host graph keeps one
counter per pair of hosts, and a crawl meets few hosts.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from typing import TextIO

from streams.core.directives import x_robots_tag
from streams.core.parsing import charset_from_headers, parse_pages
from streams.core.urls import host_of, resolve, resolve_and_canonicalize
from streams.store.pagestore import Capture, PageStore
from streams.store.storeset import StoreSet

__all__ = ["capture_links", "host_edges", "page_edges", "write_host_edges", "write_page_edges"]

#: Media types parse reads as HTML (an untyped response is HTML as well, as the
#: fetcher's fallback has it); a capture of another type has no links here.
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
#: The URL length over which link-extract drops a link (crawl.max_url_bytes's default).
MAX_URL_BYTES = 8192


def _is_html(headers: list[tuple[str, str]]) -> bool:
    for name, value in headers:
        if name.strip().lower() == "content-type":
            mime = value.split(";", 1)[0].strip().lower()
            return not mime or mime in HTML_TYPES
    return True


def capture_links(capture: Capture, agent: str = "", max_url: int = MAX_URL_BYTES) -> list[str]:
    """The canonical URLs a stored capture links to, once each in document order, as
    link-extract emits them; [] for a revisit, a non-HTML capture or a nofollow page.
    ``agent`` is the crawler's robots.txt token (``X-Robots-Tag: agent: nofollow``)."""
    if capture.revisit_of is not None or not _is_html(capture.headers):
        return []
    robots = [v for k, v in capture.headers if k.strip().lower() == "x-robots-tag"]
    if robots and x_robots_tag(robots, agent).nofollow:
        return []
    (doc,) = parse_pages([(capture.body, charset_from_headers(capture.headers))])
    if doc.nofollow:
        return []
    base = capture.url
    if doc.base:
        base = resolve(capture.url, doc.base) or capture.url
    return [u for u in resolve_and_canonicalize(base, doc.links) if len(u) <= max_url]


def _index_order(url: str) -> bytes:
    # The order urls() yields: the bytes of the UTF-8 form the index keys hold.
    return url.encode("utf-8", "surrogateescape")


def _urls(stores: list[PageStore]) -> Iterator[str]:
    """Every URL of every store once, without holding the lists: the stores' URL
    iterators are each in index order, so a merge brings a URL's copies together."""
    last: str | None = None
    for url in heapq.merge(*(s.urls() for s in stores), key=_index_order):
        if url != last:
            yield url
            last = url


def page_edges(
    stores: StoreSet, agent: str = "", max_url: int = MAX_URL_BYTES
) -> Iterator[tuple[str, str]]:
    """(source URL, target URL) of every link of every stored page, each pair once,
    grouped by source in index order. A URL's captures in several workers' stores
    (a host that moved in a rebalance) make one source."""
    for url in _urls(stores.stores):
        seen = {url}
        for store in stores.stores:
            for capture in store.responses(url):
                for target in capture_links(capture, agent, max_url):
                    if target not in seen:
                        seen.add(target)
                        yield url, target


def host_edges(edges: Iterable[tuple[str, str]]) -> list[tuple[str, str, int]]:
    """(source host, target host, page links) for every pair of distinct hosts, sorted.
    Hosts are ``host_of``'s: lower-case hostnames without the port, so www.example.com
    and example.com are two nodes; the count is the distinct page edges between them."""
    counts: dict[tuple[str, str], int] = {}
    for source, target in edges:
        pair = (host_of(source), host_of(target))
        if pair[0] != pair[1] and pair[0] and pair[1]:
            counts[pair] = counts.get(pair, 0) + 1
    return [(a, b, n) for (a, b), n in sorted(counts.items())]


def write_page_edges(
    stores: StoreSet, out: TextIO, agent: str = "", max_url: int = MAX_URL_BYTES
) -> int:
    """``source<TAB>target`` a line (canonical URLs hold no tab or newline); returns
    the edges written."""
    n = 0
    for source, target in page_edges(stores, agent, max_url):
        out.write(f"{source}\t{target}\n")
        n += 1
    return n


def write_host_edges(
    stores: StoreSet, out: TextIO, agent: str = "", max_url: int = MAX_URL_BYTES
) -> int:
    """``source<TAB>target<TAB>count`` a line; returns the edges written."""
    edges = host_edges(page_edges(stores, agent, max_url))
    for source, target, count in edges:
        out.write(f"{source}\t{target}\t{count}\n")
    return len(edges)
