"""A page's document (streams/core/documents.py): its id, its fields, and the Avro
record any reader decodes from schemas/document.avsc alone."""

from __future__ import annotations

import io
import json
from importlib import resources

import fastavro
import pytest

from streams import codec
from streams.core.documents import MAX_ANCHORS, canonical_id, document
from streams.core.text import page_text

URL = "https://www.example.com/docs/json.html"
HTML = b"""<html><head><title>json</title><meta name="description" content="JSON tools">
</head><body><main><h1>json</h1><p>The json module encodes and decodes JSON documents
for programs that talk to web services and read configuration files.</p></main></body>
</html>"""


@pytest.mark.parametrize(
    ("declared", "expected"),
    [
        (None, URL),
        ("", URL),
        ("https://www.example.com/docs/json.html", URL),
        ("/docs/json", "https://www.example.com/docs/json"),
        ("json.html?utm=1#top", "https://www.example.com/docs/json.html?utm=1"),
        ("https://example.com/docs/json", "https://example.com/docs/json"),  # www: same site
        ("https://other.example/docs/json", URL),  # cross-site: recorded, not obeyed
        ("javascript:alert(1)", URL),
        ("http://[bad", URL),
    ],
)
def test_canonical_id(declared: str | None, expected: str) -> None:
    assert canonical_id(URL, declared) == expected


def page() -> dict[str, object]:
    return {
        "url": URL,
        "status": 200,
        "fetched_at": 1_700_000_000.5,
        "depth": 2,
        "headers": [
            {"name": "Content-Type", "value": 'text/HTML; charset="UTF-8"'},
            {"name": "Last-Modified", "value": "Wed, 21 Oct 2015 07:28:00 GMT"},
        ],
    }


def test_a_document_from_a_page() -> None:
    doc = document(
        page(),
        title="json",
        text=page_text(HTML),
        digest="sha1:ABC",
        size=len(HTML),
        simhash=-5,
        canonical_url="/docs/json",
        outlinks=[{"url": "https://www.example.com/", "anchor": "home", "nofollow": False}],
        anchors=["JSON  docs", "json docs", "JSON docs", ""],
    )
    assert doc["canonical"] == "https://www.example.com/docs/json"
    assert doc["site"] == "example.com"
    assert (doc["content_type"], doc["charset"]) == ("text/html", "utf-8")
    assert doc["last_modified"] == 1445412480.0
    assert doc["description"] == "JSON tools" and doc["headings"] == ["json"]
    assert "encodes and decodes JSON" in doc["text"] and doc["language"] == "en"
    assert doc["anchors"] == ["JSON docs", "json docs"]  # whitespace folded, repeats once


def test_an_anchor_flood_stays_bounded() -> None:
    doc = document(
        page(),
        title="",
        text=page_text(b""),
        digest="d",
        size=0,
        anchors=(f"anchor {i}" for i in range(100_000)),
    )
    assert len(doc["anchors"]) == MAX_ANCHORS


def test_any_avro_reader_decodes_a_document_from_the_avsc_alone() -> None:
    doc = document(page(), title="json", text=page_text(HTML), digest="sha1:ABC", size=9)
    data = codec.encode("document", dict(doc))
    avsc = json.loads(resources.files("schemas").joinpath("document.avsc").read_text("utf-8"))
    decoded = fastavro.schemaless_reader(io.BytesIO(data), fastavro.parse_schema(avsc))
    assert decoded == doc
