"""Unit tests for streams.codec: every schema round-trips, bad bytes raise DecodeError."""

from __future__ import annotations

import json
import random
import struct
from collections.abc import Callable
from importlib import resources
from typing import Any

import pytest

import topology
from streams import codec
from streams.codec import DecodeError
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
}


def avsc_names() -> set[str]:
    return {
        p.name.removesuffix(".avsc")
        for p in resources.files("schemas").iterdir()
        if p.name.endswith(".avsc")
    }


def _texts(rng: random.Random, *, with_cr: bool) -> Callable[..., str]:
    """Random strings for the random round trips: empty, non-ASCII, line feeds (which
    send strings to the array fallback), long, and CR when `with_cr`."""
    words = ["", "a", "ü€", "\n", "x" * 70, "/p?q=1", *(["\r"] if with_cr else [])]

    def text(k: int = 4) -> str:
        return "".join(rng.choices(words, k=rng.randrange(0, k)))

    return text


def test_every_avsc_file_is_registered_and_has_an_example() -> None:
    assert avsc_names() == set(codec.SCHEMA_FILES)
    assert set(EXAMPLES) == set(codec.SCHEMA_FILES)


def test_every_topic_names_an_existing_schema() -> None:
    for spec in topology.TOPICS:
        assert spec.schema in codec.SCHEMA_FILES, spec
        codec.schema(spec.schema)  # parses


def test_schema_files_are_valid_json_records() -> None:
    for name in codec.SCHEMA_FILES:
        text = resources.files("schemas").joinpath(f"{name}.avsc").read_text("utf-8")
        data = json.loads(text)
        assert data["type"] == "record"
        assert data["namespace"] == "seine"


def test_unknown_schema_name_is_a_clear_keyerror() -> None:
    with pytest.raises(KeyError, match="no Avro schema named 'nope'"):
        codec.encode("nope", {})


@pytest.mark.parametrize(
    ("name", "record"),
    [(name, record) for name, records in EXAMPLES.items() for record in records],
)
def test_round_trip(name: str, record: dict[str, Any]) -> None:
    data = codec.encode(name, record)
    assert isinstance(data, bytes)
    assert codec.decode(name, data) == record
    # Kafka clients may hand over other buffer types; decode accepts them all.
    buffers: list[Any] = [bytearray(data), memoryview(data)]
    for buffer in buffers:
        assert codec.decode(name, buffer) == record


def test_defaults_are_filled_in() -> None:
    decoded = codec.decode("seed", codec.encode("seed", {"url": "http://a.example/"}))
    assert decoded == {"url": "http://a.example/", "priority": 0}
    event = codec.decode("frontier_event", codec.encode("frontier_event", {"tick": True}))
    assert event == {"new_urls": [], "completions": [], "tick": True}


@pytest.mark.parametrize("name", codec.SCHEMA_FILES)
def test_truncated_data_is_a_decode_error(name: str) -> None:
    data = codec.encode(name, EXAMPLES[name][0])
    for cut in {1, len(data) // 2, len(data) - 1}:
        with pytest.raises(DecodeError, match=name):
            codec.decode(name, data[:cut])


@pytest.mark.parametrize("name", codec.SCHEMA_FILES)
def test_trailing_bytes_are_a_decode_error(name: str) -> None:
    data = codec.encode(name, EXAMPLES[name][0])
    with pytest.raises(DecodeError, match="trailing"):
        codec.decode(name, data + b"\x00")
    # Two records back to back are not one record.
    with pytest.raises(DecodeError, match="trailing"):
        codec.decode(name, data + data)


@pytest.mark.parametrize("name", codec.SCHEMA_FILES)
@pytest.mark.parametrize(
    "garbage",
    [
        b"",
        b"\xff" * 16,
        b"\x01abc",
        b"\xfe\xff\xff\xff\xff\xff\xff\xff\xff\x01",
        b"not avro at all",
    ],
)
def test_garbage_is_a_decode_error(name: str, garbage: bytes) -> None:
    with pytest.raises(DecodeError):
        codec.decode(name, garbage)


def test_non_bytes_is_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="expected bytes"):
        codec.decode("seed", "https://example.com/")  # type: ignore[arg-type]
    with pytest.raises(DecodeError):
        codec.decode("seed", None)  # type: ignore[arg-type]


def test_decode_error_is_a_value_error() -> None:
    assert issubclass(DecodeError, ValueError)


def test_encode_rejects_records_that_do_not_fit() -> None:
    with pytest.raises((TypeError, ValueError)):
        codec.encode("seed", {"priority": 1})  # url has no default


# --- the wire form: URL candidates as columns, headers as two arrays ------------------

CANDIDATE_DEFAULTS = {"depth": 0, "priority": 0, "via": None, "inlinks": 1, "kind": "page"}


def test_url_candidates_travel_as_columns_and_come_back_as_dicts() -> None:
    urls = EXAMPLES["url_batch"][0]["urls"]
    numbers = struct.pack("<8i", 1, 0, 5, 0, 1, 0, 1, 3)
    assert codec.wire_form("url_batch", {"urls": urls}) == {
        "layout": codec.URL_LAYOUT,
        "urls": {
            "url_lines": "https://example.com/x\nhttp://b.example/ü\n",
            "url": [],
            "numbers": numbers,
            "vias": ["seed"],
            "kind_lines": "page\nsitemap\n",
            "kind": [],
        },
    }
    # A line feed in a URL or a kind: that column travels as an array instead.
    odd = [
        {"url": "http://a.example/\nx", "kind": "page"},
        {"url": "http://b.example/", "kind": "a\nb"},
    ]
    wire = codec.wire_form("url_batch", {"urls": odd})["urls"]
    assert (wire["url_lines"], wire["url"]) == ("", ["http://a.example/\nx", "http://b.example/"])
    assert (wire["kind_lines"], wire["kind"]) == ("", ["page", "a\nb"])
    decoded = codec.decode("url_batch", codec.encode("url_batch", {"urls": odd}))
    assert [c["url"] for c in decoded["urls"]] == ["http://a.example/\nx", "http://b.example/"]


@pytest.mark.parametrize(
    "name, field",
    [
        ("url_batch", "urls"),
        ("frontier_event", "new_urls"),
    ],
)
def test_url_columns_edge_cases(name: str, field: str) -> None:
    def trip(candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
        decoded = codec.decode(name, codec.encode(name, {field: candidates}))
        out: list[dict[str, Any]] = decoded[field]
        return out

    assert trip([]) == []
    # Missing fields take the schema's defaults, and every decoded dict has all six.
    assert trip([{"url": "http://a.example/"}]) == [
        {"url": "http://a.example/", **CANDIDATE_DEFAULTS}
    ]
    assert trip([{"url": ""}, {"url": "", "kind": ""}]) == [
        {"url": "", **CANDIDATE_DEFAULTS},
        {"url": "", **CANDIDATE_DEFAULTS, "kind": ""},
    ]
    # via: None and "" stay apart; repeated vias are shared; order is kept.
    vias = [None, "", "http://p.example/", None, "http://p.example/", "seed", ""]
    got = trip([{"url": f"http://a.example/{i}", "via": v} for i, v in enumerate(vias)])
    assert [c["via"] for c in got] == vias
    assert [c["url"] for c in got] == [f"http://a.example/{i}" for i in range(len(vias))]
    # Extreme values and non-ASCII survive.
    odd = {
        "url": "http://ü.example/ä?q=€",
        "depth": 2**31 - 1,
        "priority": -(2**31),
        "via": "http://ü.example/",
        "inlinks": 0,
        "kind": "sitemap",
    }
    assert trip([odd]) == [odd]
    # Each decoded dict is its own: a stage may change one without touching another.
    a, b = trip([{"url": "http://a.example/", "via": "x"}] * 2)
    a["inlinks"] = 9
    assert b["inlinks"] == 1


def test_a_candidate_without_url_or_with_a_wrong_type_is_refused_at_encode() -> None:
    with pytest.raises(ValueError, match="url_batch"):
        codec.encode("url_batch", {"urls": [{"depth": 1}]})
    with pytest.raises((TypeError, ValueError)):
        codec.encode("url_batch", {"urls": [{"url": "http://a.example/", "depth": "deep"}]})
    with pytest.raises((TypeError, ValueError)):
        codec.encode("url_batch", {"urls": [{"url": None}]})
    # the numbers are Avro ints: 32 bits, as fastavro's int arrays
    for field in ("depth", "priority", "inlinks"):
        for value in (2**31, -(2**31) - 1, 1.5):
            with pytest.raises(ValueError, match="url_batch"):
                codec.encode("url_batch", {"urls": [{"url": "http://a.example/", field: value}]})


def _columns(**over: Any) -> dict[str, Any]:
    cols: dict[str, Any] = {
        "url": ["http://a.example/", "http://b.example/"],
        "depth": [0, 1],
        "priority": [0, 0],
        "via": [0, 1],
        "vias": ["seed"],
        "inlinks": [1, 1],
        "kind": ["page", "page"],
    }
    cols.update(over)
    return cols


def _raw(name: str, record: dict[str, Any]) -> bytes:
    """Bytes of a wire record written by plain fastavro, bypassing the codec's checks."""
    import io

    import fastavro

    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, codec.schema(name), record)
    return buf.getvalue()


def _numbers(cols: dict[str, Any]) -> bytes:
    ints = [*cols["depth"], *cols["priority"], *cols["via"], *cols["inlinks"]]
    return struct.pack(f"<{len(ints)}i", *ints)


def _packed(**over: Any) -> dict[str, Any]:
    """The UrlPacked of `_columns`: URLs and kinds as lines, the numbers as bytes."""
    cols = _columns()
    packed = {
        "url_lines": "http://a.example/\nhttp://b.example/\n",
        "url": [],
        "numbers": _numbers(cols),
        "vias": cols["vias"],
        "kind_lines": "page\npage\n",
        "kind": [],
    }
    packed.update(over)
    return packed


def test_the_wire_record_of_a_plain_avro_writer_decodes() -> None:
    second = {
        "url": "http://b.example/",
        "depth": 1,
        "priority": 0,
        "via": "seed",
        "inlinks": 1,
        "kind": "page",
    }
    layout = codec.URL_LAYOUT
    for urls in (
        _packed(),
        _packed(url_lines="", url=_columns()["url"], kind_lines="", kind=_columns()["kind"]),
    ):
        got = codec.decode("url_batch", _raw("url_batch", {"layout": layout, "urls": urls}))
        assert got["urls"][1] == second


@pytest.mark.parametrize("name", sorted(codec.LAYOUTS))
def test_a_message_of_another_layout_is_a_decode_error(name: str) -> None:
    """Each packed schema has one layout: a message that does not start with its marker
    (another layout's, or none) is refused with a reason that names the marker it has,
    before its bytes are read as the schema, so the stage sends it to dead-letters."""
    marker = codec.LAYOUTS[name]
    data = codec.encode(name, EXAMPLES[name][0])
    assert data.startswith(marker)
    assert codec.LAYOUTS == {
        "url_batch": codec.URL_LAYOUT,
        "frontier_event": codec.FRONTIER_LAYOUT,
        "fetch_batch": codec.FETCH_LAYOUT,
        "page_batch": codec.PAGE_LAYOUT,
        "parsed_batch": codec.PARSED_LAYOUT,
    }
    for other in (b"\x01\x03", b"\x01\xff", b"\x00\x00", marker[:1] + b"\x00"):
        with pytest.raises(DecodeError, match=f"{name}: unknown layout marker {other.hex(' ')}"):
            codec.decode(name, other + data[2:])
    # an empty batch without a marker (as a plain Avro writer of another schema would
    # write one), and nothing at all
    for bare in (b"\x00" * 7, b"\x00", b""):
        with pytest.raises(DecodeError, match=r"unknown layout marker .* not a valid"):
            codec.decode(name, bare)


@pytest.mark.parametrize(
    "bad",
    [
        _columns(depth=[0]),
        _columns(kind=["page", "page", "page"]),
        _columns(url=[]),
        _columns(via=[0, 2]),
        _columns(via=[0, -1]),
    ],
)
def test_inconsistent_columns_are_a_decode_error(bad: dict[str, Any]) -> None:
    packed = {
        "url_lines": "",
        "url": bad["url"],
        "numbers": _numbers(bad),
        "vias": bad["vias"],
        "kind_lines": "",
        "kind": bad["kind"],
    }
    with pytest.raises(DecodeError, match="UrlPacked"):
        codec.decode("url_batch", _raw("url_batch", {"layout": codec.URL_LAYOUT, "urls": packed}))


@pytest.mark.parametrize(
    "bad",
    [
        _packed(url_lines="http://a.example/\n"),
        _packed(kind_lines="page\n"),
        _packed(url_lines="http://a.example/\nhttp://b.example/"),
        _packed(url=["http://a.example/", "http://b.example/"]),
        _packed(kind=["page", "page"]),
        _packed(numbers=b""),
        _packed(numbers=struct.pack("<8i", 0, 1, 0, 0, 0, 1, 1, 1) + b"\x00"),
        _packed(numbers=struct.pack("<7i", 0, 1, 0, 0, 0, 1, 1)),
        _packed(numbers=struct.pack("<8i", 0, 1, 0, 0, 0, 2, 1, 1)),
        _packed(numbers=struct.pack("<8i", 0, 1, 0, 0, -1, 1, 1, 1)),
    ],
)
def test_inconsistent_packed_urls_are_a_decode_error(bad: dict[str, Any]) -> None:
    with pytest.raises(DecodeError, match="UrlPacked"):
        codec.decode("url_batch", _raw("url_batch", {"layout": codec.URL_LAYOUT, "urls": bad}))


def test_random_url_batches_round_trip() -> None:
    rng = random.Random(7)
    alphabet = ["a", "/", "\n", "ü", "€", "", "x" * 50]
    for _ in range(300):
        urls = []
        for _ in range(rng.randrange(0, 40)):
            cand: dict[str, Any] = {"url": "".join(rng.choices(alphabet, k=rng.randrange(0, 6)))}
            for field, pick in (
                ("depth", lambda: rng.choice([0, 1, 7, 2**31 - 1])),
                ("priority", lambda: rng.choice([0, -5, -(2**31), 2**31 - 1])),
                ("via", lambda: rng.choice([None, "", "seed", "http://p.example/\n"])),
                ("inlinks", lambda: rng.choice([0, 1, 3, 2**31 - 1])),
                ("kind", lambda: rng.choice(["page", "sitemap", "", "a\nb"])),
            ):
                if rng.random() < 0.7:
                    cand[field] = pick()
            urls.append(cand)
        expected = [{**CANDIDATE_DEFAULTS, **c} for c in urls]
        data = codec.encode("url_batch", {"urls": urls})
        assert codec.decode("url_batch", data) == {"urls": expected}


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


# --- parsed_batch: numbers as bytes, strings as one ------------------------------------

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


# --- frontier_event: candidates and completions packed ----------------------------------

COMPLETION_STRUCT = "<iBdddd5i"


def _event_wire(**completions: Any) -> dict[str, Any]:
    wire = codec.wire_form("frontier_event", EXAMPLES["frontier_event"][0])
    wire["completions"].update(completions)
    return wire


def test_completions_travel_as_columns() -> None:
    wire = codec.wire_form("frontier_event", EXAMPLES["frontier_event"][0])
    assert wire["layout"] == codec.FRONTIER_LAYOUT
    assert wire["new_urls"]["url_lines"] == "https://example.com/\n"
    done = wire["completions"]
    assert list(struct.iter_unpack(COMPLETION_STRUCT, done["numbers"])) == [
        (200, 2, 3.5, 1.5, 1.25, 0.0, 30, 11, 6, 2, 0),
        (429, 1, 1.0, 2.0, 0.0, 30.0, 21, 11, 4, 10, 8),
    ]
    assert done["text"] == (
        "https://example.com/robots.txtexample.comrobotsok"
        "https://example.com/aexample.compagehttp-errorHTTP 429"
    )
    assert done["bodies"] == [b"User-agent: *\nDisallow: /private\n"]
    # a tick carries the marker too
    assert codec.encode("frontier_event", {"tick": True}).startswith(codec.FRONTIER_LAYOUT)


def test_inconsistent_completions_are_a_decode_error() -> None:
    done = codec.wire_form("frontier_event", EXAMPLES["frontier_event"][0])["completions"]
    rows = list(struct.iter_unpack(COMPLETION_STRUCT, done["numbers"]))

    def numbers(*changes: tuple[int, int, Any]) -> bytes:
        changed = [list(r) for r in rows]
        for row, field, value in changes:
            changed[row][field] = value
        return b"".join(struct.pack(COMPLETION_STRUCT, *r) for r in changed)

    bad: dict[str, Any]
    for bad in (
        {"numbers": done["numbers"][:-1]},
        {"numbers": done["numbers"] + b"\x00"},
        {"numbers": numbers((0, 1, 6))},  # an unknown flag
        {"numbers": numbers((1, 1, 3))},  # a second body flagged, none there
        {"numbers": numbers((0, 1, 0))},  # a body there, none flagged
        {"bodies": []},
        {"bodies": [b"a", b"b"]},
        {"numbers": numbers((0, 6, 31))},  # the strings past the text
        {"numbers": numbers((1, 10, 7))},  # text left over
        {"numbers": numbers((0, 6, -1), (0, 7, 12))},  # a negative length
        {"text": done["text"] + "x"},
    ):
        with pytest.raises(DecodeError, match="PackedCompletions"):
            codec.decode("frontier_event", _raw("frontier_event", _event_wire(**bad)))


def test_random_frontier_events_round_trip() -> None:
    rng = random.Random(13)
    text = _texts(rng, with_cr=False)

    for _ in range(300):
        completions = [
            {
                "url": text(),
                "host": text(),
                "kind": rng.choice(["page", "robots", "sitemap", text()]),
                "status": rng.choice([0, 200, 429, -1, 2**31 - 1, -(2**31)]),
                "outcome": text(),
                "elapsed_ms": rng.random() * 100,
                "finished_at": rng.choice([0.0, 1_795_385_229.875, -2.5]),
                "retry_after": rng.choice([None, 0.0, 30.0, 1e9]),
                "body": rng.choice([None, b"", b"User-agent: *\x00\xff"]),
                "dispatched_at": rng.choice([0.0, 1.25]),
                "reason": text(),
            }
            for _ in range(rng.randrange(0, 6))
        ]
        urls: list[dict[str, Any]] = [
            {
                "url": text() or "http://a.example/",
                "depth": rng.choice([0, 2, 2**31 - 1]),
                "priority": rng.choice([0, -(2**31)]),
                "via": rng.choice([None, "", "seed", text()]),
                "inlinks": rng.choice([0, 1, 5]),
                "kind": rng.choice(["page", "sitemap", text()]),
            }
            for _ in range(rng.randrange(0, 6))
        ]
        for url in urls:
            if rng.random() < 0.3:  # a re-tier request, mostly with the slot url-seen read
                url["via"] = "retier"
                if rng.random() < 0.8:
                    url["slot"] = (rng.choice([0, 3]), rng.choice([-1, 0, 7, 2**40]))
        event = {"new_urls": urls, "completions": completions, "tick": rng.random() < 0.2}
        assert codec.decode("frontier_event", codec.encode("frontier_event", event)) == event
    # fields with defaults may be left out, as the fetch stage's completions never do
    sparse = {k: v for k, v in EXAMPLES["frontier_event"][0]["completions"][1].items()}
    for field in ("retry_after", "body", "dispatched_at", "reason"):
        del sparse[field]
    got = codec.decode("frontier_event", codec.encode("frontier_event", {"completions": [sparse]}))
    assert got["completions"] == [
        {**sparse, "retry_after": None, "body": None, "dispatched_at": 0.0, "reason": ""}
    ]


def test_retier_slots_travel_in_their_own_field() -> None:
    asks = [
        {"url": "http://a.test/x", "depth": 5, "via": "retier", "inlinks": 2, "slot": (3, -1)},
        {"url": "http://a.test/y", "depth": 1, "via": None, "inlinks": 1},
        {"url": "http://a.test/z", "depth": 5, "via": "retier", "inlinks": 4, "slot": (2, 9)},
    ]
    wire = codec.wire_form("frontier_event", {"new_urls": asks})
    assert wire["new_urls"]["vias"] == ["retier"]  # one via, however many slots
    assert list(struct.iter_unpack("<iiq", wire["retier_slots"])) == [(0, 3, -1), (2, 2, 9)]
    got = codec.decode("frontier_event", codec.encode("frontier_event", {"new_urls": asks}))
    assert [c.get("slot") for c in got["new_urls"]] == [(3, -1), None, (2, 9)]
    for bad, message in (
        (wire["retier_slots"][:-1], "retier_slots of 31 bytes"),
        (struct.pack("<iiq", 3, 0, 0), "a retier slot for URL 3 of 3"),
        (struct.pack("<iiq", -1, 0, 0), "a retier slot for URL -1 of 3"),
    ):
        with pytest.raises(DecodeError, match=message):
            codec.decode("frontier_event", _raw("frontier_event", {**wire, "retier_slots": bad}))


# --- page_batch: a page's numbers and strings packed ----------------------------------


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


# --- fetch_batch: the requests as columns ----------------------------------------------


def test_fetch_requests_travel_as_columns() -> None:
    requests = [
        {
            "url": "https://a.example/x",
            "host": "a.example",
            "kind": "page",
            "depth": 3,
            "dispatched_at": 1.5,
            "url_id": -(2**63),
        },
        {
            "url": "https://a.example/robots.txt",
            "host": "a.example",
            "kind": "robots",
            "depth": 0,
            "dispatched_at": 2.0,
            "url_id": 0,
        },
    ]
    wire = codec.wire_form("fetch_batch", {"requests": requests})
    assert wire["layout"] == codec.FETCH_LAYOUT
    assert list(struct.iter_unpack("<idq3i", wire["requests"]["numbers"])) == [
        (3, 1.5, -(2**63), 19, 9, 4),
        (0, 2.0, 0, 28, 9, 6),
    ]
    assert wire["requests"]["text"] == (
        "https://a.example/xa.examplepagehttps://a.example/robots.txta.examplerobots"
    )
    # defaults: depth 0, url_id 0
    sparse = {"url": "u", "host": "h", "kind": "page", "dispatched_at": 0.0}
    assert codec.decode("fetch_batch", codec.encode("fetch_batch", {"requests": [sparse]})) == {
        "requests": [{**sparse, "depth": 0, "url_id": 0}]
    }
    rows = list(struct.iter_unpack("<idq3i", wire["requests"]["numbers"]))

    def numbers(row: int, field: int, value: Any) -> bytes:
        changed = [list(r) for r in rows]
        changed[row][field] = value
        return b"".join(struct.pack("<idq3i", *r) for r in changed)

    for bad in (
        {"numbers": wire["requests"]["numbers"][:-1]},
        {"numbers": numbers(0, 3, 20)},  # past the text
        {"numbers": numbers(1, 5, 5)},  # text left over
        {"numbers": numbers(0, 4, -1)},
        {"text": wire["requests"]["text"][:-1]},
    ):
        data = _raw("fetch_batch", {**wire, "requests": {**wire["requests"], **bad}})
        with pytest.raises(DecodeError, match="PackedRequests"):
            codec.decode("fetch_batch", data)


def test_random_fetch_batches_round_trip() -> None:
    rng = random.Random(19)
    text = _texts(rng, with_cr=False)

    for _ in range(300):
        requests = [
            {
                "url": text(),
                "host": text(),
                "kind": rng.choice(["page", "robots", text()]),
                "depth": rng.choice([0, 4, 2**31 - 1, -(2**31)]),
                "dispatched_at": rng.choice([0.0, 1_795_385_229.875, -1.0]),
                "url_id": rng.choice([0, 1, -(2**63), 2**63 - 1]),
            }
            for _ in range(rng.randrange(0, 8))
        ]
        data = codec.encode("fetch_batch", {"requests": requests})
        assert codec.decode("fetch_batch", data) == {"requests": requests}
