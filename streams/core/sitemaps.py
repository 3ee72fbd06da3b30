"""Sitemaps (sitemaps.org 0.9): where they are, and the URLs they list, as pure logic.

A sitemap comes from a ``Sitemap:`` line of robots.txt, from ``/sitemap.xml``
(probed when robots.txt names none and probing is on), or from a sitemap index.
The fetch stage fetches it with the frontier's politeness like any URL, and sends
what it lists to url-filter, so scope, canonicalization and url-seen apply to
sitemap URLs exactly as to links.

Hostile input is the normal case here, so:

* **Size.** The body is read and decompressed with the fetcher's bounded decoders
  (`streams.core.decode.decode_bounded`): a ``.xml.gz`` file is gunzipped only up
  to ``max_bytes``, so a gzip bomb is cut off at the cap; a cut-off document keeps
  the entries before the cut. At most ``max_urls`` entries are read (the protocol's
  limit is 50,000 per file).
* **XML.** lxml's incremental parser with ``resolve_entities=False``,
  ``no_network=True``, ``load_dtd=False`` and ``huge_tree=False``; and a document
  with a DOCTYPE is refused before parsing (a sitemap never needs one; this is what
  defusedxml does too). So no external entity is read (XXE), no entity expands
  (billion laughs), nothing is fetched by the parser. lxml rather than defusedxml
  over the standard library's expat: it is faster, streams a 50 MB file in constant
  memory with ``iterparse`` plus ``clear()``, and keeps what it parsed before a
  syntax error.
* **Nesting.** A sitemap index lists sitemaps; the fetch stage follows them only to
  a bounded depth (a sitemap named by robots.txt is depth 1, its children 2, ...).
* **Scope.** The protocol lets a sitemap list only URLs of its own site; other
  entries are dropped and counted.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from dataclasses import dataclass, field

from lxml import etree

from streams.core.decode import ContentDecodeError, decode_bounded
from streams.core.robots import RobotsRules
from streams.core.urls import canonical, host_of, resolve, site_key

__all__ = [
    "MAX_URLS",
    "Sitemap",
    "SitemapConfig",
    "SitemapError",
    "SitemapReading",
    "decode_sitemap",
    "parse_sitemap",
    "read_sitemap",
    "robots_discoveries",
    "robots_sitemaps",
    "same_site",
]

#: The protocol's limits for one sitemap file.
MAX_URLS = 50_000
MAX_BYTES = 50 * 1024 * 1024
#: A <loc> longer than this is not a URL anyone should fetch.
MAX_LOC_CHARS = 4096

_GZIP_MAGIC = b"\x1f\x8b"


class SitemapError(ValueError):
    """The document is not a sitemap we can read (and nothing was taken from it)."""


@dataclass
class Sitemap:
    """What one sitemap file lists."""

    #: "urlset" (pages), "index" (more sitemaps) or "text" (one URL a line).
    kind: str
    urls: list[str] = field(default_factory=list)
    #: More entries than max_urls, or a body cut at the byte cap.
    truncated: bool = False
    #: Why reading stopped early (a syntax error after some entries), else "".
    error: str = ""
    #: Entries that were not absolute http(s) URLs.
    invalid: int = 0


def decode_sitemap(data: bytes, max_bytes: int = MAX_BYTES) -> tuple[bytes, bool]:
    """A sitemap body as XML/text: gunzipped if it is a gzip file (``.xml.gz``), bounded.

    Returns (bytes, truncated). Raises SitemapError for a corrupt gzip stream.
    """
    if data.startswith(_GZIP_MAGIC):
        try:
            return decode_bounded("gzip", data, max_bytes)
        except ContentDecodeError as exc:
            raise SitemapError(str(exc)) from exc
    return data[:max_bytes], len(data) > max_bytes


def _local(tag: object) -> str:
    if not isinstance(tag, str):
        return ""  # comments, processing instructions
    return tag.rsplit("}", 1)[-1].lower()


def _prolog_has_doctype(data: bytes) -> bool:
    """A DOCTYPE can only come before the root element: look there, and only there."""
    pos = 0
    while True:
        lt = data.find(b"<", pos)
        if lt < 0 or lt + 1 >= len(data):
            return False
        nxt = data[lt + 1 : lt + 2]
        if nxt == b"?":  # XML declaration or PI
            end = data.find(b"?>", lt)
        elif data.startswith(b"<!--", lt):
            end = data.find(b"-->", lt)
        else:
            # <!DOCTYPE (or any other markup declaration), or else the root element
            return nxt == b"!"
        if end < 0:
            return False
        pos = end + 2


def _absolute(loc: str) -> str | None:
    loc = loc.strip()
    if not loc or len(loc) > MAX_LOC_CHARS:
        return None
    lower = loc[:8].lower()
    if not (lower.startswith("http://") or lower.startswith("https://")):
        return None
    return canonical(loc)


def parse_sitemap(data: bytes, *, max_urls: int = MAX_URLS, truncated: bool = False) -> Sitemap:
    """The URLs a sitemap (XML urlset or index, or plain text) lists, canonicalized.

    ``truncated``: the body was already cut at the byte cap (so a syntax error at
    its end is expected). Raises SitemapError when nothing could be read at all.
    """
    head = data[:512].lstrip(b"\xef\xbb\xbf \t\r\n")
    if not head:
        raise SitemapError("empty sitemap")
    if not head.startswith(b"<"):
        return _parse_text(data, max_urls, truncated)
    if _prolog_has_doctype(data):
        raise SitemapError("a sitemap with a DOCTYPE is refused (entities, XXE)")
    return _parse_xml(data, max_urls, truncated)


def _parse_text(data: bytes, max_urls: int, truncated: bool) -> Sitemap:
    out = Sitemap("text", truncated=truncated)
    text = data.decode("utf-8", "replace").lstrip("\ufeff")
    for line in text.splitlines():
        if not line.strip():
            continue
        if len(out.urls) >= max_urls:
            out.truncated = True
            break
        url = _absolute(line)
        if url is None:
            out.invalid += 1
        else:
            out.urls.append(url)
    if not out.urls and out.invalid:
        raise SitemapError("not a sitemap: no line is an http(s) URL")
    return out


def _parse_xml(data: bytes, max_urls: int, truncated: bool) -> Sitemap:
    events = etree.iterparse(
        io.BytesIO(data),
        events=("start", "end"),
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        dtd_validation=False,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
    )
    out: Sitemap | None = None
    entry = ""  # "url" or "sitemap": the element whose <loc> we are in
    try:
        for event, elem in events:
            name = _local(elem.tag)
            if out is None:  # the root element decides the kind
                if name == "urlset":
                    out = Sitemap("urlset", truncated=truncated)
                elif name == "sitemapindex":
                    out = Sitemap("index", truncated=truncated)
                else:
                    raise SitemapError(f"not a sitemap: root element <{name or elem.tag}>")
                entry = "url" if out.kind == "urlset" else "sitemap"
                continue
            if event != "end":
                continue
            if name == "loc":
                parent = elem.getparent()
                if parent is not None and _local(parent.tag) == entry:
                    if len(out.urls) >= max_urls:
                        out.truncated = True
                        break
                    url = _absolute(elem.text or "")
                    if url is None:
                        out.invalid += 1
                    else:
                        out.urls.append(url)
            elif name == entry:
                # done with this entry: free it and its earlier siblings, so a
                # 50 MB file is read in constant memory
                elem.clear()
                while elem.getprevious() is not None:
                    parent = elem.getparent()
                    if parent is None:
                        break
                    del parent[0]
    except etree.XMLSyntaxError as exc:
        if out is None:
            raise SitemapError(f"not XML: {exc}") from exc
        out.error = f"XML error after {len(out.urls)} entries: {exc}"
    if out is None:
        raise SitemapError("not a sitemap: no root element")
    return out


def robots_sitemaps(robots_url: str, body: bytes | str | None) -> list[str]:
    """The sitemap URLs a robots.txt names (absolute, canonical, de-duplicated)."""
    if not body:
        return []
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    out: list[str] = []
    for loc in RobotsRules.parse(text).sitemaps:
        # the protocol wants absolute URLs; a relative one is resolved, as browsers would
        url = _absolute(resolve(robots_url, loc.strip()) or "")
        if url is not None and url not in out:
            out.append(url)
    return out


def same_site(sitemap_url: str, urls: Iterable[str]) -> tuple[list[str], int]:
    """The entries of a sitemap on its own site (www. and bare host alike); and how
    many were dropped for being elsewhere."""
    site = site_key(host_of(sitemap_url))
    kept: list[str] = []
    dropped = 0
    for url in urls:
        if site_key(host_of(url)) == site:
            kept.append(url)
        else:
            dropped += 1
    return kept, dropped


@dataclass(frozen=True)
class SitemapConfig:
    """What the crawl does with sitemaps (from Settings)."""

    #: Follow the ``Sitemap:`` lines of robots.txt.
    enabled: bool = True
    #: Also try ``/sitemap.xml`` of a host whose robots.txt names no sitemap
    #: (one more request per host, so off by default).
    probe: bool = False
    #: Deepest nesting followed: a sitemap named by robots.txt is 1, a sitemap an
    #: index at depth 1 lists is 2, and so on. An index at this depth is not followed.
    max_depth: int = 3
    max_bytes: int = MAX_BYTES
    max_urls: int = MAX_URLS


def robots_discoveries(
    robots_url: str, status: int, body: bytes | None, config: SitemapConfig
) -> list[str]:
    """The sitemaps to fetch after a host's robots.txt answered (depth 1 each)."""
    if not config.enabled:
        return []
    found = robots_sitemaps(robots_url, body) if 200 <= status < 300 else []
    if not found and config.probe and (200 <= status < 300 or 400 <= status < 500):
        probe = resolve(robots_url, "/sitemap.xml")
        found = [probe] if probe else []
    return found


@dataclass
class SitemapReading:
    """One fetched sitemap, read: what to crawl next, and a line for the crawl log."""

    pages: list[str] = field(default_factory=list)
    sitemaps: list[str] = field(default_factory=list)
    reason: str = ""
    #: The body was not a sitemap at all.
    invalid: bool = False


def read_sitemap(url: str, depth: int, body: bytes, config: SitemapConfig) -> SitemapReading:
    """Decode, parse and scope one fetched sitemap at nesting `depth` (never raises
    for bad input: a hostile body becomes a reason)."""
    cut = False
    try:
        xml, cut = decode_sitemap(body, config.max_bytes)
        sitemap = parse_sitemap(xml, max_urls=config.max_urls, truncated=cut)
    except SitemapError as exc:
        where = f" (decoded body cut at {config.max_bytes} bytes)" if cut else ""
        return SitemapReading(reason=f"not a sitemap: {exc}{where}", invalid=True)
    kept, dropped = same_site(url, sitemap.urls)
    notes = [f"{sitemap.kind}: {len(kept)} URLs"]
    reading = SitemapReading()
    if sitemap.kind == "index":
        if depth >= config.max_depth:
            notes.append(f"not followed: nested deeper than {config.max_depth}")
        else:
            reading.sitemaps = kept
    else:
        reading.pages = kept
    if dropped:
        notes.append(f"{dropped} on other sites dropped")
    if sitemap.invalid:
        notes.append(f"{sitemap.invalid} invalid")
    if sitemap.truncated:
        notes.append(f"cut at {config.max_urls} URLs or {config.max_bytes} bytes")
    if sitemap.error:
        notes.append(sitemap.error)
    reading.reason = "; ".join(notes)
    return reading
