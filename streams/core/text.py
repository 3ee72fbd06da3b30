"""A page's text as a search index wants it: the main content (navigation, sidebars and
footers removed), its description and headings, its language, and the canonical URL
its head names.

resiliparse does the text (docs/decisions/0041): its DOM parser, its HTML-to-text with
main-content extraction (identifiers in code and definition lists kept), and its fast
language detector; `bench/text_extract.py` measured it against trafilatura and pycld2
on real pages. selectolax (lexbor) reads the links, headings and head metadata in one
CSS pass. Everything is bounded: the HTML read, the text kept, the headings, the links.

Pure: resiliparse, selectolax, the standard library and streams.core.parsing (decoding,
and the nesting bound parse applies too).
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field

from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import HTMLTree
from resiliparse.parse.lang import detect_fast
from selectolax.lexbor import LexborHTMLParser

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
#: Characters of the title kept (as parse keeps them).
MAX_TITLE_CHARS = 1000
#: Links read, and characters of each one's anchor text.
MAX_LINKS, MAX_ANCHOR_CHARS = 1000, 200
#: Characters of the description kept.
MAX_DESCRIPTION_CHARS = 1000
#: Text the language is guessed from (the detector reads its start): over the 530
#: Python docs pages, 4,000 characters give the language 20,000 gave on every page,
#: in 35 µs a page instead of ~200 (the detector's time grows with the sample).
LANGUAGE_SAMPLE_CHARS = 4_000
#: Fewer letters than this tell no language (counted without spaces: CJK has none).
MIN_LANGUAGE_CHARS = 12
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
    #: The first ``<title>``, whitespace collapsed, as parse reads it.
    title: str = ""
    #: The first ``<base href>`` as written ("" for none).
    base: str = ""
    #: The content of the ``<meta name="robots">`` tags (and of those named after the
    #: crawler, see `page_text`'s `agent`), lowercased and joined by commas.
    robots: str = ""


def _clean(value: str, limit: int) -> str:
    return _SPACE.sub(" ", value).strip()[:limit]


def page_text(body: bytes, charset: str | None = None, agent: str = "seinebot") -> PageText:
    """The main text, description, headings and language of an HTML page. Never
    raises on content: broken markup gives what a browser would show, an empty or
    unparsable page an empty PageText. `agent`: the crawler's robots.txt token
    (lowercase), whose ``<meta name>`` counts as robots meta."""
    html = body[:MAX_HTML_BYTES]
    if not html.strip():
        return PageText()
    try:
        # block elements nested past parse's bound are dropped first: resiliparse's
        # extraction took ~60 s over 50,000 nested <div>s
        capped = cap_block_nesting(decode_html(html, charset))
        tree = HTMLTree.parse(capped)
    except Exception:  # a page never takes the stage down
        return PageText()
    found = PageText()
    text = extract_plain_text(tree, main_content=True, preserve_formatting=True)
    if not text.strip():  # main-content heuristics can drop a short page whole
        text = extract_plain_text(tree, main_content=False, preserve_formatting=True)
    found.text = text.strip()[:MAX_TEXT_CHARS]
    # lexbor should not fail; if it does, the text stands without the rest
    with contextlib.suppress(Exception):
        _read_structure(capped, found, agent.lower())
    found.language = language_of(found.text)
    return found


_SELECTOR = "title, base[href], link[rel][href], meta, body a[href], body h1, body h2, body h3"


def _read_structure(html: str, found: PageText, agent: str) -> None:
    """The head's first canonical link and description, the body's h1-h3 headings and
    its links (href, anchor text, nofollow), in one CSS pass of selectolax (lexbor):
    ~35 µs a bench page with its own parse, linear in the page's size, where
    resiliparse's query_selector_all builds its result list in time quadratic in its
    length (12 s for a page of 3,000 links) and a walk of its DOM in Python took 150 µs."""
    tree = LexborHTMLParser(html)
    for node in tree.css(_SELECTOR):
        tag = node.tag
        attrs = node.attributes
        if tag == "a":
            if len(found.links) >= MAX_LINKS:
                continue
            href = (attrs.get("href") or "").strip()
            if href and len(href) <= MAX_URL_CHARS:
                nofollow = "nofollow" in (attrs.get("rel") or "").lower()
                anchor = _clean(node.text(deep=True) or "", MAX_ANCHOR_CHARS)
                found.links.append((href, anchor, nofollow))
        elif tag in _HEADINGS:
            if len(found.headings) < MAX_HEADINGS:
                heading = _clean(node.text(deep=True) or "", MAX_HEADING_CHARS)
                if heading:
                    found.headings.append(heading)
        elif tag == "link":
            if not found.canonical and "canonical" in (attrs.get("rel") or "").lower().split():
                found.canonical = (attrs.get("href") or "").strip()[:MAX_URL_CHARS]
        elif tag == "meta":
            name = (attrs.get("name") or attrs.get("property") or "").lower()
            if name in ("description", "og:description") and not found.description:
                found.description = _clean(attrs.get("content") or "", MAX_DESCRIPTION_CHARS)
            elif name in ("robots", agent) and len(found.robots) < MAX_DESCRIPTION_CHARS:
                content = (attrs.get("content") or "").lower()
                found.robots = f"{found.robots},{content}" if found.robots else content
        elif tag == "title":
            if not found.title:
                found.title = _clean(node.text(deep=True) or "", MAX_TITLE_CHARS)
        elif tag == "base" and not found.base:
            found.base = (attrs.get("href") or "").strip()[:MAX_URL_CHARS]


def language_of(text: str) -> str:
    """The text's language (ISO 639-1), or "" when there is too little to tell."""
    sample = text[:LANGUAGE_SAMPLE_CHARS]
    # letters without spaces, counted without building a new string
    if len(sample) - sum(map(sample.count, " \n\t\r")) < MIN_LANGUAGE_CHARS:
        return ""
    language, _score = detect_fast(sample)
    return "" if language in ("unknown", None) else str(language)
