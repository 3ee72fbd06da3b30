"""A page's text as a search index wants it: the main content (navigation, sidebars and
footers removed), its description and headings, its language, and the canonical URL
its head names.

resiliparse does the work (docs/decisions/0041): its DOM parser, its HTML-to-text with
main-content extraction (identifiers in code and definition lists kept), and its fast
language detector; `bench/text_extract.py` measured it against trafilatura and pycld2
on real pages. Everything is bounded: the HTML read, the text kept, the headings.

Pure: resiliparse, the standard library and streams.core.parsing (decoding, and the
nesting bound parse applies too).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import HTMLTree
from resiliparse.parse.lang import detect_fast

from streams.core.parsing import cap_block_nesting, decode_html

__all__ = ["MAX_HTML_BYTES", "MAX_TEXT_CHARS", "PageText", "page_text"]

#: HTML read for the text (a larger page is cut there first: bounded time and memory).
MAX_HTML_BYTES = 4 * 1024 * 1024
#: Main text kept (an index needs the start of a long page, not all of it).
MAX_TEXT_CHARS = 200_000
#: Headings kept, and characters of each.
MAX_HEADINGS, MAX_HEADING_CHARS = 64, 300
#: Characters of a canonical URL kept.
MAX_URL_CHARS = 8192
#: Links read, and characters of each one's anchor text.
MAX_LINKS, MAX_ANCHOR_CHARS = 1000, 200
#: Characters of the description kept.
MAX_DESCRIPTION_CHARS = 1000
#: Text the language is guessed from (the detector reads its start).
LANGUAGE_SAMPLE_CHARS = 20_000
#: Fewer letters than this tell no language (counted without spaces: CJK has none).
MIN_LANGUAGE_CHARS = 12
#: Elements of the head or of the body visited for links, headings and metadata.
MAX_ELEMENTS = 200_000
_HEADINGS = frozenset({"h1", "h2", "h3"})
_SPACE = re.compile(r"\s+")


@dataclass
class PageText:
    """What a document carries of a page's text."""

    text: str = ""
    description: str = ""
    headings: list[str] = field(default_factory=list)
    #: ISO 639-1 code, or "" when the text is too short or unknown to tell.
    language: str = ""
    #: The first ``<link rel=canonical href>`` of the head, as written ("" for none).
    canonical: str = ""
    #: The body's ``<a href>`` links as written: (href, anchor text, rel=nofollow),
    #: at most MAX_LINKS.
    links: list[tuple[str, str, bool]] = field(default_factory=list)


def _clean(value: str, limit: int) -> str:
    return _SPACE.sub(" ", value).strip()[:limit]


def page_text(body: bytes, charset: str | None = None) -> PageText:
    """The main text, description, headings and language of an HTML page. Never
    raises on content: broken markup gives what a browser would show, an empty or
    unparsable page an empty PageText."""
    html = body[:MAX_HTML_BYTES]
    if not html.strip():
        return PageText()
    try:
        # block elements nested past parse's bound are dropped first: resiliparse's
        # extraction took ~60 s over 50,000 nested <div>s
        tree = HTMLTree.parse(cap_block_nesting(decode_html(html, charset)))
    except Exception:  # a page never takes the stage down
        return PageText()
    found = PageText()
    text = extract_plain_text(tree, main_content=True, preserve_formatting=True)
    if not text.strip():  # main-content heuristics can drop a short page whole
        text = extract_plain_text(tree, main_content=False, preserve_formatting=True)
    found.text = text.strip()[:MAX_TEXT_CHARS]
    head = tree.head
    if head is not None:
        _read_head(head, found)
    body_node = tree.body
    if body_node is not None:
        _read_body(body_node, found)
    found.language = language_of(found.text)
    return found


def _elements(root: Any) -> Iterator[Any]:
    """The elements under `root` in document order, at most MAX_ELEMENTS.

    A walk over first_element_child / next_element_sibling: resiliparse's
    query_selector_all and get_elements_by_tag_name build their result lists in
    time quadratic in its length (12 s for a page of 3,000 links here)."""
    # (resiliparse DOMNodes: its stubs do not type their navigation)
    stack: list[Any] = []
    child = root.first_element_child
    if child is not None:
        stack.append(child)
    seen = 0
    while stack and seen < MAX_ELEMENTS:
        node = stack.pop()
        seen += 1
        yield node
        sibling = node.next_element_sibling
        if sibling is not None:
            stack.append(sibling)
        first = node.first_element_child
        if first is not None:
            stack.append(first)


def _read_head(head: Any, found: PageText) -> None:
    """The head's first canonical link and its description."""
    for node in _elements(head):
        tag = node.tag
        if tag == "link" and not found.canonical:
            if "canonical" in (node.getattr("rel") or "").lower().split():
                found.canonical = (node.getattr("href") or "").strip()[:MAX_URL_CHARS]
        elif tag == "meta" and not found.description:
            name = (node.getattr("name") or node.getattr("property") or "").lower()
            if name in ("description", "og:description"):
                found.description = _clean(node.getattr("content") or "", MAX_DESCRIPTION_CHARS)


def _read_body(body: Any, found: PageText) -> None:
    """The body's h1-h3 headings and its links (href, anchor text, nofollow)."""
    for node in _elements(body):
        tag = node.tag
        if tag in _HEADINGS:
            if len(found.headings) < MAX_HEADINGS:
                heading = _clean(node.text or "", MAX_HEADING_CHARS)
                if heading:
                    found.headings.append(heading)
        elif tag == "a" and len(found.links) < MAX_LINKS:
            href = (node.getattr("href") or "").strip()
            if href and len(href) <= MAX_URL_CHARS:
                nofollow = "nofollow" in (node.getattr("rel") or "").lower()
                found.links.append((href, _clean(node.text or "", MAX_ANCHOR_CHARS), nofollow))


def language_of(text: str) -> str:
    """The text's language (ISO 639-1), or "" when there is too little to tell."""
    sample = text[:LANGUAGE_SAMPLE_CHARS]
    if len("".join(sample.split())) < MIN_LANGUAGE_CHARS:
        return ""
    language, _score = detect_fast(sample)
    return "" if language in ("unknown", None) else str(language)
