"""Unit tests for streams.codec's frontier_event and fetch_batch wire forms."""

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
    _texts,
)

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
