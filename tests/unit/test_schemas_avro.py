"""The reference Avro implementation (the `avro` package) accepts every schema, and
reads what our fastavro codec writes: the codec is fast, but the format is Avro."""

from __future__ import annotations

import io
import json
from importlib import resources
from typing import Any

import avro.io
import avro.schema
import pytest

from streams import codec

EXAMPLES: dict[str, Any] = {
    "seed": {"url": "http://example.com/", "priority": 2},
    "url_batch": {
        "urls": [
            {
                "url": "http://a.test/",
                "depth": 1,
                "priority": 0,
                "via": None,
                "inlinks": 2,
                "kind": "sitemap",
            }
        ]
    },
    "crawl_log": {
        "url": "http://a.test/",
        "host": "a.test",
        "stage": "fetch",
        "outcome": "fetched",
        "status": 200,
        "reason": "",
        "bytes": 10,
        "elapsed_ms": 1.5,
        "depth": 0,
        "at": 1.0,
        "url_id": -5,
    },
}


def _reference_schema(name: str) -> avro.schema.Schema:
    names = avro.schema.Names()
    parsed = None
    for file in codec.SCHEMA_FILES:
        text = resources.files("schemas").joinpath(f"{file}.avsc").read_text("utf-8")
        parsed = avro.schema.make_avsc_object(json.loads(text), names)
        if file == name:
            return parsed
    raise KeyError(name)


@pytest.mark.parametrize("name", codec.SCHEMA_FILES)
def test_reference_implementation_parses_every_schema(name: str) -> None:
    assert _reference_schema(name).type == "record"


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_reference_reader_decodes_what_the_codec_writes(name: str) -> None:
    data = codec.encode(name, EXAMPLES[name])
    reader = avro.io.DatumReader(_reference_schema(name))
    decoded = reader.read(avro.io.BinaryDecoder(io.BytesIO(data)))
    assert decoded == codec.wire_form(name, EXAMPLES[name])
