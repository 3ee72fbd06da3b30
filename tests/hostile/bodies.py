"""Sizes and bodies of the hostile catalogue, the values tests compare against.

Every constant a test asserts on (what an endpoint sends, how long it waits, how
large it is) lives here, with the small page builder and the PNG maker.
"""

from __future__ import annotations

import random
import struct
import zlib

# -- sizes and bodies the tests compare against --------------------------------------------

#: Delay of /slow-first-byte when no ?delay= is given: well inside any test timeout.
SLOW_FIRST_BYTE_S = 0.3
#: /oversize serves this many bytes of HTML with a Content-Length.
OVERSIZE_BYTES = 4 * 1024 * 1024
#: /partial-body declares PARTIAL_DECLARED bytes, sends PARTIAL_SENT, then closes.
PARTIAL_DECLARED = 10_000
PARTIAL_SENT = 3_000
#: Every bomb decompresses to this many bytes of zeros.
BOMB_BYTES = 1 << 30
#: Longest any endpoint hangs or streams, whatever the client does.
MAX_HANG_S = 30.0
#: /endless and the empty-member flood stop after this much (only a broken client gets there).
ENDLESS_LIMIT = 64 * 1024 * 1024
#: Redirect chain: /redirect/chain/N → N+1 … until CHAIN_END, which answers 200.
CHAIN_END = 10
#: Retry-After values of /status/503 and /status/429.
RETRY_AFTER_503 = 120
RETRY_AFTER_429 = 30
#: The PNG served at /type/png (width × height), for the toy handler test.
PNG_SIZE = (3, 2)


def _page(
    title: str, text: str, links: list[str] | None = None, labels: list[str] | None = None
) -> bytes:
    """A small page; links show their href unless labels are given."""
    shown = labels or links or []
    anchors = "".join(f'<a href="{h}">{s}</a> ' for h, s in zip(links or [], shown, strict=True))
    return (
        f"<!doctype html><html><head><title>{title}</title></head>"
        f"<body><h1>{title}</h1><p>{text}</p>{anchors}</body></html>"
    ).encode()


OK_BODY = _page("Fine", "A perfectly ordinary page.")
#: Header says UTF-8; the bytes are windows-1252 (0xE9 is not valid UTF-8 on its own).
CHARSET_LIES_BODY = (
    b"<!doctype html><html><head><title>Caf\xe9</title></head>"
    b"<body><p>Cr\xe8me br\xfbl\xe9e \x93quoted\x94</p></body></html>"
)
#: No charset anywhere: UTF-8 bytes, to be found by the decoder's fallback.
NO_CHARSET_BODY = "<html><head><title>Zürich</title></head><body>naïve café</body></html>".encode()
#: UTF-16LE with a BOM; no charset in the header.
UTF16_BODY = (
    "\ufeff<html><head><title>Ünïcödé</title></head><body>UTF-16 text</body></html>"
).encode("utf-16-le")
#: <meta> says windows-1251 but the bytes are UTF-8.
META_LIES_BODY = (
    '<html><head><meta charset="windows-1251"><title>Meta lies</title></head>'
    "<body>Grüße</body></html>"
).encode()
GARBAGE_BODY = random.Random(7).randbytes(64 * 1024)
MALFORMED_HTML_BODY = (
    b"<html><head><title>Broken</title><body><p>unclosed <b>bold <i>both <a href='/ok'>ok"
    b"<table><tr><td>cell<div></span></table></p></p></p><p <p =x>"
    b"<form action=/a><form action=/b><input name=q></form></form>"
    b"<a href=/html/malformed?again>again</a><!-- never closed comment"
)
NESTED_FORMS_BODY = (
    b"<html><body>"
    + b"".join(b"<form action='/f%d'><input name=x%d>" % (i, i) for i in range(200))
    + b"<a href='/ok'>out</a></body></html>"
)
DEEP_NESTING_DEPTH = 100_000
DEEP_NESTING_BODY = (
    b"<html><head><title>Deep</title></head><body>"
    + b"<div>" * DEEP_NESTING_DEPTH
    + b"<a href='/ok'>bottom</a>"
    + b"</div>" * DEEP_NESTING_DEPTH
    + b"</body></html>"
)
JSON_BODY = b'{"not": "html", "items": [1, 2, 3]}'


def png_bytes(width: int, height: int) -> bytes:
    """A valid PNG of zeros (the toy PNG handler reads its IHDR)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    raw = b"".join(b"\x00" + b"\x00" * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


PNG_BODY = png_bytes(*PNG_SIZE)
ROBOTS_BODY = b"User-agent: *\nAllow: /\n"


def calendar_path(year: int, month: int) -> str:
    return f"/calendar/{year:04d}/{month:02d}"
