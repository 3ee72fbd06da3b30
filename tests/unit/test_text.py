"""A page's main text, description, headings and language (streams/core/text.py)."""

from __future__ import annotations

import time

import pytest

from streams.core.text import MAX_TEXT_CHARS, PageText, language_of, page_text

API_PAGE = b"""<!DOCTYPE html><html><head><title>json</title>
<meta name="description" content="  Encode and   decode JSON. ">
</head><body>
<nav><a href="/">Home</a> | <a href="/about">About</a> | <a href="/modules">Modules</a></nav>
<div class="body" role="main">
<h1>json &mdash; JSON encoder and decoder</h1>
<p>JSON (JavaScript Object Notation) is a lightweight data interchange format inspired by
JavaScript object literal syntax. This module exposes an API familiar to users of the
standard library marshal and pickle modules.</p>
<h2>Basic Usage</h2>
<dl class="py function">
<dt class="sig" id="json.dumps">json.dumps(<em>obj</em>, <em>*</em>, <em>indent=None</em>)</dt>
<dd><p>Serialize <code>obj</code> to a JSON formatted str using this conversion table.</p></dd>
</dl>
<pre>&gt;&gt;&gt; import json
&gt;&gt;&gt; json.dumps(['foo', {'bar': ('baz', None, 1.0, 2)}], sort_keys=True)</pre>
</div>
<footer>Copyright 2001-2024, Python Software Foundation. Last updated on Nov 28.</footer>
</body></html>"""


def test_the_main_text_keeps_identifiers_code_and_definitions() -> None:
    found = page_text(API_PAGE)
    for kept in ("json.dumps(obj", "sort_keys=True", "Serialize obj", "lightweight data"):
        assert kept in found.text, (kept, found.text)
    assert "Home | About" not in found.text  # the navigation is boilerplate
    assert found.description == "Encode and decode JSON."
    assert found.headings == ["json — JSON encoder and decoder", "Basic Usage"]
    assert found.language == "en"


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("Das ist ein deutscher Satz über die Stadt, das Land und die Leute dort.", "de"),
        ("Ceci est une phrase française sur la ville, le pays et les gens qui y vivent.", "fr"),
        ("日本語の文章です。東京の天気はとても良いです。今日は友達と公園へ行きました。" * 3, "ja"),
        ("日本語の文章です。", ""),  # too short to tell
        ("too short", ""),
        ("", ""),
    ],
)
def test_language(text: str, language: str) -> None:
    assert language_of(text) == language


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"   ",
        b"\x00\xff\xfe garbage \x80\x81",
        b"<html><body><p>unclosed <b>tags <i>everywhere",
        b"<" * 100_000,
        b"<div>" * 50_000 + b"deep" + b"</div>" * 50_000,
    ],
)
def test_broken_or_hostile_html_gives_a_page_text(body: bytes) -> None:
    assert isinstance(page_text(body), PageText)


def test_a_huge_page_is_read_bounded() -> None:
    body = b"<html><body>" + b"<p>" + b"word " * 4_000_000 + b"</p></body></html>"  # 20 MB
    start = time.process_time()
    found = page_text(body)
    assert len(found.text) <= MAX_TEXT_CHARS
    assert time.process_time() - start < 10  # bounded input: seconds at worst, not minutes


def test_a_short_page_keeps_its_text() -> None:
    found = page_text(b"<html><body><p>Hello there, reader.</p></body></html>")
    assert "Hello there, reader." in found.text


def test_the_declared_charset_is_used() -> None:
    found = page_text(
        "<html><body><p>Grüße aus Köln</p></body></html>".encode("latin-1"), "latin-1"
    )
    assert "Grüße aus Köln" in found.text


@pytest.mark.parametrize(
    ("head", "canonical"),
    [
        ("", ""),
        ('<link rel="canonical" href=" https://a.example/x ">', "https://a.example/x"),
        ('<link rel="alternate canonical" href="/y">', "/y"),
        ('<link rel="Canonical" href="/z"><link rel="canonical" href="/second">', "/z"),
        ('<link rel="stylesheet" href="/s.css">', ""),
        ('<link rel="canonical">', ""),
    ],
)
def test_the_canonical_the_head_names(head: str, canonical: str) -> None:
    html = f"<html><head>{head}</head><body><p>Some text here.</p></body></html>"
    assert page_text(html.encode()).canonical == canonical
