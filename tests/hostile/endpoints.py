"""The hostile catalogue itself: every endpoint, registered with :func:`route` on import.

Grouped by what they break: timing, connections and framing, size, compression,
redirects, statuses, charsets, content types, markup and crawler traps. The order
of registration is the order the index page lists them in.
"""

from __future__ import annotations

import gzip
import json
import time
import uuid
import zlib
from collections.abc import Awaitable, Iterator

from tests.hostile.bodies import (
    CHAIN_END,
    CHARSET_LIES_BODY,
    DEEP_NESTING_BODY,
    DEEP_NESTING_DEPTH,
    ENDLESS_LIMIT,
    GARBAGE_BODY,
    JSON_BODY,
    MALFORMED_HTML_BODY,
    META_LIES_BODY,
    NESTED_FORMS_BODY,
    NO_CHARSET_BODY,
    OK_BODY,
    OVERSIZE_BYTES,
    PARTIAL_DECLARED,
    PARTIAL_SENT,
    PNG_BODY,
    RETRY_AFTER_429,
    RETRY_AFTER_503,
    ROBOTS_BODY,
    SLOW_FIRST_BYTE_S,
    UTF16_BODY,
    _page,
    calendar_path,
)
from tests.hostile.bombs import (
    _deflate_bomb,
    _empty_members_flood,
    _gzip_members_bomb,
    brotli_bomb,
    brotli_compress,
    zstd_bomb,
    zstd_compress,
)
from tests.hostile.serving import _ROUTES, Request, _Conn, _not_found, route

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
