"""The Fetcher against the hostile catalogue (tests/hostile/server.py), endpoint by endpoint.

Each case states the `FetchResult` the crawl log will carry: outcome, status,
reason, bytes, and how long it may take. Time is bounded by the configured
timeouts; memory by the cap (bodies never above it, bombs stop at it after
decompression, measured with tracemalloc).

The server runs as a subprocess. Cases run concurrently, each on its own host
name (``--resolve`` overrides to the one server), so the per-host connection pool
never queues one case behind another and the slow cases cost their own time
only once. A connection spy refuses and records any connect to a non-loopback
address: the SSRF cases check it saw nothing, and no test can ever reach past
127.0.0.0/8 even if the guard under test were broken.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from streams.core.parsing import decode_html, parse_html
from streams.fetch.config import FetchConfig
from streams.fetch.fetcher import Fetcher
from streams.fetch.handlers import FetchResult
from tests.hostile import server as hs
from tests.hostile.server import HostileProcess
from tests.unit.hostile_helpers import (
    CAP,
    RELAXED,
    SLACK,
    _has_br,
    _zstd,
    connection_spy,
    host_of,
    make_config,
    run,
)


@dataclass
class Case:
    path: str
    outcome: str
    status: int = 200
    reason: str = ""  # a regex the reason must match from its start
    body: bytes | None = None  # exact bytes kept (None: not checked)
    nbytes: int | None = None
    truncated: bool = False
    max_wire: int | None = None
    kind: str = "page"
    check: Callable[[FetchResult], None] | None = None


def zeros_to_cap(r: FetchResult) -> None:
    assert r.body == b"\0" * CAP


TRUNCATED = rf"body over {CAP} bytes, truncated"

CONTENT_CASES: dict[str, Case] = {
    "ok": Case("/ok", "fetched", body=hs.OK_BODY),
    "slow-first-byte-within": Case("/slow-first-byte", "fetched", body=hs.OK_BODY),
    # broken connections and framing
    "partial-body": Case(
        "/partial-body", "error", 0, r"payload: .*received 3000 of 10000", nbytes=hs.PARTIAL_SENT
    ),
    "reset": Case("/reset", "error", 0, r"connection: .*reset", nbytes=0),
    "reset-mid-body": Case("/reset-mid-body", "error", 0, r"(payload|connection): "),
    "close-before-response": Case(
        "/close-before-response", "error", 0, r"disconnected: closed without a response", nbytes=0
    ),
    "broken-chunked": Case(
        "/broken-chunked", "error", 0, r"(malformed response|payload): .*chunk size"
    ),
    "chunked-no-end": Case("/chunked-no-end", "error", 0, r"payload: .*transfer length"),
    "malformed-header": Case(
        "/malformed-header", "error", 0, r"malformed response: Invalid header", nbytes=0
    ),
    "malformed-status": Case(
        "/malformed-status", "error", 0, r"malformed response: Bad status line", nbytes=0
    ),
    "http09": Case("/http09", "error", 0, r"malformed response: Bad status line", nbytes=0),
    "conflicting-length": Case(
        "/conflicting-length", "error", 0, r"malformed response: Duplicate Content-Length"
    ),
    "huge-header": Case("/huge-header", "error", 0, r"malformed response: Got more than 8190"),
    # size
    "oversize": Case(
        "/oversize",
        "fetched",
        reason=TRUNCATED,
        nbytes=CAP,
        truncated=True,
        max_wire=CAP + 2 * 65536,
        check=lambda r: _eq(r.body, (b"<p>" + b"x" * CAP)[:CAP]),
    ),
    "endless": Case(
        "/endless",
        "fetched",
        reason=TRUNCATED,
        nbytes=CAP,
        truncated=True,
        max_wire=CAP + 2 * 65536,
    ),
    # compression bombs: 1 GiB each, stopped at the cap after decompression
    "bomb-gzip": Case(
        "/bomb/gzip",
        "fetched",
        reason=TRUNCATED,
        nbytes=CAP,
        truncated=True,
        max_wire=65536,
        check=zeros_to_cap,
    ),
    "bomb-deflate": Case(
        "/bomb/deflate",
        "fetched",
        reason=TRUNCATED,
        nbytes=CAP,
        truncated=True,
        max_wire=65536,
        check=zeros_to_cap,
    ),
    "bomb-deflate-raw": Case(
        "/bomb/deflate-raw",
        "fetched",
        reason=TRUNCATED,
        nbytes=CAP,
        truncated=True,
        max_wire=65536,
        check=zeros_to_cap,
    ),
    "bomb-gzip-members": Case(
        "/bomb/gzip-members",
        "fetched",
        reason=TRUNCATED,
        nbytes=CAP,
        truncated=True,
        max_wire=65536,
        check=zeros_to_cap,
    ),
    "bomb-empty-members": Case(
        "/bomb/empty-members",
        "error",
        0,
        r"content-encoding: gzip: more than 1024 members",
        nbytes=0,
        max_wire=CAP,
    ),
    "bomb-br": (
        Case(
            "/bomb/br",
            "fetched",
            reason=TRUNCATED,
            nbytes=CAP,
            truncated=True,
            max_wire=65536,
            check=zeros_to_cap,
        )
        if _has_br()
        else Case("/bomb/br", "error", 0, r"content-encoding: unsupported content-encoding 'br'")
    ),
    # encodings decoded right
    "gzip": Case("/encoded/gzip", "fetched", body=hs.OK_BODY),
    "deflate": Case("/encoded/deflate", "fetched", body=hs.OK_BODY),
    "deflate-raw": Case("/encoded/deflate-raw", "fetched", body=hs.OK_BODY),
    "bad-gzip": Case("/bad-gzip", "error", 0, r"content-encoding: gzip: .*incorrect header"),
    "unknown-encoding": Case(
        "/unknown-encoding", "error", 0, r"content-encoding: unsupported content-encoding"
    ),
    # redirects: a page never follows one; the target goes back through url-filter
    "redirect-loop": Case(
        "/redirect/loop",
        "redirect",
        302,
        r"redirect to /redirect/loop$",
        nbytes=0,
        check=lambda r: _eq(r.location, "/redirect/loop"),
    ),
    "redirect-chain": Case(
        "/redirect/chain/0",
        "redirect",
        301,
        r"redirect to /redirect/chain/1$",
        check=lambda r: _eq(r.location, "/redirect/chain/1"),
    ),
    "redirect-no-location": Case(
        "/redirect/no-location",
        "redirect",
        302,
        r"redirect without Location$",
        check=lambda r: _eq(r.location, None),
    ),
    "redirect-ftp": Case(
        "/redirect/ftp",
        "redirect",
        302,
        r"redirect to ftp://",
        check=lambda r: _eq(r.location, "ftp://files.invalid/secret"),
    ),
    # robots.txt follows up to 5 hops, each guarded, within one total timeout
    "robots": Case(
        "/robots.txt", "robots", 200, r"robots.txt HTTP 200$", body=hs.ROBOTS_BODY, kind="robots"
    ),
    "robots-5-hops": Case(
        "/redirect/chain/5?robots",
        "robots",
        200,
        r"robots.txt HTTP 200 after 5 redirects$",
        body=hs.ROBOTS_BODY,
        kind="robots",
    ),
    "robots-6-hops": Case(
        "/redirect/chain/4?robots",
        "robots",
        301,
        r"robots.txt: more than 5 redirects$",
        nbytes=0,
        kind="robots",
    ),
    "robots-loop": Case(
        "/redirect/loop-a",
        "robots",
        302,
        r"robots.txt: redirect loop at .*/redirect/loop-a$",
        kind="robots",
    ),
    "robots-ftp": Case(
        "/redirect/ftp",
        "robots",
        302,
        r"robots.txt redirect to 'ftp://.*': not followed",
        kind="robots",
    ),
    # statuses: no body read, Retry-After kept for the frontier
    "404": Case(
        "/status/404",
        "http-error",
        404,
        r"HTTP 404$",
        nbytes=0,
        check=lambda r: _eq(r.retry_after, None),
    ),
    "410": Case("/status/410", "http-error", 410, r"HTTP 410$", nbytes=0),
    "500": Case("/status/500", "http-error", 500, r"HTTP 500$", nbytes=0),
    "503": Case(
        "/status/503",
        "http-error",
        503,
        r"HTTP 503, Retry-After 120 s$",
        nbytes=0,
        check=lambda r: _eq(r.retry_after, 120.0),
    ),
    "503-date": Case(
        "/status/503?retry_after=date",
        "http-error",
        503,
        r"HTTP 503, Retry-After",
        check=lambda r: _between(r.retry_after, 80.0, 91.0),
    ),
    "429": Case(
        "/status/429",
        "http-error",
        429,
        r"HTTP 429, Retry-After 30 s$",
        check=lambda r: _eq(r.retry_after, 30.0),
    ),
    # charsets: the bytes are kept exactly; decoding is the parser's
    "charset-lies": Case(
        "/charset/lies",
        "fetched",
        body=hs.CHARSET_LIES_BODY,
        check=lambda r: _contains(decode_html(r.body, "utf-8"), "Cr"),
    ),
    "charset-meta-lies": Case("/charset/meta-lies", "fetched", body=hs.META_LIES_BODY),
    "utf16-bom": Case(
        "/charset/utf16-bom",
        "fetched",
        body=hs.UTF16_BODY,
        check=lambda r: _contains(decode_html(r.body), "UTF-16 text"),
    ),
    "no-charset": Case(
        "/charset/none",
        "fetched",
        body=hs.NO_CHARSET_BODY,
        check=lambda r: _contains(decode_html(r.body), "naïve café"),
    ),
    # content types: refused before a byte of the body is read
    "pdf": Case(
        "/type/pdf", "not-html", 200, r"content type application/pdf$", nbytes=0, max_wire=0
    ),
    "png": Case("/type/png", "not-html", 200, r"content type image/png$", nbytes=0, max_wire=0),
    "json": Case("/type/json", "not-html", 200, r"content type application/json$", nbytes=0),
    "no-content-type": Case("/no-content-type", "fetched", body=hs.OK_BODY),
    "empty": Case("/empty", "fetched", body=b""),
    "garbage": Case(
        "/garbage",
        "fetched",
        body=hs.GARBAGE_BODY,
        check=lambda r: _eq(type(parse_html(r.body)).__name__, "ParsedDocument"),
    ),
    "malformed-html": Case(
        "/html/malformed",
        "fetched",
        body=hs.MALFORMED_HTML_BODY,
        check=lambda r: _contains(parse_html(r.body).links, "/ok"),
    ),
    "nested-forms": Case(
        "/html/nested-forms",
        "fetched",
        body=hs.NESTED_FORMS_BODY,
        check=lambda r: _contains(parse_html(r.body).links, "/ok"),
    ),
    # traps: each page is fine on its own; the crawl's bounds stop them (integration test)
    "calendar": Case(
        "/calendar/2024/12",
        "fetched",
        check=lambda r: _contains(r.body.decode(), 'href="/calendar/2025/01"'),
    ),
    "session": Case(
        "/session/home?sid=abc",
        "fetched",
        check=lambda r: _contains(r.body.decode(), "/session/about?sid="),
    ),
}
if _zstd():
    CONTENT_CASES["bomb-zstd"] = Case(
        "/bomb/zstd",
        "fetched",
        reason=TRUNCATED,
        nbytes=CAP,
        truncated=True,
        max_wire=CAP,
        check=zeros_to_cap,
    )
    CONTENT_CASES["zstd"] = Case("/encoded/zstd", "fetched", body=hs.OK_BODY)
if _has_br() and hs.brotli_compress(b"x") is not None:
    CONTENT_CASES["br"] = Case("/encoded/br", "fetched", body=hs.OK_BODY)


def _eq(got: object, want: object) -> None:
    assert got == want, f"{got!r} != {want!r}"


def _between(got: float | None, low: float, high: float) -> None:
    assert got is not None and low <= got <= high, got


def _contains(haystack: Any, needle: Any) -> None:
    assert needle in haystack, f"{needle!r} not in {str(haystack)[:200]!r}"


def fetch_cases(config: FetchConfig, cases: dict[str, Case], hp: HostileProcess) -> dict[str, Any]:
    """Fetch every case concurrently with one Fetcher; results and the connect log."""

    async def go() -> dict[str, FetchResult]:
        fetcher = Fetcher(config)
        try:
            results = await asyncio.gather(
                *(
                    fetcher.fetch(f"http://{host_of(name)}:{hp.port}{case.path}", case.kind)
                    for name, case in cases.items()
                )
            )
        finally:
            await fetcher.close()
        return dict(zip(cases, results, strict=True))

    with connection_spy() as seen:
        results = run(go)
    return {"results": results, "connections": seen}


@pytest.fixture(scope="module")
def content_results(hostile: HostileProcess) -> dict[str, Any]:
    return fetch_cases(
        make_config(hostile, [host_of(n) for n in CONTENT_CASES]), CONTENT_CASES, hostile
    )


def check_case(case: Case, r: FetchResult) -> None:
    assert r.outcome == case.outcome, (r.outcome, r.reason)
    assert r.status == case.status, (r.status, r.reason)
    assert re.match(case.reason, r.reason), f"reason {r.reason!r} !~ {case.reason!r}"
    if not case.reason:
        assert r.reason == ""
    if case.body is not None:
        assert r.body == case.body
    if case.nbytes is not None:
        assert len(r.body) == case.nbytes
    assert r.truncated is case.truncated
    assert len(r.body) <= CAP, "a body above the cap"
    if case.max_wire is not None:
        assert r.wire_bytes <= case.max_wire, r.wire_bytes
    if case.check is not None:
        case.check(r)


@pytest.mark.parametrize("name", list(CONTENT_CASES))
def test_hostile_endpoint(content_results: dict[str, Any], name: str) -> None:
    check_case(CONTENT_CASES[name], content_results["results"][name])


def test_every_fetch_ends_within_the_total_timeout(content_results: dict[str, Any]) -> None:
    slow = {
        name: r.elapsed_ms
        for name, r in content_results["results"].items()
        if r.elapsed_ms > (RELAXED["total_timeout"] + SLACK) * 1000
    }
    assert not slow
    assert all(host == "127.0.0.1" for host, _ in content_results["connections"])


def test_not_html_is_refused_without_reading_the_body(content_results: dict[str, Any]) -> None:
    # /type/pdf streams 64 MiB to whoever reads: refusing it costs a response head only
    pdf = content_results["results"]["pdf"]
    assert pdf.wire_bytes == 0 and pdf.elapsed_ms < 2000
