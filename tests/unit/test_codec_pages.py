"""Unit tests for streams.codec's page and parsed batches: headers, links, numbers and
strings packed, handed-off bodies."""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest

from streams import codec
from streams.codec import DecodeError
from streams.store.warc import payload_digest
from tests.unit.codec_helpers import (
    EXAMPLES,
    PAGE,
    PAGE_DIGEST,
    _numbers_of,
    _packed_pages,
    _raw,
    _repacked,
    _strings,
    _texts,
)


def test_headers_travel_as_lines_or_as_two_arrays() -> None:
    page = {**PAGE, "headers": [{"name": "A", "value": "1"}, {"name": "A", "value": ""}]}
    packed = codec.wire_form("page_batch", {"pages": [page]})["pages"][0]
    assert packed["text"] == PAGE["url"] + PAGE["ip"] + "A\n1\nA\n\n"
    assert (packed["header_names"], packed["header_values"]) == ([], [])
    # The stage's own dict is not changed by encoding it.
    assert "header_lines" not in page
    # A line feed in a value: the headers travel as two arrays instead.
    odd = {**PAGE, "headers": [{"name": "B", "value": "x\ny"}, {"name": "C", "value": "z"}]}
    packed_odd = codec.wire_form("page_batch", {"pages": [odd]})["pages"][0]
    assert packed_odd["text"] == PAGE["url"] + PAGE["ip"]
    assert (packed_odd["header_names"], packed_odd["header_values"]) == (["B", "C"], ["x\ny", "z"])
    for p in (page, odd, {**PAGE, "headers": []}):
        assert codec.decode("page_batch", codec.encode("page_batch", {"pages": [p]})) == {
            "pages": [p]
        }
        parsed = {**EXAMPLES["parsed_batch"][0]["pages"][0], "page": p}
        assert codec.decode("parsed_batch", codec.encode("parsed_batch", {"pages": [parsed]})) == {
            "pages": [parsed]
        }
    # Headers listed though none holds a line feed (a plain Avro writer may): the same.
    plain = _packed_pages(header_lines="", header_names=["A"], header_values=["1"])
    assert codec.decode("page_batch", _raw("page_batch", plain))["pages"][0]["headers"] == [
        {"name": "A", "value": "1"}
    ]
    malformed: list[dict[str, Any]] = [
        {"header_lines": "", "header_names": ["B", "C"], "header_values": ["1"]},
        {"header_lines": "A\n1\nB\n", "header_names": [], "header_values": []},
        {"header_lines": "A\n1", "header_names": [], "header_values": []},
        {"header_lines": "A\n1\nA\n\n", "header_names": ["A"], "header_values": ["1"]},
    ]
    for bad in malformed:
        with pytest.raises(DecodeError, match="header"):
            codec.decode("page_batch", _raw("page_batch", _packed_pages(**bad)))
        with pytest.raises(DecodeError, match="header"):
            codec.decode("parsed_batch", _repacked(**bad))


@pytest.mark.parametrize(
    "links",
    [[], [""], ["", ""], ["/a", "", "https://b.example/ü"], ["/a\nb", "/c"], ["\n"], ["x\r", "y"]],
)
def test_links_round_trip_packed_or_listed(links: list[str]) -> None:
    item = {**EXAMPLES["parsed_batch"][0]["pages"][0], "links": links}
    packed = codec.wire_form("parsed_batch", {"pages": [item]})["pages"][0]
    link_lines = _strings(packed)["link_lines"]
    if any("\n" in link for link in links):
        assert (link_lines, packed["links"]) == ("", links)
    else:
        assert packed["links"] == [] and link_lines == "".join(f"{x}\n" for x in links)
    decoded = codec.decode("parsed_batch", codec.encode("parsed_batch", {"pages": [item]}))
    assert decoded == {"pages": [item]}
    assert item["links"] is links  # the stage's dict is left alone


def test_malformed_link_lines_are_a_decode_error() -> None:
    for packed in (_repacked(link_lines="/a"), _repacked(link_lines="/a\n", links=["/b"])):
        with pytest.raises(DecodeError, match="links"):
            codec.decode("parsed_batch", packed)


def test_a_handed_off_page_travels_without_its_body() -> None:
    item = EXAMPLES["parsed_batch"][0]["pages"][0]
    wire = codec.wire_form("parsed_batch", {"pages": [item]})
    assert wire["layout"] == codec.PARSED_LAYOUT
    page = wire["pages"][0]
    assert (_numbers_of(page)[3] & 2, page["body"]) == (2, b"")
    inline = {**item, "page": PAGE}
    inline_page = codec.wire_form("parsed_batch", {"pages": [inline]})["pages"][0]
    assert (_numbers_of(inline_page)[3] & 2, inline_page["body"]) == (0, PAGE["body"])
    with pytest.raises(ValueError, match="digest"):
        codec.encode("parsed_batch", {"pages": [{**item, "digest": ""}]})
    with pytest.raises(DecodeError, match="both handed off and inline"):
        codec.decode(
            "parsed_batch", _raw("parsed_batch", {**wire, "pages": [{**page, "body": b"x"}]})
        )
    with pytest.raises(DecodeError, match="without its digest"):
        codec.decode("parsed_batch", _repacked(digest=""))


def test_a_parsed_page_s_numbers_and_strings_travel_packed() -> None:
    item = EXAMPLES["parsed_batch"][0]["pages"][1]
    page = codec.wire_form("parsed_batch", {"pages": [item]})["pages"][0]
    assert _numbers_of(page)[:8] == [
        200,
        2,
        3,
        1 | 4 | 16,
        len(PAGE["body"]),
        -(2**63),
        1_700_000_000.25,
        12.5,
    ]
    assert _strings(page) == {
        "url": PAGE["url"],
        "ip": PAGE["ip"],
        "digest": PAGE_DIGEST,
        "fingerprint": "0123abcd",
        "title": "Titre é",
        "base": "https://example.com/base/",
        "header_lines": "Content-Type\ntext/html; charset=utf-8\n",
        "link_lines": "/a\nhttps://other.example/\n",
    }
    # a null ip or base is length -1, an empty one 0
    for ip, base in ((None, None), ("", "")):
        odd = {**item, "page": {**PAGE, "ip": ip}, "base": base}
        strings = _strings(codec.wire_form("parsed_batch", {"pages": [odd]})["pages"][0])
        assert (strings["ip"], strings["base"]) == (ip, base)
        assert codec.decode("parsed_batch", codec.encode("parsed_batch", {"pages": [odd]})) == {
            "pages": [odd]
        }
    assert codec.decode("parsed_batch", _repacked()) == {
        "pages": [EXAMPLES["parsed_batch"][0]["pages"][0]]
    }


def _bump(index: int, by: int) -> Any:
    def change(nums: list[Any]) -> list[Any]:
        nums[index] += by
        return nums

    return change


@pytest.mark.parametrize(
    "change",
    [
        _bump(3, 32),  # an unknown flag
        _bump(8, 1),  # the url's length past the text
        _bump(8, -1),  # text left over
        lambda n: [*n[:8], -1, n[9], n[10], n[11], n[12], n[13] + n[8] + 1, *n[14:]],  # no url
        lambda n: [*n[:9], -2, *n[10:13], n[13] + 1, *n[14:]],  # a length of -2
    ],
)
def test_inconsistent_parsed_page_numbers_are_a_decode_error(change: Any) -> None:
    page = codec.wire_form("parsed_batch", EXAMPLES["parsed_batch"][0])["pages"][0]
    numbers = change(_numbers_of(page))
    with pytest.raises(DecodeError, match="ParsedPage"):
        codec.decode("parsed_batch", _repacked(numbers))


def test_parsed_page_numbers_of_another_size_are_a_decode_error() -> None:
    wire = codec.wire_form("parsed_batch", EXAMPLES["parsed_batch"][0])
    for raw in (b"", wire["pages"][0]["numbers"][:-1], wire["pages"][0]["numbers"] + b"\x00"):
        bad = {**wire, "pages": [{**wire["pages"][0], "numbers": raw}]}
        with pytest.raises(DecodeError, match="ParsedPage: numbers"):
            codec.decode("parsed_batch", _raw("parsed_batch", bad))


def test_random_parsed_batches_round_trip() -> None:
    rng = random.Random(11)
    text = _texts(rng, with_cr=True)

    for _ in range(300):
        pages: list[dict[str, Any]] = []
        for _ in range(rng.randrange(0, 6)):
            body = rng.choice([None, b"", b"<html>\x00\xff</html>" * rng.randrange(1, 4)])
            page = {
                "url": text() or "http://a.example/",
                "status": rng.choice([200, 404, 0, -1, 2**31 - 1]),
                "headers": [{"name": text(2), "value": text()} for _ in range(rng.randrange(4))],
                "body": body,
                "fetched_at": rng.choice([0.0, 1_795_385_229.875, -1.5, 1e300]),
                "elapsed_ms": rng.random() * 1000,
                "ip": rng.choice([None, "", "127.0.0.1", text()]),
                "depth": rng.choice([0, 3, 2**31 - 1]),
                "truncated": rng.random() < 0.3,
            }
            digest = payload_digest(body) if body is not None else "sha1:" + text(3) + "D"
            pages.append(
                {
                    "page": page,
                    "digest": digest,
                    "size": len(body) if body is not None else rng.choice([0, 8184, 2**40]),
                    "fingerprint": text(),
                    "title": text(),
                    "links": [text() for _ in range(rng.randrange(6))],
                    "base": rng.choice([None, "", "https://b.example/", text()]),
                    "nofollow": rng.random() < 0.3,
                    "noindex": rng.random() < 0.3,
                    "duplicate_of": rng.choice(
                        [None, {"url": text(), "digest": text(), "fetched_at": 5.0}]
                    ),
                    "simhash": rng.choice([None, 0, 5, -(2**63), 2**63 - 1]),
                    "band": rng.choice([0, 1, 3]),
                    "near_duplicate_of": rng.choice([None, {"url": text(), "distance": 2}]),
                }
            )
        record = {"pages": pages}
        assert codec.decode("parsed_batch", codec.encode("parsed_batch", record)) == record


def test_inconsistent_packed_pages_are_a_decode_error() -> None:
    wire = codec.wire_form("page_batch", {"pages": [PAGE]})
    assert wire["layout"] == codec.PAGE_LAYOUT
    fields = list(struct.unpack("<iiBdd3i", wire["pages"][0]["numbers"]))
    assert fields == [200, 2, 1, 1_700_000_000.25, 12.5, 25, 13, 38]

    def with_numbers(*changes: tuple[int, Any]) -> bytes:
        changed = list(fields)
        for index, value in changes:
            changed[index] = value
        page = {**wire["pages"][0], "numbers": struct.pack("<iiBdd3i", *changed)}
        return _raw("page_batch", {**wire, "pages": [page]})

    for bad in (
        with_numbers((2, 2)),  # an unknown flag
        with_numbers((5, 26)),  # past the text
        with_numbers((7, 37)),  # text left over
        with_numbers((5, -1), (6, 39)),  # a null url
        with_numbers((6, -2), (7, 53)),
    ):
        with pytest.raises(DecodeError, match="PackedPage"):
            codec.decode("page_batch", bad)
    short = {**wire["pages"][0], "numbers": wire["pages"][0]["numbers"][:-1]}
    with pytest.raises(DecodeError, match="PackedPage: numbers"):
        codec.decode("page_batch", _raw("page_batch", {**wire, "pages": [short]}))


def test_random_page_batches_round_trip() -> None:
    rng = random.Random(17)
    text = _texts(rng, with_cr=True)

    for _ in range(300):
        pages = [
            {
                "url": text(),
                "status": rng.choice([200, 404, 0, -1, 2**31 - 1]),
                "headers": [{"name": text(2), "value": text()} for _ in range(rng.randrange(4))],
                "body": rng.choice([b"", b"<html>\x00\xff</html>" * rng.randrange(1, 4)]),
                "fetched_at": rng.choice([0.0, 1_795_385_229.875, -1.5, 1e300]),
                "elapsed_ms": rng.random() * 1000,
                "ip": rng.choice([None, "", "127.0.0.1", text()]),
                "depth": rng.choice([0, 3, 2**31 - 1]),
                "truncated": rng.random() < 0.3,
            }
            for _ in range(rng.randrange(0, 6))
        ]
        data = codec.encode("page_batch", {"pages": pages})
        assert codec.decode("page_batch", data) == {"pages": pages}
