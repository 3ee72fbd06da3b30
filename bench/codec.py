"""The Avro codec's cost per item: streams.codec against plain fastavro on row records.

The peer is what the codec did before it changed the wire layout: fastavro's
`schemaless_writer`/`schemaless_reader` over one record per URL, per header and
per link (the row schemas are kept below). Both run over the same records, shaped
like bench/crawl_throughput.py's web (a URL batch of ~120 candidates sharing a few
`via`s, 8 response headers, 23 links and an 8 KB body a page, ~12 pages a
message), in one process. Figures are CPU time of this thread (the machine is
shared) per item, best of `--repeat`.

    .venv/bin/python bench/codec.py            # ~10 s
"""

from __future__ import annotations

import argparse
import io
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastavro

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from streams import codec
from streams.store.warc import payload_digest

CANDIDATE = {
    "type": "record",
    "name": "UrlCandidate",
    "fields": [
        {"name": "url", "type": "string"},
        {"name": "depth", "type": "int", "default": 0},
        {"name": "priority", "type": "int", "default": 0},
        {"name": "via", "type": ["null", "string"], "default": None},
        {"name": "inlinks", "type": "int", "default": 1},
        {"name": "kind", "type": "string", "default": "page"},
    ],
}
PAGE = {
    "type": "record",
    "name": "FetchedPage",
    "fields": [
        {"name": "url", "type": "string"},
        {"name": "status", "type": "int"},
        {
            "name": "headers",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Header",
                    "fields": [
                        {"name": "name", "type": "string"},
                        {"name": "value", "type": "string"},
                    ],
                },
            },
        },
        {"name": "body", "type": "bytes"},
        {"name": "fetched_at", "type": "double"},
        {"name": "elapsed_ms", "type": "double"},
        {"name": "ip", "type": ["null", "string"], "default": None},
        {"name": "depth", "type": "int", "default": 0},
        {"name": "truncated", "type": "boolean", "default": False},
    ],
}
#: The row layouts before the codec turned them into columns and lines.
ROW_SCHEMAS: dict[str, Any] = {
    "url_batch": {
        "type": "record",
        "name": "UrlBatch",
        "fields": [{"name": "urls", "type": {"type": "array", "items": CANDIDATE}}],
    },
    "page_batch": {
        "type": "record",
        "name": "PageBatch",
        "fields": [{"name": "pages", "type": {"type": "array", "items": PAGE}}],
    },
    "parsed_batch": {
        "type": "record",
        "name": "ParsedBatch",
        "fields": [
            {
                "name": "pages",
                "type": {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "ParsedPage",
                        "fields": [
                            {"name": "page", "type": PAGE},
                            {"name": "fingerprint", "type": "string"},
                            {"name": "title", "type": "string", "default": ""},
                            {"name": "links", "type": {"type": "array", "items": "string"}},
                            {"name": "base", "type": ["null", "string"], "default": None},
                            {"name": "nofollow", "type": "boolean", "default": False},
                            {"name": "noindex", "type": "boolean", "default": False},
                            {
                                "name": "duplicate_of",
                                "type": [
                                    "null",
                                    {
                                        "type": "record",
                                        "name": "DuplicateOf",
                                        "fields": [
                                            {"name": "url", "type": "string"},
                                            {"name": "digest", "type": "string"},
                                            {"name": "fetched_at", "type": "double"},
                                        ],
                                    },
                                ],
                                "default": None,
                            },
                            {"name": "simhash", "type": ["null", "long"], "default": None},
                            {"name": "band", "type": "int", "default": 0},
                            {
                                "name": "near_duplicate_of",
                                "type": [
                                    "null",
                                    {
                                        "type": "record",
                                        "name": "NearDuplicateOf",
                                        "fields": [
                                            {"name": "url", "type": "string"},
                                            {"name": "distance", "type": "int"},
                                        ],
                                    },
                                ],
                                "default": None,
                            },
                        ],
                    },
                },
            }
        ],
    },
}


def url_batches(rng: random.Random, n: int) -> list[dict[str, Any]]:
    out = []
    for _ in range(n):
        host = f"127.0.1.{rng.randrange(1, 200)}:8080"
        vias = [f"http://{host}/page-{rng.randrange(30)}.html" for _ in range(rng.randint(1, 8))]
        out.append(
            {
                "urls": [
                    {
                        "url": f"http://{host}/page-{rng.randrange(30)}.html",
                        "depth": rng.randrange(6),
                        "priority": 0,
                        "via": rng.choice(vias),
                        "inlinks": 1 if rng.random() < 0.98 else 2,
                        "kind": "page",
                    }
                    for _ in range(rng.randint(20, 220))
                ]
            }
        )
    return out


def page(rng: random.Random) -> dict[str, Any]:
    host = f"127.0.1.{rng.randrange(1, 200)}:8080"
    stamp = "Sun, 22 Nov 2026 14:36:04 GMT"
    headers = [
        ("Server", "nginx"),
        ("Date", stamp),
        ("Content-Type", "text/html; charset=utf-8"),
        ("Content-Length", "8185"),
        ("Last-Modified", stamp),
        ("Connection", "keep-alive"),
        ("ETag", f'"{rng.getrandbits(32):x}-1ff9"'),
        ("Accept-Ranges", "bytes"),
    ]
    return {
        "url": f"http://{host}/page-{rng.randrange(30)}.html",
        "status": 200,
        "headers": [{"name": k, "value": v} for k, v in headers],
        "body": rng.randbytes(8185),
        "fetched_at": time.time(),
        "elapsed_ms": rng.random() * 5,
        "ip": None,
        "depth": rng.randrange(6),
        "truncated": False,
    }


def parsed(rng: random.Random, p: dict[str, Any]) -> dict[str, Any]:
    return {
        "page": p,
        # parse takes the digest and size once (the hand-off); the row peer ignores them
        "digest": payload_digest(p["body"]),
        "size": len(p["body"]),
        "fingerprint": f"{rng.getrandbits(128):032x}",
        "title": "Home of 127.0.1.3",
        "links": [f"/page-{rng.randrange(30)}.html" for _ in range(23)],
        "base": None,
        "nofollow": False,
        "noindex": False,
        "duplicate_of": None,
        "simhash": rng.getrandbits(63),
        "band": 0,
        "near_duplicate_of": None,
    }


def best(repeat: int, fn: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        start = time.thread_time()
        fn()
        times.append(time.thread_time() - start)
    return min(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--messages", type=int, default=200, help="messages per schema")
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    rng = random.Random(1)
    pages = [page(rng) for _ in range(args.messages * 12)]
    records = {
        "url_batch": url_batches(rng, args.messages),
        "page_batch": [{"pages": pages[i : i + 12]} for i in range(0, len(pages), 12)],
        "parsed_batch": [
            {"pages": [parsed(rng, p) for p in pages[i : i + 12]]} for i in range(0, len(pages), 12)
        ],
    }
    field = {"url_batch": "urls", "page_batch": "pages", "parsed_batch": "pages"}
    print(f"CPU µs per item (thread time, best of {args.repeat}); rows = plain fastavro")
    for name, recs in records.items():
        items = sum(len(r[field[name]]) for r in recs)
        row_schema = fastavro.parse_schema(ROW_SCHEMAS[name])

        def row_encode(r: dict[str, Any], s: Any = row_schema) -> bytes:
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, s, r)
            return buf.getvalue()

        row_bytes = [row_encode(r) for r in recs]
        new_bytes = [codec.encode(name, r) for r in recs]
        assert [codec.decode(name, b) for b in new_bytes] == recs, name

        def rows_out(recs: list[dict[str, Any]] = recs) -> object:
            return [row_encode(r) for r in recs]

        def rows_in(bs: list[bytes] = row_bytes, s: Any = row_schema) -> object:
            return [fastavro.schemaless_reader(io.BytesIO(b), s, None) for b in bs]

        def codec_out(n: str = name, recs: list[dict[str, Any]] = recs) -> object:
            return [codec.encode(n, r) for r in recs]

        def codec_in(n: str = name, bs: list[bytes] = new_bytes) -> object:
            return [codec.decode(n, b) for b in bs]

        re, rd, rb = (
            best(args.repeat, rows_out),
            best(args.repeat, rows_in),
            sum(map(len, row_bytes)),
        )
        ce, cd = best(args.repeat, codec_out), best(args.repeat, codec_in)
        cb = sum(map(len, new_bytes))
        print(
            f"{name:13} {items:6} items  rows: encode {re / items * 1e6:6.2f} decode "
            f"{rd / items * 1e6:6.2f}  codec: encode {ce / items * 1e6:6.2f} decode "
            f"{cd / items * 1e6:6.2f}  -> {(re + rd) / (ce + cd):4.2f}x; "
            f"bytes/item {rb / items:6.0f} vs {cb / items:6.0f}"
        )


if __name__ == "__main__":
    main()
