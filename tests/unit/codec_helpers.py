"""Records and wire-form helpers shared by the tests of streams.codec (test_codec*.py)."""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from typing import Any

from streams import codec
from streams.store.warc import payload_digest

PAGE: dict[str, Any] = {
    "url": "https://example.com/a?b=1",
    "status": 200,
    "headers": [{"name": "Content-Type", "value": "text/html; charset=utf-8"}],
    "body": b"<html><title>\xc3\xa9</title>\x00\xff</html>",
    "fetched_at": 1_700_000_000.25,
    "elapsed_ms": 12.5,
    "ip": "93.184.216.34",
    "depth": 2,
    "truncated": True,
}

PAGE_DIGEST = payload_digest(PAGE["body"])

#: One representative record per schema, using every field (unions both ways).
EXAMPLES: dict[str, list[dict[str, Any]]] = {
    "seed": [{"url": "https://example.com/", "priority": -3}],
    "url_batch": [
        {
            "urls": [
                {
                    "url": "https://example.com/x",
                    "depth": 1,
                    "priority": 5,
                    "via": "seed",
                    "inlinks": 1,
                    "kind": "page",
                },
                {
                    "url": "http://b.example/ü",
                    "depth": 0,
                    "priority": 0,
                    "via": None,
                    "inlinks": 3,
                    "kind": "sitemap",
                },
            ]
        },
        {"urls": []},
    ],
    "frontier_event": [
        {
            "new_urls": [
                {
                    "url": "https://example.com/",
                    "depth": 0,
                    "priority": 0,
                    "via": None,
                    "inlinks": 2,
                    "kind": "page",
                }
            ],
            "completions": [
                {
                    "url": "https://example.com/robots.txt",
                    "host": "example.com",
                    "kind": "robots",
                    "status": 200,
                    "outcome": "ok",
                    "elapsed_ms": 3.5,
                    "finished_at": 1.5,
                    "retry_after": None,
                    "body": b"User-agent: *\nDisallow: /private\n",
                    "dispatched_at": 1.25,
                    "reason": "",
                },
                {
                    "url": "https://example.com/a",
                    "host": "example.com",
                    "kind": "page",
                    "status": 429,
                    "outcome": "http-error",
                    "elapsed_ms": 1.0,
                    "finished_at": 2.0,
                    "retry_after": 30.0,
                    "body": None,
                    "dispatched_at": 0.0,
                    "reason": "HTTP 429",
                },
            ],
            "tick": False,
        },
        {"new_urls": [], "completions": [], "tick": True},
    ],
    "fetch_batch": [
        {
            "requests": [
                {
                    "url": "https://example.com/",
                    "host": "example.com",
                    "kind": "page",
                    "depth": 4,
                    "dispatched_at": 10.0,
                    "url_id": -(2**63),
                }
            ]
        }
    ],
    "page_batch": [{"pages": [PAGE, {**PAGE, "ip": None, "headers": [], "body": b""}]}],
    "parsed_batch": [
        {
            "pages": [
                {
                    "page": {**PAGE, "body": None},
                    "digest": PAGE_DIGEST,
                    "size": 12345,
                    "fingerprint": "77",
                    "title": "",
                    "links": ["/b"],
                    "base": None,
                    "nofollow": False,
                    "noindex": False,
                    "duplicate_of": None,
                    "simhash": 5,
                    "band": 1,
                    "near_duplicate_of": None,
                },
                {
                    "page": PAGE,
                    "digest": PAGE_DIGEST,
                    "size": len(PAGE["body"]),
                    "fingerprint": "0123abcd",
                    "title": "Titre é",
                    "links": ["/a", "https://other.example/"],
                    "base": "https://example.com/base/",
                    "nofollow": True,
                    "noindex": False,
                    "duplicate_of": {
                        "url": "https://example.com/orig",
                        "digest": "sha1:ABC",
                        "fetched_at": 5.0,
                    },
                    "simhash": -(2**63),
                    "band": 3,
                    "near_duplicate_of": {"url": "https://example.com/near", "distance": 2},
                },
                {
                    "page": PAGE,
                    "digest": PAGE_DIGEST,
                    "size": len(PAGE["body"]),
                    "fingerprint": "ff",
                    "title": "",
                    "links": [],
                    "base": None,
                    "nofollow": False,
                    "noindex": True,
                    "duplicate_of": None,
                    "simhash": None,
                    "band": 0,
                    "near_duplicate_of": None,
                },
            ]
        }
    ],
    "crawl_log": [
        {
            "url": "https://example.com/",
            "host": "example.com",
            "stage": "fetch",
            "outcome": "ok",
            "status": 200,
            "reason": "",
            "bytes": 2**40,
            "elapsed_ms": 1.25,
            "depth": 1,
            "at": 1_700_000_000.0,
            "url_id": 2**63 - 1,
        }
    ],
    "dead_letter": [
        {
            "stage": "seeds",
            "topic": "seine.seeds",
            "partition": 3,
            "offset": 2**35,
            "key": b"k",
            "value": b"\x00\x01garbage",
            "error": "InvalidSeed: empty seed",
            "at": 1.0,
        },
        {
            "stage": "parse",
            "topic": "seine.parse",
            "partition": 0,
            "offset": 0,
            "key": None,
            "value": None,
            "error": "x",
            "at": 0.0,
        },
    ],
    "anchor_batch": [
        {
            "anchors": [
                {"url": "https://example.com/a", "text": "the A page", "site": "example.org"},
                {"url": "https://example.com/b", "text": "", "site": "example.com"},
            ]
        },
        {"anchors": []},
    ],
    "document": [
        {
            "url": "https://example.com/a?ref=x",
            "canonical": "https://example.com/a",
            "status": 200,
            "fetched_at": 1_700_000_000.5,
            "last_modified": None,
            "content_type": "text/html",
            "charset": "utf-8",
            "language": "en",
            "title": "A",
            "description": "ü€",
            "headings": ["One", "Two"],
            "text": "main text\nwith lines",
            "outlinks": [{"url": "https://example.com/b", "anchor": "b", "nofollow": False}],
            "anchors": ["a page"],
            "digest": "sha1:ABC",
            "simhash": -(2**63),
            "size": 2**33,
            "depth": 2,
            "site": "example.com",
            "noarchive": True,
        }
    ],
}


def _texts(rng: random.Random, *, with_cr: bool) -> Callable[..., str]:
    """Random strings for the random round trips: empty, non-ASCII, line feeds (which
    send strings to the array fallback), long, and CR when `with_cr`."""
    words = ["", "a", "ü€", "\n", "x" * 70, "/p?q=1", *(["\r"] if with_cr else [])]

    def text(k: int = 4) -> str:
        return "".join(rng.choices(words, k=rng.randrange(0, k)))

    return text


def _raw(name: str, record: dict[str, Any]) -> bytes:
    """Bytes of a wire record written by plain fastavro, bypassing the codec's checks."""
    import io

    import fastavro

    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, codec.schema(name), record)
    return buf.getvalue()


# --- parsed_batch: a page's numbers as bytes, its strings as one

STRING_FIELDS = (
    "url",
    "ip",
    "digest",
    "fingerprint",
    "title",
    "base",
    "header_lines",
    "link_lines",
)


def _numbers_of(page: dict[str, Any]) -> list[Any]:
    return list(struct.unpack("<iiiBqqdd8i", page["numbers"]))


def _strings(page: dict[str, Any]) -> dict[str, str | None]:
    """The strings of a ParsedPage wire record, cut out of its text by its lengths."""
    lengths = _numbers_of(page)[8:]
    out: dict[str, str | None] = {}
    text, end = page["text"], 0
    for field, n in zip(STRING_FIELDS, lengths, strict=True):
        out[field] = None if n < 0 else text[end : end + n]
        end += max(n, 0)
    assert end == len(text)
    return out


def _repacked(numbers: list[Any] | None = None, **over: Any) -> bytes:
    """A parsed_batch message of one page (the examples' first) whose wire record has
    `over` for its strings or other fields, or `numbers`, written by plain fastavro."""
    page = codec.wire_form("parsed_batch", EXAMPLES["parsed_batch"][0])["pages"][0]
    strings = _strings(page)
    nums = _numbers_of(page)
    for field in STRING_FIELDS:
        if field in over:
            strings[field] = over.pop(field)
    nums[8:] = [-1 if strings[f] is None else len(strings[f] or "") for f in STRING_FIELDS]
    page["text"] = "".join(strings[f] or "" for f in STRING_FIELDS)
    page["numbers"] = struct.pack("<iiiBqqdd8i", *(numbers if numbers is not None else nums))
    page.update(over)
    return _raw("parsed_batch", {"layout": codec.PARSED_LAYOUT, "pages": [page]})


# --- page_batch: a page's numbers and strings packed


def _packed_pages(
    header_lines: str, header_names: list[str], header_values: list[str]
) -> dict[str, Any]:
    """The page_batch wire record of PAGE with these header fields, as they are (so that
    they may be malformed, as a plain Avro writer could put them on the topic)."""
    page = codec.wire_form("page_batch", {"pages": [{**PAGE, "headers": []}]})["pages"][0]
    numbers = list(struct.unpack("<iiBdd3i", page["numbers"]))
    numbers[-1] = len(header_lines)
    page = {
        **page,
        "numbers": struct.pack("<iiBdd3i", *numbers),
        "text": page["text"] + header_lines,
        "header_names": header_names,
        "header_values": header_values,
    }
    return {"layout": codec.PAGE_LAYOUT, "pages": [page]}
