"""encode, decode and wire_form: the schemas of schemas/, the compiled fastavro calls,
and per schema its layout marker and its converters between the stages' dicts and the
wire records (streams.codec.urls, .fetches, .pages). Imports those modules and
streams.codec.packing, nothing else of Seine's."""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Callable
from functools import cache
from importlib import resources
from typing import Any, Literal, overload

import fastavro

from streams.codec.fetches import (
    FETCH_LAYOUT,
    FRONTIER_LAYOUT,
    from_wire_fetch_batch,
    from_wire_frontier_event,
    to_wire_fetch_batch,
    to_wire_frontier_event,
)
from streams.codec.packing import DecodeError
from streams.codec.pages import (
    PAGE_LAYOUT,
    PARSED_LAYOUT,
    from_wire_page_batch,
    from_wire_parsed_batch,
    to_wire_page_batch,
    to_wire_parsed_batch,
)
from streams.codec.urls import URL_LAYOUT, from_wire_url_batch, to_wire_url_batch
from streams.core.records import FetchBatch, FrontierEvent, PageBatch, ParsedBatch, UrlBatch

_compiled_read: Any
_compiled_write: Any
try:  # the compiled fastavro internals under schemaless_writer/reader
    from fastavro import _read as _compiled_read
    from fastavro import _write as _compiled_write
except ImportError:  # pragma: no cover - pure-Python fastavro build
    _compiled_read = _compiled_write = None
_fast_read: Any = getattr(_compiled_read, "_read_data", None)
_fast_write: Any = getattr(_compiled_write, "write_data", None)

#: One schema file per topic value. Parse order matters: frontier_event refers to
#: url_batch's UrlPacked.
SCHEMA_FILES = (
    "seed",
    "url_batch",
    "frontier_event",
    "fetch_batch",
    "page_batch",
    "parsed_batch",
    "crawl_log",
    "dead_letter",
    "document",
    "anchor_batch",
)

_WRITE_OPTIONS = {"strict": False, "strict_allow_default": False, "disable_tuple_notation": False}
_READ_OPTIONS = {
    "return_record_name": False,
    "return_record_name_override": False,
    "return_named_type": False,
    "return_named_type_override": False,
    "handle_unicode_errors": "strict",
}

#: Per packed schema: the two bytes its messages start with (the `layout` field, an
#: Avro fixed). decode refuses a message that starts otherwise before reading it.
LAYOUTS: dict[str, bytes] = {
    "url_batch": URL_LAYOUT,
    "frontier_event": FRONTIER_LAYOUT,
    "fetch_batch": FETCH_LAYOUT,
    "page_batch": PAGE_LAYOUT,
    "parsed_batch": PARSED_LAYOUT,
}

Convert = Callable[[dict[str, Any]], dict[str, Any]]

#: Per schema: stage dict -> wire record. Schemas not listed travel as they are.
_TO_WIRE: dict[str, Convert] = {
    "url_batch": to_wire_url_batch,
    "frontier_event": to_wire_frontier_event,
    "fetch_batch": to_wire_fetch_batch,
    "page_batch": to_wire_page_batch,
    "parsed_batch": to_wire_parsed_batch,
}
#: Per schema: decoded wire record -> stage dict (may reuse the wire record's parts).
_FROM_WIRE: dict[str, Convert] = {
    "url_batch": from_wire_url_batch,
    "frontier_event": from_wire_frontier_event,
    "fetch_batch": from_wire_fetch_batch,
    "page_batch": from_wire_page_batch,
    "parsed_batch": from_wire_parsed_batch,
}


@cache
def _parsed() -> tuple[dict[str, Any], dict[str, Any]]:
    named: dict[str, Any] = {}
    parsed: dict[str, Any] = {}
    for name in SCHEMA_FILES:
        text = resources.files("schemas").joinpath(f"{name}.avsc").read_text("utf-8")
        parsed[name] = fastavro.parse_schema(json.loads(text), named_schemas=named)
    return parsed, named


def schema(name: str) -> Any:
    """The parsed wire schema of `name`."""
    try:
        return _parsed()[0][name]
    except KeyError:
        raise KeyError(f"no Avro schema named {name!r}; known: {', '.join(SCHEMA_FILES)}") from None


def wire_form(name: str, record: dict[str, Any]) -> dict[str, Any]:
    """The record as it goes on the wire (what a plain Avro reader of the topic sees)."""
    convert = _TO_WIRE.get(name)
    return record if convert is None else convert(record)


def encode(name: str, record: dict[str, Any]) -> bytes:
    parsed, named = _parsed()
    try:
        wire_schema = parsed[name]
    except KeyError:
        schema(name)  # raises the KeyError that names the known schemas
        raise
    convert = _TO_WIRE.get(name)
    if convert is not None:
        try:
            record = convert(record)
        except (KeyError, TypeError, AttributeError, struct.error) as exc:
            raise ValueError(f"{name}: the record does not fit the schema ({exc!r})") from exc
    if _fast_write is None:  # pragma: no cover
        out = io.BytesIO()
        fastavro.schemaless_writer(out, wire_schema, record)
        return out.getvalue()
    buf = bytearray()
    _fast_write(buf, record, wire_schema, named, "", _WRITE_OPTIONS)
    return bytes(buf)


@overload
def decode(name: Literal["url_batch"], data: bytes) -> UrlBatch: ...
@overload
def decode(name: Literal["fetch_batch"], data: bytes) -> FetchBatch: ...
@overload
def decode(name: Literal["frontier_event"], data: bytes) -> FrontierEvent: ...
@overload
def decode(name: Literal["page_batch"], data: bytes) -> PageBatch: ...
@overload
def decode(name: Literal["parsed_batch"], data: bytes) -> ParsedBatch: ...
@overload
def decode(name: str, data: bytes) -> Any: ...
def decode(name: str, data: bytes) -> Any:
    """Decode exactly one record (a stage topic's as its streams.core.records type);
    trailing bytes, a short read or a message of another layout (its first two bytes
    not the schema's marker) are errors."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise DecodeError(f"{name}: expected bytes, got {type(data).__name__}")
    layout = LAYOUTS.get(name)
    if layout is not None and bytes(data[:2]) != layout:
        raise DecodeError(
            f"{name}: unknown layout marker {bytes(data[:2]).hex(' ') or '(none)'}, "
            f"not a valid Avro {name} message (this Seine writes and reads layout "
            f"{layout.hex(' ')} only)"
        )
    parsed, named = _parsed()
    wire_schema = parsed[name] if name in parsed else schema(name)
    buf = io.BytesIO(data)
    try:
        if _fast_read is None:  # pragma: no cover
            record = fastavro.schemaless_reader(buf, wire_schema, None)
        else:
            names = {"writer": named, "reader": {}}
            record = _fast_read(buf, wire_schema, names, None, _READ_OPTIONS)
    except Exception as exc:  # fastavro raises many types on garbage
        raise DecodeError(f"{name}: not a valid Avro record ({type(exc).__name__}: {exc})") from exc
    if buf.tell() != len(data):
        raise DecodeError(f"{name}: {len(data) - buf.tell()} trailing bytes after the record")
    if not isinstance(record, dict):
        raise DecodeError(f"{name}: decoded to {type(record).__name__}, not a record")
    convert = _FROM_WIRE.get(name)
    return record if convert is None else convert(record)
