"""Unit tests for streams.codec: every schema round-trips, bad bytes raise DecodeError."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import pytest

import topology
from streams import codec
from streams.codec import DecodeError
from tests.unit.codec_helpers import (
    EXAMPLES,
)


def avsc_names() -> set[str]:
    return {
        p.name.removesuffix(".avsc")
        for p in resources.files("schemas").iterdir()
        if p.name.endswith(".avsc")
    }


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
        codec.decode("seed", "https://example.com/")  # type: ignore[call-overload]
    with pytest.raises(DecodeError):
        codec.decode("seed", None)  # type: ignore[call-overload]


def test_decode_error_is_a_value_error() -> None:
    assert issubclass(DecodeError, ValueError)


def test_encode_rejects_records_that_do_not_fit() -> None:
    with pytest.raises((TypeError, ValueError)):
        codec.encode("seed", {"priority": 1})  # url has no default


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
