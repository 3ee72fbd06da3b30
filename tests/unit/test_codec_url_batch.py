"""Unit tests for streams.codec's url_batch wire form: URL candidates as columns."""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest

from streams import codec
from streams.codec import DecodeError
from tests.unit.codec_helpers import (
    EXAMPLES,
    _raw,
)

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
