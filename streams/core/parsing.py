"""HTML parsing for the crawl: title, links, <base>, meta robots and a content fingerprint.

selectolax (the lexbor engine) extracts links from an 8 KB page in ~0.09 ms here,
where BeautifulSoup takes 1.5–3.9 ms, and lexbor is an HTML5 parser: broken
markup is repaired the way browsers do, never raised. The fingerprint hashes the
page's normalized visible text, so two URLs serving the same article with
different whitespace or markup order of attributes still meet in content-dedup.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import mmh3
from bs4.dammit import UnicodeDammit
from selectolax.lexbor import LexborHTMLParser

_CHARSET_RE = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([a-zA-Z0-9_.:-]+)""", re.I)
_WS_RE = re.compile(r"\s+")
_LINK_SELECTOR = "a[href], area[href]"


@dataclass
class ParsedDocument:
    title: str = ""
    links: list[str] = field(default_factory=list)
    base: str | None = None
    fingerprint: str = ""
    nofollow: bool = False
    noindex: bool = False
    text_chars: int = 0


def charset_from_headers(headers: list[tuple[str, str]] | list[dict[str, str]]) -> str | None:
    for item in headers:
        name, value = (item["name"], item["value"]) if isinstance(item, dict) else item
        if name.lower() == "content-type":
            match = re.search(r"charset\s*=\s*[\"']?([^\s;\"']+)", value, re.I)
            if match:
                return match.group(1)
    return None


def decode_html(body: bytes, declared: str | None = None) -> str:
    """Bytes → text: BOM, then the declared charset, then <meta charset>, then detection."""
    if body.startswith(b"\xef\xbb\xbf"):
        return body[3:].decode("utf-8", "replace")
    if body.startswith((b"\xff\xfe", b"\xfe\xff")):
        return body.decode("utf-16", "replace")
    candidates: list[str] = []
    if declared:
        candidates.append(declared)
    meta = _CHARSET_RE.search(body[:4096])
    if meta:
        candidates.append(meta.group(1).decode("ascii", "replace"))
    for encoding in candidates:
        try:
            return body.decode(encoding)
        except (LookupError, UnicodeDecodeError):
            continue
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        dammit = UnicodeDammit(body[:65536], is_html=True)
        return body.decode(dammit.original_encoding or "windows-1252", "replace")


def fingerprint_text(text: str) -> str:
    """128-bit murmur hash of whitespace-normalized, case-folded text, as hex."""
    normalized = _WS_RE.sub(" ", text).strip().casefold()
    return mmh3.hash_bytes(normalized.encode("utf-8", "replace")).hex()


def parse_html(body: bytes, declared_charset: str | None = None) -> ParsedDocument:
    """Parse one page; never raises on any input (a stage must survive any page)."""
    doc = ParsedDocument()
    try:
        text = decode_html(body, declared_charset)
        tree = LexborHTMLParser(text)
    except Exception:  # lexbor should not fail, but a page never takes a stage down
        doc.fingerprint = mmh3.hash_bytes(body).hex()
        return doc
    title = tree.css_first("title")
    if title is not None:
        doc.title = _WS_RE.sub(" ", title.text() or "").strip()[:1000]
    base = tree.css_first("base[href]")
    if base is not None:
        doc.base = (base.attributes.get("href") or "").strip() or None
    for meta in tree.css("meta[name]"):
        name = (meta.attributes.get("name") or "").lower()
        if name in ("robots", "seinebot"):
            content = (meta.attributes.get("content") or "").lower()
            doc.nofollow = doc.nofollow or "nofollow" in content or "none" in content
            doc.noindex = doc.noindex or "noindex" in content or "none" in content
    links: list[str] = []
    for node in tree.css(_LINK_SELECTOR):
        href = node.attributes.get("href")
        if not href:
            continue
        rel = (node.attributes.get("rel") or "").lower()
        if "nofollow" in rel:
            continue
        links.append(href.strip())
    doc.links = links
    body_node = tree.body
    visible = body_node.text(separator=" ") if body_node is not None else text
    doc.text_chars = len(visible.strip())
    if doc.text_chars:
        doc.fingerprint = fingerprint_text(doc.title + "\n" + visible)
    else:
        # No visible text (a page of links, an empty body): only identical bytes match.
        doc.fingerprint = "b" + mmh3.hash_bytes(body).hex()
    return doc
