"""The Avro codec, registered once and used by every stage.

Topics carry raw bytes and each stage decodes with `decode(schema, data)` itself,
rather than letting Faust deserialize: a message that is not the schema must end
in dead-letters with a reason, and a Faust value_serializer would swallow that
error before the agent ever sees the message. fastavro's schemaless encoding is
~7 µs a record here against ~49 µs for the reference `avro` package.

What goes on the wire is not always the shape the stages handle. fastavro pays
~0.4 µs per field of every record it writes or reads, so a batch of many small
records costs a lot more than its bytes: the URL candidates of `url_batch` and of
`frontier_event` travel as columns (`UrlPacked`), their URLs and kinds, a page's
headers and a parsed page's links as one string of lines (or, when one holds a line
feed, as arrays: fastavro reads a string of an array in ~0.37 µs, a split ~0.05), and
the candidates' numbers as one bytes field of 32-bit ints (fastavro pays ~0.2 µs an
int of an array each way, struct ~0.01); a page's numbers and flags travel as one
bytes field too, and its strings joined as one string cut by lengths kept with the
numbers (26 Avro fields a parsed page -> 8), and so do a frontier event's fetch
completions and a fetch batch's requests. `encode` turns the stages' dicts into that
wire form and `decode` turns it back (`wire_form` shows the wire record), so a stage
still sees one dict per URL with every field set, and one dict per header.

Each of those five packed schemas has one layout, and its messages start with a
two-byte layout marker (`URL_LAYOUT` 01 04, `FRONTIER_LAYOUT` 01 09, `FETCH_LAYOUT`
01 08, `PAGE_LAYOUT` 01 07, `PARSED_LAYOUT` 01 05): `decode` refuses a message that
starts otherwise with a `DecodeError` naming the marker it found, so a message of any
other layout goes to dead-letters with that reason instead of being misread.

fastavro's `schemaless_writer`/`schemaless_reader` re-resolve the schema's named
types on every call (~4 µs a message); the codec calls the compiled
`write_data`/`_read_data` underneath them with the names resolved once, and falls
back to the public functions when that fastavro build lacks them.

What lives here: `packing` (DecodeError, strings as lines), one module per family of
records (`urls`: url_batch's UrlPacked; `fetches`: fetch_batch and frontier_event;
`pages`: page_batch and parsed_batch), and `wire` (the schemas, the fastavro calls,
encode/decode). They import the standard library, fastavro and each other only
(packing <- urls <- fetches, packing <- pages, wire <- all), never the rest of Seine,
which imports this package: callers use the names re-exported below
(`from streams import codec`), not the modules. `seeds` reads the public seeds topic
in every form people send (a URL line, JSON, the Avro `Seed`), over `wire` and
streams.core.urls' canonical form; stages import it as `streams.codec.seeds`.
"""

from __future__ import annotations

from streams.codec.fetches import FETCH_LAYOUT, FRONTIER_LAYOUT
from streams.codec.packing import DecodeError
from streams.codec.pages import PAGE_LAYOUT, PARSED_LAYOUT
from streams.codec.urls import URL_LAYOUT
from streams.codec.wire import LAYOUTS, SCHEMA_FILES, decode, encode, schema, wire_form

__all__ = [
    "FETCH_LAYOUT",
    "FRONTIER_LAYOUT",
    "LAYOUTS",
    "PAGE_LAYOUT",
    "PARSED_LAYOUT",
    "SCHEMA_FILES",
    "URL_LAYOUT",
    "DecodeError",
    "decode",
    "encode",
    "schema",
    "wire_form",
]
