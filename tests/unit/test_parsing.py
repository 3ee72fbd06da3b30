"""Unit tests for streams.core.parsing: extraction, fingerprints, charsets, broken HTML."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.core import parsing
from streams.core.parsing import (
    MAX_BLOCK_DEPTH,
    charset_from_headers,
    decode_html,
    fingerprint_text,
    parse_html,
)

# -- extraction -------------------------------------------------------------------


def test_title_is_whitespace_normalized() -> None:
    doc = parse_html(b"<html><head><title>\n  Hello \t  World\n</title></head><body>x</body>")
    assert doc.title == "Hello World"
    assert parse_html(b"<p>no title</p>").title == ""


def test_links_from_a_and_area_in_document_order() -> None:
    doc = parse_html(
        b"""<body>
        <a href="/one">1</a>
        <map name="m"><area href="/map-area" shape="rect"></map>
        <a href=" https://other.example/two ">2</a>
        <a name="anchor-without-href">x</a>
        <a href="">empty</a>
        <link href="/stylesheet.css" rel="stylesheet">
        <img src="/image.png">
        <A HREF="/upper">3</A>
        </body>"""
    )
    assert doc.links == ["/one", "/map-area", "https://other.example/two", "/upper"]


def test_rel_nofollow_links_are_skipped() -> None:
    doc = parse_html(
        b'<a href="/a" rel="nofollow">a</a><a href="/b" rel="noopener NoFollow">b</a>'
        b'<area href="/c" rel="nofollow"><a href="/d" rel="noopener">d</a>'
    )
    assert doc.links == ["/d"]
    assert not doc.nofollow  # a link's rel is not the page's meta robots


def test_first_title_in_document_order_wins() -> None:
    doc = parse_html(
        b"<head><title>One</title></head><body><a href=/x>x</a>"
        b"<svg><title>Two</title></svg><title>Three</title></body>"
    )
    assert doc.title == "One"
    assert doc.links == ["/x"]
    late = parse_html(b"<body><a href=/y>y</a><p>text</p><title>Late  title</title></body>")
    assert late.title == "Late title"


def test_base_href() -> None:
    doc = parse_html(
        b'<head><base target="_blank"><base href=" https://cdn.example/dir/ ">'
        b'<base href="https://second.example/"></head><a href="x">x</a>'
    )
    assert doc.base == "https://cdn.example/dir/"
    assert parse_html(b"<a href=x>x</a>").base is None
    assert parse_html(b'<base href="  ">').base is None


@pytest.mark.parametrize(
    ("meta", "noindex", "nofollow"),
    [
        (b'<meta name="robots" content="noindex">', True, False),
        (b'<meta name="robots" content="nofollow">', False, True),
        (b'<meta name="ROBOTS" content="NOINDEX, NOFOLLOW">', True, True),
        (b'<meta name="robots" content="none">', True, True),
        (b'<meta name="seinebot" content="noindex">', True, False),
        (b'<meta name="robots" content="index, follow">', False, False),
        (b'<meta name="googlebot" content="noindex,nofollow">', False, False),
        (b'<meta name="description" content="none of that">', False, False),
        (b"", False, False),
    ],
)
def test_meta_robots(meta: bytes, noindex: bool, nofollow: bool) -> None:
    doc = parse_html(b"<html><head>" + meta + b"</head><body><a href=/x>x</a></body></html>")
    assert (doc.noindex, doc.nofollow) == (noindex, nofollow)
    assert doc.links == ["/x"]  # meta nofollow is the link stage's decision, not the parser's


# -- fingerprints -----------------------------------------------------------------


def test_fingerprint_ignores_whitespace_case_and_markup() -> None:
    a = parse_html(b"<title>Page</title><body><p>Hello   World.</p>\n<p>Second</p></body>")
    b = parse_html(
        b"<html><head><title>page</title></head>\n<body>\n  <div class='x'><p>HELLO "
        b"world.</p>\t<p>second</p></div></body></html>"
    )
    assert a.fingerprint == b.fingerprint
    assert fingerprint_text("A  b\n c") == fingerprint_text("a b c ")


@given(st.text(alphabet=st.characters(max_codepoint=0x7F)))
def test_ascii_normalizer_is_normalize_text(text: str) -> None:
    """ASCII pages are normalized by numpy: exactly what ``normalize_text`` gives
    (str.split's whitespace includes \\x1c-\\x1f; casefold of ASCII is lower)."""
    assert parsing._normalize_ascii(text) == parsing.normalize_text(text).encode("ascii")


def test_ascii_and_other_pages_fingerprint_alike() -> None:
    """The fingerprint of an ASCII page (numpy path) is that of its text as str."""
    body = b"<title>T\x1fX</title><body><P>Hello \x0b  WORLD\r\n \x1c x</P></body>"
    doc, normalized = parsing._parse(body, "utf-8")
    assert normalized == b"t x hello world x"
    assert doc.fingerprint == fingerprint_text("T\x1fX\nHello \x0b  WORLD\r\n \x1c x")
    other, text = parsing._parse(body.replace(b"WORLD", "WÖRLD".encode()), "utf-8")
    assert text == "t x hello wörld x"
    assert other.fingerprint == fingerprint_text("t x hello wörld x")


def test_fingerprint_differs_for_different_text() -> None:
    a = parse_html(b"<body><p>Hello world.</p></body>")
    b = parse_html(b"<body><p>Hello world!</p></body>")
    c = parse_html(b"<title>Other</title><body><p>Hello world.</p></body>")
    assert len({a.fingerprint, b.fingerprint, c.fingerprint}) == 3
    assert fingerprint_text("a b") != fingerprint_text("ab")


def test_pages_without_text_fingerprint_by_bytes() -> None:
    a = parse_html(b'<body><a href="/one"></a><img src="x.png"></body>')
    b = parse_html(b'<body><a href="/two"></a><img src="x.png"></body>')
    assert a.text_chars == b.text_chars == 0
    assert a.fingerprint != b.fingerprint
    assert (
        a.fingerprint
        == parse_html(b'<body><a href="/one"></a><img src="x.png"></body>').fingerprint
    )
    # Never the text fingerprint of "" (which every empty page would share).
    assert a.fingerprint != fingerprint_text("")
    assert parse_html(b"").fingerprint != parse_html(b" ").fingerprint


# -- broken input never raises ----------------------------------------------------


BROKEN = {
    "empty": b"",
    "unclosed": b"<html><head><title>T</title><body><div><p><a href='/x'>x<table><tr><td>cell",
    "stray end tags": b"</div></body></html></p><p>text</b></i>",
    "bad attributes": b'<a href="/x" href=/y """ = ><<<>>>>text</a',
    "nul bytes": b"<p>a\x00b</p><a href='/\x00z'>z</a>",
    "comment never ends": b"<p>before</p><!-- forever <a href=/hidden>",
    "script never ends": b"<script>var a = '<a href=/x>';",
    "lone surrogate utf8": b"<p>\xed\xa0\x80</p>",
    "only text": b"just some words",
}


@pytest.mark.parametrize("body", list(BROKEN.values()), ids=list(BROKEN))
def test_broken_html_never_raises(body: bytes) -> None:
    doc = parse_html(body)
    assert doc.fingerprint


def test_unclosed_tags_still_give_links_and_text() -> None:
    doc = parse_html(BROKEN["unclosed"])
    assert doc.title == "T"
    assert doc.links == ["/x"]
    assert doc.text_chars > 0


@pytest.mark.parametrize("seed", range(5))
def test_binary_garbage_never_raises(seed: int) -> None:
    rng = random.Random(seed)
    body = bytes(rng.randrange(256) for _ in range(4096))
    doc = parse_html(body, rng.choice([None, "utf-8", "no-such-charset", "utf-16"]))
    assert isinstance(doc.links, list)
    assert doc.fingerprint


def _block_depth(text: str) -> int:
    """The deepest nesting of block elements in `text` (the guard's own tag pattern)."""
    depth = deepest = 0
    for match in parsing._BLOCK_TAG_RE.finditer(text):
        depth = max(0, depth - 1) if match.group(1) else depth + 1
        deepest = max(deepest, depth)
    return deepest


@pytest.mark.parametrize("tag", ["div", "ul", "blockquote", "section", "span", "b"])
def test_100k_deep_nesting_reaches_lexbor_capped(tag: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unguarded, 100,000 nested <div>s take ~20 s in lexbor (each block start tag
    searches the whole stack): what lexbor is given must nest blocks no deeper than
    MAX_BLOCK_DEPTH. Inline tags (span, b) cost lexbor nothing per level and pass as
    they are. A structural check rather than a timer: it holds on a loaded machine."""
    seen: list[str] = []
    real = parsing.LexborHTMLParser

    def spy(text: str) -> object:
        seen.append(text)
        return real(text)

    monkeypatch.setattr(parsing, "LexborHTMLParser", spy)
    body = (f"<{tag}>" * 100_000 + "<a href='/deep'>deep</a>" + f"</{tag}>" * 100_000).encode()
    doc = parse_html(body)
    assert doc.links == ["/deep"]
    assert doc.text_chars == len("deep")
    assert len(seen) == 1
    assert _block_depth(seen[0]) <= MAX_BLOCK_DEPTH
    assert _block_depth(body.decode()) == (100_000 if tag not in ("span", "b") else 0)


def test_moderate_nesting_is_untouched() -> None:
    depth = MAX_BLOCK_DEPTH - 12
    body = (
        "<div>" * depth
        + "<a href=/in>in</a>"
        + "</div>" * depth
        + "<p><a href=/out>out</a></p>" * 5000
    ).encode()
    doc = parse_html(body)
    assert doc.links == ["/in"] + ["/out"] * 5000


# -- charsets ---------------------------------------------------------------------

TEXT = "Café — “quoted” naïve résumé, €5, don’t"


def test_charset_from_headers() -> None:
    assert charset_from_headers([("Content-Type", "text/html; charset=ISO-8859-1")]) == (
        "ISO-8859-1"
    )
    assert charset_from_headers([{"name": "content-type", "value": 'text/html; charset="utf-8"'}])
    assert charset_from_headers([("Content-Type", "text/html")]) is None
    assert charset_from_headers([("X-Charset", "charset=utf-8")]) is None
    assert charset_from_headers([]) is None


def test_header_charset_is_used() -> None:
    body = f"<p>{TEXT}</p>".encode("windows-1252")
    assert decode_html(body, "windows-1252") == f"<p>{TEXT}</p>"
    koi8 = "<p>Привет, мир</p>"
    assert decode_html(koi8.encode("koi8-r"), "koi8-r") == koi8
    headers = [("Content-Type", "text/html; charset=koi8-r")]
    doc = parse_html("<title>Привет, мир</title>".encode("koi8-r"), charset_from_headers(headers))
    assert doc.title == "Привет, мир"


def test_header_charset_wins_over_meta() -> None:
    body = f'<meta charset="utf-8"><p>{TEXT}</p>'.encode("windows-1252")
    assert TEXT in decode_html(body, "windows-1252")


def test_iso_8859_1_label_means_windows_1252() -> None:
    # WHATWG: "iso-8859-1" is decoded as windows-1252, whose 0x80–0x9F are punctuation.
    body = f"<p>{TEXT}</p>".encode("windows-1252")
    assert decode_html(body, "ISO-8859-1") == f"<p>{TEXT}</p>"
    assert decode_html(body, "latin1") == f"<p>{TEXT}</p>"


@pytest.mark.parametrize(
    "meta",
    [
        b'<meta charset="koi8-r">',
        b'<meta http-equiv="Content-Type" content="text/html; charset=koi8-r">',
    ],
)
def test_meta_charset_is_used(meta: bytes) -> None:
    body = meta + "<p>Привет, мир</p>".encode("koi8-r")
    assert "Привет, мир" in decode_html(body)


def test_meta_utf16_means_utf8() -> None:
    # A <meta> was read as ASCII, so it cannot really mean UTF-16 (HTML prescan rule).
    for text in ('<meta charset="utf-16"><p>héllo wörld</p>', "<meta charset=utf-16><p>ok</p>"):
        assert decode_html(text.encode()) == text


def test_bad_declarations_fall_through() -> None:
    body = f"<p>{TEXT}</p>".encode()
    assert decode_html(body, "no-such-charset") == f"<p>{TEXT}</p>"
    assert decode_html(body, "ascii") == f"<p>{TEXT}</p>"  # undecodable as declared
    assert decode_html(b'<meta charset="bogus"><p>ok</p>') == '<meta charset="bogus"><p>ok</p>'


@pytest.mark.parametrize(
    ("body", "declared"),
    [
        (b"\xef\xbb\xbf" + "<p>Café</p>".encode(), None),
        (b"\xef\xbb\xbf" + "<p>Café</p>".encode(), "windows-1252"),  # the BOM wins
        (b"\xff\xfe" + "<p>Café</p>".encode("utf-16-le"), None),
        (b"\xfe\xff" + "<p>Café</p>".encode("utf-16-be"), "iso-8859-1"),
    ],
)
def test_bom(body: bytes, declared: str | None) -> None:
    assert decode_html(body, declared) == "<p>Café</p>"


def test_utf8_without_declaration() -> None:
    assert decode_html(f"<p>{TEXT}</p>".encode()) == f"<p>{TEXT}</p>"


@pytest.mark.parametrize(
    "text",
    [
        f"<p>{TEXT}</p>",
        "<html><head><title>Le café</title></head><body><p>Le café est très bon. « Où est "
        "l’été ? » dit-il — naïve, déjà vu, façade, crème brûlée. “Smart quotes” and "
        "the € sign.</p></body></html>",
        "<p>Don’t panic — it’s “fine”. Prices from €5… Müller, Zoë, São Paulo.</p>",
    ],
)
def test_windows_1252_is_detected_without_declaration(text: str) -> None:
    assert decode_html(text.encode("windows-1252")) == text


def test_detection_still_finds_non_latin_encodings() -> None:
    text = (
        "<html><body><p>Привет, мир! Это тестовая страница на русском языке. "
        "Съешь же ещё этих мягких французских булок.</p></body></html>"
    )
    assert decode_html(text.encode("windows-1251")) == text


def test_parse_uses_the_declared_charset() -> None:
    body = f"<title>{TEXT}</title>".encode("windows-1252")
    assert parse_html(body, "windows-1252").title == TEXT
    assert parse_html(body).title == TEXT
