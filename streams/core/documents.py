"""The document a search index consumes of one page (schemas/document.avsc), and which
URL is its id.

A page names its canonical URL in ``<link rel=canonical>`` or a ``Link`` header. A
same-site canonical is obeyed: the document is indexed under it. A cross-site one is
only recorded, never obeyed (anyone can claim another site's page), so the document
keeps its own URL. A canonical that does not parse is ignored.

Pure: the standard library and streams.core.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from email.utils import parsedate_to_datetime
from typing import TypedDict

from streams.core.text import PageText
from streams.core.urls import canonical, host_of, resolve, site_key

__all__ = ["Document", "Outlink", "canonical_id", "document"]

#: Outlinks and anchors a document carries at most (an anchor flood stays bounded).
MAX_OUTLINKS, MAX_ANCHORS, MAX_ANCHOR_CHARS = 1000, 64, 200


class Outlink(TypedDict):
    url: str
    anchor: str
    nofollow: bool


class Document(TypedDict):
    """schemas/document.avsc's record, field for field."""

    url: str
    canonical: str
    status: int
    fetched_at: float
    last_modified: float | None
    content_type: str
    charset: str
    language: str
    title: str
    description: str
    headings: list[str]
    text: str
    outlinks: list[Outlink]
    anchors: list[str]
    digest: str
    simhash: int | None
    size: int
    depth: int
    site: str
    noarchive: bool


def canonical_id(url: str, declared: str | None) -> str:
    """The document id of the page at `url` (canonical already) whose page names
    `declared` as its canonical (relative or absolute; None: none): the declared URL
    when it is on the same site, else `url`."""
    if not declared:
        return url
    try:
        resolved = resolve(url, declared.strip())
        target = canonical(resolved) if resolved else None
    except ValueError:
        return url
    if not target or not target.startswith(("http://", "https://")):
        return url
    if site_key(host_of(target)) != site_key(host_of(url)):
        return url  # cross-site: recorded by the caller, not obeyed
    return target


def _header(headers: Iterable[Mapping[str, str]], name: str) -> str:
    for header in headers:
        if header["name"].lower() == name:
            return header["value"]
    return ""


def _last_modified(value: str) -> float | None:
    if not value:
        return None
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def document(
    page: Mapping[str, object],
    *,
    title: str,
    text: PageText,
    digest: str,
    size: int,
    simhash: int | None = None,
    canonical_url: str | None = None,
    outlinks: Iterable[Outlink] = (),
    anchors: Iterable[str] = (),
    noarchive: bool = False,
) -> Document:
    """The document of a fetched page (its url, status, fetched_at, headers and depth),
    what parse found of it and the anchors of its inlinks. Bounded: at most
    MAX_OUTLINKS outlinks and MAX_ANCHORS distinct anchors of MAX_ANCHOR_CHARS."""
    url = str(page["url"])
    headers = page.get("headers") or []
    assert isinstance(headers, list)
    content_type, _, params = _header(headers, "content-type").partition(";")
    charset = ""
    for param in params.split(";"):
        key, _, value = param.strip().partition("=")
        if key.lower() == "charset":
            charset = value.strip().strip('"').lower()
    kept: dict[str, None] = {}
    for anchor in anchors:
        anchor = " ".join(anchor.split())[:MAX_ANCHOR_CHARS]
        if anchor and len(kept) < MAX_ANCHORS:
            kept.setdefault(anchor)
    depth = page.get("depth") or 0
    status = page["status"]
    fetched_at = page["fetched_at"]
    assert isinstance(depth, int) and isinstance(status, int)
    assert isinstance(fetched_at, int | float)
    return {
        "url": url,
        "canonical": canonical_id(url, canonical_url),
        "status": status,
        "fetched_at": float(fetched_at),
        "last_modified": _last_modified(_header(headers, "last-modified")),
        "content_type": content_type.strip().lower(),
        "charset": charset,
        "language": text.language,
        "title": title,
        "description": text.description,
        "headings": list(text.headings),
        "text": text.text,
        "outlinks": list(outlinks)[:MAX_OUTLINKS],
        "anchors": list(kept),
        "digest": digest,
        "simhash": simhash,
        "size": size,
        "depth": depth,
        "site": site_key(host_of(url)),
        "noarchive": noarchive,
    }
