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
from dataclasses import dataclass, field

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
#: Characters of the description kept.
MAX_DESCRIPTION_CHARS = 1000
#: Text the language is guessed from (the detector reads its start).
LANGUAGE_SAMPLE_CHARS = 20_000
#: Fewer letters than this tell no language (counted without spaces: CJK has none).
MIN_LANGUAGE_CHARS = 12
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
        for link in head.query_selector_all("link[rel][href]"):
            if "canonical" in (link.getattr("rel") or "").lower().split():
                found.canonical = (link.getattr("href") or "").strip()[:MAX_URL_CHARS]
                break
        for meta in head.query_selector_all("meta[name]"):
            name = (meta.getattr("name") or "").lower()
            if name in ("description", "og:description"):
                found.description = _clean(meta.getattr("content") or "", MAX_DESCRIPTION_CHARS)
                break
    body_node = tree.body
    if body_node is not None:
        for node in body_node.query_selector_all("h1, h2, h3"):
            heading = _clean(node.text or "", MAX_HEADING_CHARS)
            if heading:
                found.headings.append(heading)
                if len(found.headings) >= MAX_HEADINGS:
                    break
    found.language = language_of(found.text)
    return found


def language_of(text: str) -> str:
    """The text's language (ISO 639-1), or "" when there is too little to tell."""
    sample = text[:LANGUAGE_SAMPLE_CHARS]
    if len("".join(sample.split())) < MIN_LANGUAGE_CHARS:
        return ""
    language, _score = detect_fast(sample)
    return "" if language in ("unknown", None) else str(language)
