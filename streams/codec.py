"""The Avro codec, registered once and used by every stage.

Topics carry raw bytes and each stage decodes with `decode(schema, data)` itself,
rather than letting Faust deserialize: a message that is not the schema must end
in dead-letters with a reason, and a Faust value_serializer would swallow that
error before the agent ever sees the message. fastavro's schemaless encoding is
~7 µs a record here against ~49 µs for the reference `avro` package.
"""

from __future__ import annotations

import io
import json
from functools import cache
from importlib import resources
from typing import Any

import fastavro

#: Parse order matters: later schemas refer to named types of earlier ones.
SCHEMA_FILES = (
    "seed",
    "url_batch",
    "frontier_event",
    "fetch_batch",
    "page_batch",
    "parsed_batch",
    "crawl_log",
    "dead_letter",
)


class DecodeError(ValueError):
    """The bytes are not a valid record of the expected schema."""


@cache
def _parsed() -> dict[str, Any]:
    named: dict[str, Any] = {}
    parsed: dict[str, Any] = {}
    for name in SCHEMA_FILES:
        text = resources.files("schemas").joinpath(f"{name}.avsc").read_text("utf-8")
        parsed[name] = fastavro.parse_schema(json.loads(text), named_schemas=named)
    return parsed


def schema(name: str) -> Any:
    try:
        return _parsed()[name]
    except KeyError:
        raise KeyError(f"no Avro schema named {name!r}; known: {', '.join(SCHEMA_FILES)}") from None


def encode(name: str, record: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, schema(name), record)
    return buf.getvalue()


def decode(name: str, data: bytes) -> dict[str, Any]:
    """Decode exactly one record; trailing bytes or a short read are errors."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise DecodeError(f"{name}: expected bytes, got {type(data).__name__}")
    buf = io.BytesIO(data)
    try:
        record = fastavro.schemaless_reader(buf, schema(name), None)
    except Exception as exc:  # fastavro raises many types on garbage
        raise DecodeError(f"{name}: not a valid Avro record ({type(exc).__name__}: {exc})") from exc
    if buf.tell() != len(data):
        raise DecodeError(f"{name}: {len(data) - buf.tell()} trailing bytes after the record")
    if not isinstance(record, dict):
        raise DecodeError(f"{name}: decoded to {type(record).__name__}, not a record")
    return record
