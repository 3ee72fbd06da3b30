"""A catalogue of hostile HTTP endpoints on loopback: the web at its worst, on demand.

Why raw asyncio streams rather than an HTTP framework: most of these endpoints
misbehave *below* HTTP — a status line that never comes, headers that trickle,
a chunk size that is not hex, a reset in the middle of a body, two conflicting
Content-Lengths. A framework would refuse to produce most of them, so every
response here is written byte by byte (like Scrapy's mock server, written here).

Why a subprocess (:func:`start_hostile_process`): the tests measure the client's
time and memory. A server in the same process would share the event loop (a
stuck handler would stall the client under test) and its allocations would show
up in the client's tracemalloc figures.

Two "endpoints" are not paths but ports: ``blackhole_port`` listens with a full
accept queue, so a connect hangs (a connect timeout); ``refused_port`` is bound
but not listening, so a connect is refused at once.

Every endpoint that hangs does so for at most ``max_hang`` seconds and stops as
soon as the client goes away, so a crashed test never leaves work behind.

Run standalone::

    python -m tests.hostile.server --host 127.0.0.1 --ready-file ready.json
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import gzip
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
import zlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit

REPO = Path(__file__).resolve().parents[2]

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

#: A 1 GiB run of zeros as one brotli stream (quality 11, 1,681 bytes). Embedded because
#: producing it takes ~100 s and a brotli *encoder* may not be installed.
_BROTLI_BOMB_B64 = (
    "y///P/gnAOKxQCD3/o///3/wTwDEYRGA7v0f////4J8AiMMCAN37P/7//8E/ARCHBQC693/8//+DfwIgDgsAdO//"
    "+P//B/8EQBwWAOje//H//w/+CYA4LADQvf/j//8f/BMAcVgAoHv/x///P/gnAOKwAED3/o///3/wTwDEYQGA7v0f"
    "////4J8AiMMCAN37P/7//8E/ARCHBQC693/8//+DfwIgDgsAdO//+P//B/8EQBwWAOje//H//w/+CYA4LADQvf/j"
    "//8f/BMAcVgAoHv/x///P/gnAOKwAED3/o///3/wTwDEYQGA7v0f////4J8AiMMCAN37P/7//8E/ARCHBQC693/8"
    "//+DfwIgDgsAdO//+P//B/8EQBwWAOje//H//w/+CYA4LADQvf/j//8f/BMAcVgAoHv/x///P/gnAOKwAED3/o//"
    "/3/wTwDEYQGA7v0f////4J8AiMMCAN37P/7//8E/ARCHBQC693/8//+DfwIgDgsAdO//+P//B/8EQBwWAOje//H/"
    "/w/+CYA4LADQvf/j//8f/BMAcVgAoHv/x///P/gnAOKwAED3/o///3/wTwDEYQGA7v0f////4J8AiMMCAN37P/7/"
    "/8E/ARCHBQC693/8//+DfwIgDgsAdO//+P//B/8EQBwWAOje//H//w/+CYA4LADQvf/j//8f/BMAcVgAoHv/x///"
    "P/gnAOKwAED3/o///3/wTwDEYQGA7v0f////4J8AiMMCAN37P/7//8E/ARCHBQC693/8//+DfwIgDgsAdO//+P//"
    "B/8EQBwWAOje//H//w/+CYA4LADQvf/j//8f/BMAcVgAoHv/x///P/gnAOKwAED3/o///3/wTwDEYQGA7v0f////"
    "4J8AiMMCAN37P/7//8E/ARCHBQC693/8//+DfwIgDgsAdO//+P//B/8EQBwWAOje//H//w/+CYA4LADQvf/j//8f"
    "/BMAcVgAoHv/x///P/gnAOKwAED3/o///3/wTwDEYQGA7v0f////4J8AiMMCAN37P/7//8E/ARCHBQC693/8//+D"
    "fwIgDgsAdO//+P//B/8EQBwWAOje//H//w/+CYA4LADQvf/j//8f/BMAcVgAoHv/x///P/gnAOKwAED3/o///3/w"
    "TwDEYQGA7v0f////4J8AiMMCAN37P/7//8E/ARCHBQC693/8//+DfwIgDgsAdO//+P//B/8EQBwWAOje//H//w/+"
    "CYA4LADQvf/j//8f/BMAcVgAoHv/x///P/gnAOKwAED3/o///3/wTwDEYQGA7v0f////4J8AiMMCAN37P/7//8E/"
    "ARCHBQC693/8//+DfwIgDgsAdO//+P//B/8EQBwWAOje//H//w/+CYA4LADQvf/j//8f/BMAcVgAoHv/x///P/gn"
    "AOKwAED3/o///3/wTwDEYQGA7v0f////4J8AiMMCAN37P/7//8E/ARCHBQC693/8//+DfwIgDgsAdO//+P//B/8E"
    "QBwWAOje//H//w/+CYA4LADQvf/j//8f/BMAcVgAoHv/x///P/gnAOKwAED3/o///3/wTwDEYQGA7v0f////4J8A"
    "iMMCAN37P/7//8E/ARCHBQC693/8//+DfwIgDgsAdO//+P//B/8EQBwWAOje//H//w/+CYA4LADQvf/j//8f/BMA"
    "cVgAoHv/x///P/gnAOKwAED3/o///3/wTwDEYQGA7v0f////4J8AiMMCAN37P/7//8E/ARCHBQC693/8//+DfwIg"
    "DgsAdO//+P//B/8EQBwWAOje//H//w/+CYA4LADQvf/j//8f/BMAcVgAoHv/x///P/gnAOKwAED3/o///3/wTwDE"
    "YQGA7v0f////4J8AiMMCAN37P/7//8E/ARCHBQC693/8//+DfwIgDgsAdO//+P//B/8EQBwWAOje//H//w/+CYA4"
    "LADQvf/j//8f/BMAcVgAoHv/x///P/gnAOKwAED3/o///3/wTwDEYQGA7v0f////4J8AiMMCAN37P/7//8E/ARCH"
    "BQC693/8//+DfwIgDgsAdO//+P//B/8EQBwWAOje//H//w/+CYA4LADQvf/j//8f/BMAcVgAoHv/x///P/gnAOKw"
    "AED3/o///3/wTwDEYQGA7v0f////4J8AiMMCAN37P/7//8E/ARCHBQC693/8//+DfwIgDgsAdO//+P//B/8EQBwW"
    "AOje//H//w/+CYA4LADQvf/j//8f/BMAcVgAoHv/x///P/gnAOKwAED3/o///3/wTwDEYQGA7v0f////4J8AiMMC"
    "AN37P/7//8E/ARCHBQC693/8//+DfwIgDgsAdO//+P//B/8EQBwWAOje//H//w/+CYA4LADQvf/j//8f/BMAcVgA"
    "oHv/x///P/gnAOKwAED3/o///3/wTwDEYQGA7v0f////4J8AiMMCAN37P/7//8E/ARCHBQC693/8//+DfwIgDgsA"
    "dO//+P//B/8EQBwWAOje//H//w/+CYA4LADQvf/j//8f/BMAcVgAoHv/x///Pw=="
)


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


# -- bombs ------------------------------------------------------------------------------


#: CRC-32 of BOMB_BYTES zeros (computing it takes 0.6 s, which would stall the server's
#: loop whenever a client read a bomb to its end).
_BOMB_CRC32 = 0x5B64C2B0


def _deflate_bomb(wbits: int, total: int = BOMB_BYTES) -> Iterator[bytes]:
    """`total` zeros deflated, as an iterator of wire pieces (~1 KiB per MiB of output).

    A full flush resets the compressor, so every 1 MiB block after the first compresses
    to identical bytes: 2 MiB are compressed, the rest repeated. The trailer is known
    without reading a GiB: CRC-32 of 1 GiB of zeros is a constant, and Adler-32 of n
    zeros is (n mod 65521) << 16 | 1.
    """
    block = b"\0" * (1 << 20)
    comp = zlib.compressobj(9, zlib.DEFLATED, wbits)
    first = comp.compress(block) + comp.flush(zlib.Z_FULL_FLUSH)
    repeat = comp.compress(block) + comp.flush(zlib.Z_FULL_FLUSH)
    end = comp.flush(zlib.Z_FINISH)
    trailer_len = 8 if wbits > 15 else 4 if wbits > 0 else 0
    yield first
    for _ in range(total // len(block) - 1):
        yield repeat
    yield end[: len(end) - trailer_len]
    if wbits > 15:
        assert total == BOMB_BYTES, "the CRC constant is for BOMB_BYTES"
        yield struct.pack("<II", _BOMB_CRC32, total & 0xFFFFFFFF)
    elif wbits > 0:
        yield struct.pack(">I", ((total % 65521) << 16) | 1)


def _gzip_members_bomb(total: int = BOMB_BYTES) -> Iterator[bytes]:
    """Many small gzip members back to back: each alone is harmless, together 1 GiB."""
    member = gzip.compress(b"\0" * (1 << 20), 9)
    for _ in range(total // (1 << 20)):
        yield member


def _empty_members_flood() -> Iterator[bytes]:
    """gzip members that decompress to nothing, forever: zero output, unbounded input."""
    member = gzip.compress(b"")
    batch = member * (65536 // len(member))
    for _ in range(ENDLESS_LIMIT // len(batch)):
        yield batch


def brotli_bomb() -> bytes:
    return base64.b64decode(_BROTLI_BOMB_B64)


@cache
def zstd_bomb() -> bytes | None:
    """1 GiB of zeros as one zstd frame, or None without a zstd encoder."""
    try:
        from backports import zstd  # type: ignore[attr-defined,import-not-found,unused-ignore]
    except ImportError:
        try:
            from compression import zstd  # type: ignore[import-not-found,no-redef,unused-ignore]
        except ImportError:
            return None
    comp = zstd.ZstdCompressor(level=1)
    block = b"\0" * (1 << 20)
    parts = [comp.compress(block) for _ in range(BOMB_BYTES // len(block))]
    parts.append(comp.flush())
    return b"".join(parts)


def zstd_compress(data: bytes) -> bytes | None:
    try:
        from backports import zstd  # type: ignore[attr-defined,import-not-found,unused-ignore]
    except ImportError:
        try:
            from compression import zstd  # type: ignore[no-redef,unused-ignore]
        except ImportError:
            return None
    return bytes(zstd.compress(data))


def brotli_compress(data: bytes) -> bytes | None:
    """Brotli-encode with whichever binding is installed (None without one)."""
    for name in ("brotlicffi", "brotli"):
        try:
            module = __import__(name)
        except ImportError:
            continue
        return bytes(module.compress(data))
    return None


# -- the server ---------------------------------------------------------------------------


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]

    def arg(self, name: str, default: str = "") -> str:
        return self.query.get(name, [default])[0]


Handler = Callable[["_Conn", Request], Awaitable[None]]
_ROUTES: dict[str, tuple[Handler, str]] = {}
_PREFIX_ROUTES: list[tuple[str, Handler, str]] = []


def route(path: str, description: str) -> Callable[[Handler], Handler]:
    """Register an endpoint; a path ending in '/' (other than '/') matches every path under it."""

    def register(handler: Handler) -> Handler:
        if path.endswith("/") and path != "/":
            _PREFIX_ROUTES.append((path, handler, description))
        else:
            _ROUTES[path] = (handler, description)
        return handler

    return register


def catalogue() -> dict[str, str]:
    """Every endpoint with what it does (the index page lists the same)."""
    out = {path: desc for path, (_, desc) in _ROUTES.items()}
    out.update({prefix + "…": desc for prefix, _, desc in _PREFIX_ROUTES})
    return out


class _Conn:
    """One accepted connection: raw writes, bounded hangs, resets."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: HostileServer
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.server = server

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def respond(
        self,
        status: int,
        body: bytes = b"",
        *,
        content_type: str | None = "text/html; charset=utf-8",
        headers: list[tuple[str, str]] | None = None,
        reason: str = "",
    ) -> None:
        lines = [f"HTTP/1.1 {status} {reason or _REASONS.get(status, 'Whatever')}"]
        if content_type is not None:
            lines.append(f"Content-Type: {content_type}")
        lines += [f"{k}: {v}" for k, v in headers or []]
        lines += [f"Content-Length: {len(body)}", "Connection: close"]
        await self.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)

    async def stream(self, pieces: Iterator[bytes], *, pace: float = 0.0) -> None:
        """Write pieces until done, the client leaves, or MAX_HANG_S passes."""
        deadline = time.monotonic() + self.server.max_hang
        for piece in pieces:
            if time.monotonic() > deadline:
                return
            await self.write(piece)
            if pace:
                await asyncio.sleep(pace)

    async def hang(self, seconds: float | None = None) -> None:
        """Say nothing until the client closes (or the hang's bound passes)."""
        limit = self.server.max_hang if seconds is None else min(seconds, self.server.max_hang)
        with contextlib.suppress(TimeoutError, ConnectionError):
            await asyncio.wait_for(self.reader.read(), limit)

    def reset(self) -> None:
        """Close with a TCP RST instead of a FIN (SO_LINGER 0, then abort)."""
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()


_REASONS = {
    200: "OK",
    301: "Moved Permanently",
    302: "Found",
    404: "Not Found",
    410: "Gone",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class HostileServer:
    """The catalogue served on one loopback address: ``async with HostileServer() as s``."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, max_hang: float = MAX_HANG_S):
        self.host = host
        self.port = port
        self.max_hang = max_hang
        self.requests = 0
        self._server: asyncio.Server | None = None
        self._blackhole: socket.socket | None = None
        self._blackhole_filler: socket.socket | None = None
        self._refused: socket.socket | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def blackhole_port(self) -> int:
        assert self._blackhole is not None
        return int(self._blackhole.getsockname()[1])

    @property
    def refused_port(self) -> int:
        assert self._refused is not None
        return int(self._refused.getsockname()[1])

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.port}{path}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._on_client, self.host, self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])
        # Black hole: a backlog of 0 holds one pending connection; once a filler takes
        # it, the kernel drops further SYNs and a client's connect hangs.
        hole = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        hole.bind((self.host, 0))
        hole.listen(0)
        filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        filler.settimeout(2.0)
        filler.connect(hole.getsockname())
        self._blackhole, self._blackhole_filler = hole, filler
        # Refused: bound (so no one else takes the port) but never listening.
        refused = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        refused.bind((self.host, 0))
        self._refused = refused

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5)
        for sock in (self._blackhole_filler, self._blackhole, self._refused):
            if sock is not None:
                sock.close()

    async def __aenter__(self) -> HostileServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def ready_info(self) -> dict[str, object]:
        return {
            "host": self.host,
            "port": self.port,
            "blackhole_port": self.blackhole_port,
            "refused_port": self.refused_port,
        }

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = _Conn(reader, writer, self)
        try:
            request = await self._read_request(reader)
            if request is None:
                return
            self.requests += 1
            handler = self._handler_for(request.path)
            await handler(conn, request)
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError, OSError):
            pass  # the client left: that is what clients of this server do
        finally:
            self._tasks.discard(task)
            if not writer.transport.is_closing():
                writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    async def _read_request(self, reader: asyncio.StreamReader) -> Request | None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10.0)
        except (asyncio.LimitOverrunError, asyncio.IncompleteReadError, TimeoutError):
            return None
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) < 2:
            return None
        headers = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        target = urlsplit(parts[1])
        query = parse_qs(target.query, keep_blank_values=True)
        return Request(parts[0], target.path or "/", query, headers)

    @staticmethod
    def _handler_for(path: str) -> Handler:
        if path in _ROUTES:
            return _ROUTES[path][0]
        for prefix, handler, _ in _PREFIX_ROUTES:
            if path.startswith(prefix):
                return handler
        return _not_found


async def _not_found(conn: _Conn, req: Request) -> None:
    await conn.respond(404, _page("Not found", req.path))


# -- the catalogue ------------------------------------------------------------------------


#: Endpoints that send a client to a non-loopback address. A client that follows them
#: with private targets allowed would really connect there, so the index never links
#: them and a test may fetch them only with allow_private=False (the refusal under test).
LEAVES_LOOPBACK = frozenset({"/redirect/private", "/redirect/metadata", "/redirect/to"})


@route("/", "index: links to every endpoint that stays on loopback")
async def _index(conn: _Conn, req: Request) -> None:
    links = [p for p in _ROUTES if p != "/" and p not in LEAVES_LOOPBACK]
    await conn.respond(200, _page("Hostile web", "Every trap in one place.", links))


@route("/robots.txt", "allows everything")
async def _robots(conn: _Conn, req: Request) -> None:
    await conn.respond(200, ROBOTS_BODY, content_type="text/plain")


@route("/ok", "an ordinary page (the control)")
async def _ok(conn: _Conn, req: Request) -> None:
    await conn.respond(200, OK_BODY)


@route("/echo-headers", "the request's headers as JSON, served as text/html")
async def _echo_headers(conn: _Conn, req: Request) -> None:
    await conn.respond(200, json.dumps(req.headers).encode())


# timing


@route("/slow-first-byte", "answers normally after ?delay= seconds (default 0.3)")
async def _slow_first_byte(conn: _Conn, req: Request) -> None:
    await conn.hang(float(req.arg("delay", str(SLOW_FIRST_BYTE_S))))
    await conn.respond(200, OK_BODY)


@route("/never-answers", "reads the request, never says a word")
async def _never_answers(conn: _Conn, req: Request) -> None:
    await conn.hang()


@route("/trickle-headers", "a header byte every 0.2 s, forever: no read gap ever times out")
async def _trickle_headers(conn: _Conn, req: Request) -> None:
    await conn.write(b"HTTP/1.1 200 OK\r\nX-Trickle: ")
    await conn.stream(iter(lambda: b"a", None), pace=0.2)


@route("/hang-after-headers", "headers promise 1000 bytes, then silence")
async def _hang_after_headers(conn: _Conn, req: Request) -> None:
    await conn.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 1000\r\n\r\n<html>"
    )
    await conn.hang()


@route("/slow-body", "a body byte every 0.1 s: every read is quick, the whole never ends")
async def _slow_body(conn: _Conn, req: Request) -> None:
    await conn.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 100000\r\n\r\n"
    )
    await conn.stream(iter(lambda: b"x", None), pace=0.1)


# broken connections and framing


@route("/partial-body", "declares 10,000 bytes, sends 3,000, closes")
async def _partial_body(conn: _Conn, req: Request) -> None:
    await conn.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
        + f"Content-Length: {PARTIAL_DECLARED}\r\n\r\n".encode()
        + b"<p>" * (PARTIAL_SENT // 3)
    )


@route("/reset", "a TCP reset instead of a response")
async def _reset(conn: _Conn, req: Request) -> None:
    conn.reset()


@route("/reset-mid-body", "headers and half a body, then a TCP reset")
async def _reset_mid_body(conn: _Conn, req: Request) -> None:
    await conn.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 10000\r\n\r\n"
        + b"<p>" * 1000
    )
    conn.reset()


@route("/close-before-response", "closes the connection without a response")
async def _close_before_response(conn: _Conn, req: Request) -> None:
    conn.writer.close()


@route("/broken-chunked", "a good chunk, then a chunk size that is not hex")
async def _broken_chunked(conn: _Conn, req: Request) -> None:
    await conn.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"6\r\n<html>\r\nzz\r\nnot a chunk\r\n0\r\n\r\n"
    )


@route("/chunked-no-end", "chunks, then the connection closes without the last chunk")
async def _chunked_no_end(conn: _Conn, req: Request) -> None:
    await conn.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"6\r\n<html>\r\n6\r\n<body>\r\n"
    )


@route("/malformed-header", "a header line without a colon")
async def _malformed_header(conn: _Conn, req: Request) -> None:
    await conn.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nthis line has no colon\r\n"
        b"Content-Length: 2\r\n\r\nhi"
    )


@route("/malformed-status", "a status line that is not HTTP")
async def _malformed_status(conn: _Conn, req: Request) -> None:
    await conn.write(b"HTTP/1.1 abc Surprise\r\nContent-Length: 2\r\n\r\nhi")


@route("/http09", "no status line at all: the body straight away")
async def _http09(conn: _Conn, req: Request) -> None:
    await conn.write(b"<html><body>HTTP/0.9 style</body></html>\r\n\r\n")


@route("/conflicting-length", "two different Content-Lengths (a smuggling classic)")
async def _conflicting_length(conn: _Conn, req: Request) -> None:
    await conn.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 2\r\n"
        b"Content-Length: 20\r\n\r\nhi"
    )


@route("/huge-header", "one header line of 100 KB")
async def _huge_header(conn: _Conn, req: Request) -> None:
    await conn.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nX-Huge: "
        + b"h" * 100_000
        + b"\r\nContent-Length: 2\r\n\r\nhi"
    )


# size


@route("/oversize", "4 MiB of HTML with a Content-Length")
async def _oversize(conn: _Conn, req: Request) -> None:
    body = b"<p>" + b"x" * (OVERSIZE_BYTES - 3)
    await conn.respond(200, body)


@route("/endless", "HTML without a length, until the client hangs up")
async def _endless(conn: _Conn, req: Request) -> None:
    await conn.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\n\r\n")
    piece = b"<p>endless</p>" * 4096
    await conn.stream(iter([piece] * (ENDLESS_LIMIT // len(piece))))


# compression


async def _send_encoded(conn: _Conn, encoding: str, pieces: Iterator[bytes]) -> None:
    await conn.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
        + f"Content-Encoding: {encoding}\r\nConnection: close\r\n\r\n".encode()
    )
    await conn.stream(pieces)


@route("/bomb/gzip", "1 GiB of zeros gzipped to ~1 MiB")
async def _bomb_gzip(conn: _Conn, req: Request) -> None:
    await _send_encoded(conn, "gzip", _deflate_bomb(31))


@route("/bomb/deflate", "1 GiB of zeros, zlib-wrapped deflate")
async def _bomb_deflate(conn: _Conn, req: Request) -> None:
    await _send_encoded(conn, "deflate", _deflate_bomb(15))


@route("/bomb/deflate-raw", "1 GiB of zeros, raw deflate (the common misreading of 'deflate')")
async def _bomb_deflate_raw(conn: _Conn, req: Request) -> None:
    await _send_encoded(conn, "deflate", _deflate_bomb(-15))


@route("/bomb/gzip-members", "1,024 gzip members of 1 MiB of zeros each")
async def _bomb_gzip_members(conn: _Conn, req: Request) -> None:
    await _send_encoded(conn, "gzip", _gzip_members_bomb())


@route("/bomb/empty-members", "endless gzip members that decompress to nothing")
async def _bomb_empty_members(conn: _Conn, req: Request) -> None:
    await _send_encoded(conn, "gzip", _empty_members_flood())


@route("/bomb/br", "1 GiB of zeros as 1,681 bytes of brotli (sent whatever was accepted)")
async def _bomb_br(conn: _Conn, req: Request) -> None:
    await _send_encoded(conn, "br", iter([brotli_bomb()]))


@route("/bomb/zstd", "1 GiB of zeros as one zstd frame (404 without a zstd encoder)")
async def _bomb_zstd(conn: _Conn, req: Request) -> None:
    bomb = zstd_bomb()  # built before the server reports ready
    if bomb is None:
        await _not_found(conn, req)
        return
    pieces = [bomb[i : i + 65536] for i in range(0, len(bomb), 65536)]
    await _send_encoded(conn, "zstd", iter(pieces))


@route("/encoded/", "OK_BODY encoded as /encoded/<gzip|deflate|deflate-raw|br|zstd>")
async def _encoded(conn: _Conn, req: Request) -> None:
    kind = req.path.rsplit("/", 1)[1]
    encoded: bytes | None
    if kind == "gzip":
        encoded = gzip.compress(OK_BODY)
    elif kind == "deflate":
        encoded = zlib.compress(OK_BODY)
    elif kind == "deflate-raw":
        comp = zlib.compressobj(6, zlib.DEFLATED, -15)
        encoded = comp.compress(OK_BODY) + comp.flush()
    elif kind == "br":
        encoded = brotli_compress(OK_BODY)
    elif kind == "zstd":
        encoded = zstd_compress(OK_BODY)
    else:
        encoded = None
    if encoded is None:
        await _not_found(conn, req)
        return
    name = "deflate" if kind == "deflate-raw" else kind
    await conn.respond(200, encoded, headers=[("Content-Encoding", name)])


@route("/bad-gzip", "says gzip, sends plain text")
async def _bad_gzip(conn: _Conn, req: Request) -> None:
    await conn.respond(200, OK_BODY, headers=[("Content-Encoding", "gzip")])


@route("/unknown-encoding", "Content-Encoding: compress (nobody's decoder)")
async def _unknown_encoding(conn: _Conn, req: Request) -> None:
    await conn.respond(200, OK_BODY, headers=[("Content-Encoding", "compress")])


# redirects


def _redirect(conn: _Conn, location: str | None, status: int = 302) -> Awaitable[None]:
    headers = [("Location", location)] if location is not None else []
    return conn.respond(status, b"", headers=headers)


@route("/redirect/loop", "302 to itself")
async def _redirect_loop(conn: _Conn, req: Request) -> None:
    await _redirect(conn, "/redirect/loop")


@route("/redirect/loop-a", "302 to /redirect/loop-b, which 302s back")
async def _redirect_loop_a(conn: _Conn, req: Request) -> None:
    await _redirect(conn, "/redirect/loop-b")


@route("/redirect/loop-b", "302 to /redirect/loop-a")
async def _redirect_loop_b(conn: _Conn, req: Request) -> None:
    await _redirect(conn, "/redirect/loop-a")


@route("/redirect/chain/", f"/redirect/chain/N → N+1 … {CHAIN_END}, which answers 200")
async def _redirect_chain(conn: _Conn, req: Request) -> None:
    try:
        n = int(req.path.rsplit("/", 1)[1])
    except ValueError:
        n = 0
    if n >= CHAIN_END:
        await conn.respond(200, ROBOTS_BODY if "robots" in req.query else OK_BODY)
        return
    suffix = "?robots" if "robots" in req.query else ""
    await _redirect(conn, f"/redirect/chain/{n + 1}{suffix}", 301)


@route("/redirect/to", "302 to ?url=")
async def _redirect_to(conn: _Conn, req: Request) -> None:
    await _redirect(conn, req.arg("url", "/ok"))


@route("/redirect/private", "302 to http://10.0.0.1/ (a private address)")
async def _redirect_private(conn: _Conn, req: Request) -> None:
    await _redirect(conn, "http://10.0.0.1/")


@route("/redirect/metadata", "302 to the cloud metadata address 169.254.169.254")
async def _redirect_metadata(conn: _Conn, req: Request) -> None:
    await _redirect(conn, "http://169.254.169.254/latest/meta-data/")


@route("/redirect/no-location", "302 without a Location")
async def _redirect_no_location(conn: _Conn, req: Request) -> None:
    await _redirect(conn, None)


@route("/redirect/ftp", "302 to an ftp: URL")
async def _redirect_ftp(conn: _Conn, req: Request) -> None:
    await _redirect(conn, "ftp://files.invalid/secret")


# statuses


@route("/status/", "/status/<code>: that status; 503 and 429 carry Retry-After (?retry_after=)")
async def _status(conn: _Conn, req: Request) -> None:
    try:
        code = int(req.path.rsplit("/", 1)[1])
    except ValueError:
        code = 500
    headers = []
    default = {503: str(RETRY_AFTER_503), 429: str(RETRY_AFTER_429)}.get(code)
    retry_after = req.arg("retry_after", default or "")
    if retry_after == "date":
        retry_after = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 90))
    if retry_after:
        headers.append(("Retry-After", retry_after))
    await conn.respond(code, _page(f"Status {code}", "An error page."), headers=headers)


# charsets


@route("/charset/lies", "header says UTF-8, bytes are windows-1252")
async def _charset_lies(conn: _Conn, req: Request) -> None:
    await conn.respond(200, CHARSET_LIES_BODY)


@route("/charset/meta-lies", "<meta> says windows-1251, bytes are UTF-8")
async def _charset_meta_lies(conn: _Conn, req: Request) -> None:
    await conn.respond(200, META_LIES_BODY, content_type="text/html")


@route("/charset/utf16-bom", "UTF-16LE with a BOM, no charset declared")
async def _charset_utf16(conn: _Conn, req: Request) -> None:
    await conn.respond(200, UTF16_BODY, content_type="text/html")


@route("/charset/none", "UTF-8 without any declaration")
async def _charset_none(conn: _Conn, req: Request) -> None:
    await conn.respond(200, NO_CHARSET_BODY, content_type="text/html")


# content types


@route("/type/pdf", "application/pdf, endless: only a client that reads it will notice")
async def _type_pdf(conn: _Conn, req: Request) -> None:
    await conn.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/pdf\r\nConnection: close\r\n\r\n%PDF-1.7\n"
    )
    await conn.stream(iter([b"0" * 65536] * (ENDLESS_LIMIT // 65536)))


@route("/type/png", "a real PNG")
async def _type_png(conn: _Conn, req: Request) -> None:
    await conn.respond(200, PNG_BODY, content_type="image/png")


@route("/type/json", "application/json")
async def _type_json(conn: _Conn, req: Request) -> None:
    await conn.respond(200, JSON_BODY, content_type="application/json")


@route("/no-content-type", "HTML without a Content-Type header")
async def _no_content_type(conn: _Conn, req: Request) -> None:
    await conn.respond(200, OK_BODY, content_type=None)


@route("/empty", "200 text/html with an empty body")
async def _empty(conn: _Conn, req: Request) -> None:
    await conn.respond(200, b"")


@route("/garbage", "64 KiB of random bytes served as text/html")
async def _garbage(conn: _Conn, req: Request) -> None:
    await conn.respond(200, GARBAGE_BODY)


# markup


@route("/html/malformed", "unclosed tags, stray end tags, an unterminated comment")
async def _html_malformed(conn: _Conn, req: Request) -> None:
    await conn.respond(200, MALFORMED_HTML_BODY)


@route("/html/nested-forms", "200 forms nested in each other")
async def _html_nested_forms(conn: _Conn, req: Request) -> None:
    await conn.respond(200, NESTED_FORMS_BODY)


@route("/html/deep", f"{DEEP_NESTING_DEPTH:,} nested <div>s")
async def _html_deep(conn: _Conn, req: Request) -> None:
    await conn.respond(200, DEEP_NESTING_BODY)


# crawler traps


@route("/calendar/", "/calendar/YYYY/MM links to the next month, forever")
async def _calendar(conn: _Conn, req: Request) -> None:
    try:
        _, _, year_s, month_s = req.path.split("/")[:4]
        year, month = int(year_s), int(month_s)
    except ValueError:
        year, month = 2024, 1
    nxt = (year + month // 12, month % 12 + 1)
    prev = (year - (month == 1), (month - 2) % 12 + 1)
    body = _page(
        f"Calendar {year:04d}-{month:02d}",
        f"Nothing happens in month {month} of {year}.",
        [calendar_path(*nxt), calendar_path(*prev)],
    )
    await conn.respond(200, body)


@route("/session/", "same page, links carry a fresh ?sid= on every view")
async def _session(conn: _Conn, req: Request) -> None:
    name = req.path.rsplit("/", 1)[1] or "home"
    # the session id is in the hrefs only, as on real sites: the visible text is the same
    links = [f"/session/{n}?sid={uuid.uuid4().hex}" for n in ("home", "about")]
    body = _page(f"Session {name}", "Welcome back.", links, ["Home", "About"])
    await conn.respond(200, body)


# -- running it ---------------------------------------------------------------------------


def _write_json(path: Path, data: object) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


async def _serve(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    zstd_bomb()  # ~0.5 s of compression: now, not while a client waits on the loop
    async with HostileServer(args.host, args.port, args.max_hang) as server:
        if args.ready_file:
            _write_json(Path(args.ready_file), server.ready_info())
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--max-hang", type=float, default=MAX_HANG_S)
    parser.add_argument("--ready-file")
    parser.add_argument("--list", action="store_true", help="print the catalogue and exit")
    args = parser.parse_args(argv)
    if args.list:
        for path, desc in catalogue().items():
            print(f"{path:28} {desc}")
        return 0
    asyncio.run(_serve(args))
    return 0


@dataclass
class HostileProcess:
    """The server as a subprocess; ``stop()`` (or ``with``) ends it."""

    process: subprocess.Popen[bytes]
    host: str
    port: int
    blackhole_port: int
    refused_port: int
    stderr_path: Path

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.port}{path}"

    def stop(self, timeout: float = 10.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                return self.process.wait(timeout)
        return self.process.returncode

    def __enter__(self) -> HostileProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_hostile_process(
    tmpdir: str | os.PathLike[str], host: str = "127.0.0.1", timeout: float = 30.0
) -> HostileProcess:
    """Start ``python -m tests.hostile.server`` and return once its ready file appears."""
    tmp = Path(tmpdir)
    tmp.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:8]
    ready = tmp / f"hostile-{tag}.ready.json"
    stderr_path = tmp / f"hostile-{tag}.stderr"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "tests.hostile.server", "--host", host, "--ready-file", str(ready)]
    with open(stderr_path, "wb") as err:
        process = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=REPO
        )
    deadline = time.monotonic() + timeout
    while not ready.exists():
        if process.poll() is not None:
            raise RuntimeError(
                f"hostile server exited with {process.returncode}: "
                + stderr_path.read_text(errors="replace")[-4000:]
            )
        if time.monotonic() > deadline:
            process.kill()
            raise TimeoutError(f"hostile server not ready after {timeout} s")
        time.sleep(0.01)  # polling a condition (the ready file) with a deadline
    info = json.loads(ready.read_text(encoding="utf-8"))
    return HostileProcess(
        process,
        host,
        int(info["port"]),
        int(info["blackhole_port"]),
        int(info["refused_port"]),
        stderr_path,
    )


def quoted(url: str) -> str:
    """For /redirect/to?url=…"""
    return quote(url, safe="")


if __name__ == "__main__":
    sys.exit(main())
