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
import contextlib
import dataclasses
import ipaddress
import json
import re
import socket
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

from streams.core.parsing import decode_html, parse_html
from streams.fetch import decode
from streams.fetch.config import FetchConfig
from streams.fetch.fetcher import Fetcher
from streams.fetch.handlers import DEFAULT_HANDLERS, FetchResult, ResponseView, register_handler
from streams.fetch.resolver import DnsAnswer, GuardedResolver
from tests.hostile import server as hs
from tests.hostile.dns import FakeDns
from tests.hostile.server import HostileProcess, start_hostile_process
from tests.hostile.toy_png import handle_png

T = TypeVar("T")

CAP = 256 * 1024
#: Scheduling slack on a loaded 2-core machine, on top of a timeout.
SLACK = 0.5
UA = "SeineTest/1.0 (+hostile)"
TIMEOUTS: dict[str, Any] = {
    "connect_timeout": 0.5,
    "read_timeout": 0.5,
    "first_byte_timeout": 1.0,
    "total_timeout": 2.0,
}
#: For cases that test content, not time: loose enough never to fire under load.
RELAXED: dict[str, Any] = {
    "connect_timeout": 5.0,
    "read_timeout": 5.0,
    "first_byte_timeout": 8.0,
    "total_timeout": 10.0,
}


def run(factory: Callable[[], Awaitable[T]]) -> T:
    """A fresh stdlib event loop per call (the spy patches what it uses to connect)."""

    async def main() -> T:
        return await factory()

    with asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as runner:
        return runner.run(main())


@contextlib.contextmanager
def connection_spy() -> Iterator[list[tuple[str, int]]]:
    """Record every TCP connect; refuse any that would leave loopback (a safety net)."""
    seen: list[tuple[str, int]] = []
    original = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> None:
        if isinstance(address, tuple):
            host = str(address[0])
            seen.append((host, int(address[1])))
            if not ipaddress.ip_address(host.split("%", 1)[0]).is_loopback:
                raise ConnectionRefusedError(f"test safety net: {host} is not loopback")
        return original(self, address)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket.socket, "connect", connect)
        yield seen


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostileProcess]:
    with start_hostile_process(tmp_path_factory.mktemp("hostile")) as process:
        yield process


def make_config(hp: HostileProcess, names: list[str], **changes: Any) -> FetchConfig:
    """Every case name resolves (by override) to the hostile server."""
    base = FetchConfig(
        user_agent=UA,
        max_body_bytes=CAP,
        allow_private=True,
        dns_backend="system",  # never asked: every name has an override
        resolve={name: f"{hp.host}:{hp.port}" for name in names},
        **RELAXED,
    )
    return dataclasses.replace(base, **changes)


def host_of(case: str) -> str:
    return re.sub(r"[^a-z0-9-]", "-", case.lower()).strip("-") + ".hostile.test"


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


def _has_br() -> bool:
    return decode._BROTLI is not None


def _zstd() -> bool:
    return decode._ZSTD is not None and hs.zstd_bomb() is not None


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


# -- timeouts -----------------------------------------------------------------------------------


@dataclass
class Timed:
    url: str  # a path on the server, or a full URL with {blackhole}/{refused}
    outcome: str
    reason: str
    min_s: float
    max_s: float
    nbytes: int | None = None


TIMED: dict[str, Timed] = {
    "slow-first-byte": Timed(
        "/slow-first-byte", "fetched", r"$", hs.SLOW_FIRST_BYTE_S, 1.0 + SLACK
    ),
    "slow-first-byte-beyond": Timed(
        "/slow-first-byte?delay=5",
        "error",
        r"timeout: first byte \(no response within 0.5 s\)$",
        0.5,
        0.5 + SLACK,
        nbytes=0,
    ),
    "never-answers": Timed(
        "/never-answers",
        "error",
        r"timeout: first byte \(no response within 0.5 s\)$",
        0.5,
        0.5 + SLACK,
        nbytes=0,
    ),
    # a byte every 0.2 s: the read timeout never fires, the first-byte timeout does
    "trickle-headers": Timed(
        "/trickle-headers",
        "error",
        r"timeout: first byte \(headers incomplete after 1 s\)$",
        1.0,
        1.0 + SLACK,
        nbytes=0,
    ),
    "hang-after-headers": Timed(
        "/hang-after-headers",
        "error",
        r"timeout: read \(body stalled for 0.5 s\)$",
        0.5,
        0.5 + SLACK,
        nbytes=len(b"<html>"),
    ),
    # a byte every 0.1 s: no read gap, no first-byte problem, only the total ends it
    "slow-body": Timed("/slow-body", "error", r"timeout: total \(2 s\)$", 2.0, 2.0 + SLACK),
    "blackhole": Timed(
        "http://127.0.0.1:{blackhole}/",
        "error",
        r"timeout: connect \(0.5 s\)$",
        0.5,
        0.5 + SLACK,
        nbytes=0,
    ),
    "refused": Timed(
        "http://127.0.0.1:{refused}/",
        "error",
        r"connect: .*refused|connect: .*111",
        0.0,
        SLACK,
        nbytes=0,
    ),
}


@pytest.fixture(scope="module")
def timed_results(hostile: HostileProcess) -> dict[str, Any]:
    """The slow cases at once, while a control host is fetched again and again."""
    names = [host_of(n) for n in TIMED] + ["control.hostile.test"]
    config = make_config(hostile, names, **TIMEOUTS)

    def url(name: str, case: Timed) -> str:
        if case.url.startswith("http"):
            return case.url.format(blackhole=hostile.blackhole_port, refused=hostile.refused_port)
        return f"http://{host_of(name)}:{hostile.port}{case.url}"

    async def control(fetcher: Fetcher, until: float) -> list[FetchResult]:
        out: list[FetchResult] = []
        while time.monotonic() < until and len(out) < 200:  # bounded in count and time
            out.append(await fetcher.fetch(f"http://control.hostile.test:{hostile.port}/ok"))
        return out

    async def go() -> tuple[dict[str, FetchResult], list[FetchResult]]:
        fetcher = Fetcher(config)
        try:
            slow = asyncio.gather(*(fetcher.fetch(url(n, c)) for n, c in TIMED.items()))
            controls = control(fetcher, time.monotonic() + 2.0)
            results, control_results = await asyncio.gather(slow, controls)
        finally:
            await fetcher.close()
        return dict(zip(TIMED, results, strict=True)), control_results

    with connection_spy():
        results, controls = run(go)
    return {"results": results, "controls": controls}


@pytest.mark.parametrize("name", list(TIMED))
def test_timeouts(timed_results: dict[str, Any], name: str) -> None:
    case, r = TIMED[name], timed_results["results"][name]
    assert r.outcome == case.outcome, (r.outcome, r.reason)
    assert re.match(case.reason, r.reason), r.reason
    seconds = r.elapsed_ms / 1000
    assert case.min_s - 0.02 <= seconds <= case.max_s, seconds
    assert seconds <= TIMEOUTS["total_timeout"] + SLACK
    if case.outcome != "fetched":
        assert r.status == 0
    if case.nbytes is not None:
        assert len(r.body) == case.nbytes


def test_slow_body_keeps_what_arrived(timed_results: dict[str, Any]) -> None:
    r = timed_results["results"]["slow-body"]
    assert 0 < len(r.body) < 100_000 and r.body == b"x" * len(r.body)


def test_other_hosts_are_fetched_at_full_speed_meanwhile(timed_results: dict[str, Any]) -> None:
    controls = timed_results["controls"]
    assert len(controls) >= 10, "the control host was starved while others hung"
    assert all(r.outcome == "fetched" and r.body == hs.OK_BODY for r in controls)
    # not queued behind hosts that hang for seconds (a loose bound: the machine may be busy)
    assert max(r.elapsed_ms for r in controls) < 1000, sorted(r.elapsed_ms for r in controls)[-3:]


# -- memory: bombs with tracemalloc -------------------------------------------------------------

BOMBS = ["/bomb/gzip", "/bomb/deflate", "/bomb/deflate-raw", "/bomb/gzip-members"]
if _has_br():
    BOMBS.append("/bomb/br")
if _zstd():
    BOMBS.append("/bomb/zstd")


@pytest.mark.parametrize("path", BOMBS)
def test_a_1gib_bomb_costs_a_few_caps_of_memory(hostile: HostileProcess, path: str) -> None:
    config = make_config(hostile, ["bomb.hostile.test"])

    async def go() -> tuple[FetchResult, int]:
        fetcher = Fetcher(config)
        await fetcher.start()
        try:
            tracemalloc.start()
            try:
                result = await fetcher.fetch(f"http://bomb.hostile.test:{hostile.port}{path}")
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
        finally:
            await fetcher.close()
        return result, peak

    with connection_spy():
        result, peak = run(go)
    assert result.outcome == "fetched" and result.truncated, result.reason
    assert len(result.body) == CAP and result.body == b"\0" * CAP
    assert peak < 4 * CAP + (1 << 20), f"peak {peak / 2**20:.1f} MiB for a {CAP // 1024} KiB cap"


def test_the_whole_deep_nesting_page_parses(hostile: HostileProcess) -> None:
    """100,000 nested <div>s: fetched whole under a big enough cap, parsed in bounded time."""
    cap = 2 * len(hs.DEEP_NESTING_BODY)
    config = make_config(hostile, ["deep.hostile.test"], max_body_bytes=cap)

    async def go() -> FetchResult:
        fetcher = Fetcher(config)
        try:
            return await fetcher.fetch(f"http://deep.hostile.test:{hostile.port}/html/deep")
        finally:
            await fetcher.close()

    with connection_spy():
        result = run(go)
    assert result.outcome == "fetched" and not result.truncated
    assert result.body == hs.DEEP_NESTING_BODY
    started = time.process_time()  # CPU of this process: a loaded machine adds none
    parsed = parse_html(result.body)
    assert "/ok" in parsed.links
    assert time.process_time() - started < 10.0


# -- request headers ------------------------------------------------------------------------


def test_user_agent_and_accept_encoding_are_sent(hostile: HostileProcess) -> None:
    config = make_config(hostile, ["echo.hostile.test"])

    async def go() -> FetchResult:
        fetcher = Fetcher(config)
        try:
            return await fetcher.fetch(f"http://echo.hostile.test:{hostile.port}/echo-headers")
        finally:
            await fetcher.close()

    with connection_spy():
        result = run(go)
    sent = json.loads(result.body)
    assert sent["user-agent"] == UA
    assert sent["accept-encoding"] == decode.accept_encoding()
    assert sent["host"] == f"echo.hostile.test:{hostile.port}"


# -- the SSRF guard: refusals without a connection -----------------------------------------------

ADDRESS_CLASSES = {
    "10.0.0.1": "private",
    "172.16.5.4": "private",
    "192.168.1.1": "private",
    "127.0.0.2": "loopback",
    "169.254.169.254": "link-local",
    "224.0.0.1": "multicast",
    "240.0.0.1": "reserved",
    "0.0.0.0": "unspecified",
    "100.64.0.1": "non-global",
    "::1": "loopback",
    "fe80::1": "link-local",
    "fc00::1": "private",
    "ff02::1": "multicast",
    "::ffff:10.0.0.1": "private",
}
LEGACY_LITERALS = {"2130706433": "loopback", "0x7f.1": "loopback", "0177.0.0.1": "loopback"}


def fetch_guarded(
    urls: list[tuple[str, str]], **changes: Any
) -> tuple[list[FetchResult], list[tuple[str, int]]]:
    config = dataclasses.replace(
        FetchConfig(user_agent=UA, max_body_bytes=CAP, dns_backend="system", **TIMEOUTS),
        **changes,
    )
    assert not config.allow_private

    async def go() -> list[FetchResult]:
        fetcher = Fetcher(config)
        try:
            return list(await asyncio.gather(*(fetcher.fetch(u, k) for u, k in urls)))
        finally:
            await fetcher.close()

    with connection_spy() as seen:
        results = run(go)
    return results, seen


def url_host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


@pytest.mark.parametrize("kind", ["page", "robots"])
def test_ip_literals_of_every_class_are_refused_without_connecting(kind: str) -> None:
    classes = {**ADDRESS_CLASSES, **LEGACY_LITERALS}
    urls = [(f"http://{url_host(a)}:8080/robots.txt", kind) for a in classes]
    results, seen = fetch_guarded(urls)
    assert seen == [], "a connection was attempted"
    for (address, why), r in zip(classes.items(), results, strict=True):
        assert r.outcome == "blocked", (address, r.outcome, r.reason)
        assert f"is a {why} address" in r.reason, (address, r.reason)
        assert r.status == 0 and r.body == b""
        assert r.elapsed_ms < 500


def test_names_resolving_to_every_class_are_refused_without_connecting() -> None:
    resolve = {f"h{i}.evil.test": a for i, a in enumerate(ADDRESS_CLASSES)}
    results, seen = fetch_guarded(
        [(f"http://{host}/", "page") for host in resolve], resolve=resolve
    )
    assert seen == []
    for (host, address), r in zip(resolve.items(), results, strict=True):
        why = ADDRESS_CLASSES[address]
        assert r.outcome == "blocked", (host, r.reason)
        assert f"{host} resolves to {address}, which is a {why} address" in r.reason


def test_dns_answers_pointing_inside_are_refused() -> None:
    dns = FakeDns({"rebind.test": DnsAnswer(["10.0.0.7"], 60.0)})
    resolver = GuardedResolver({}, False, backend=dns)
    config = FetchConfig(user_agent=UA, dns_backend="system", **TIMEOUTS)

    async def go() -> FetchResult:
        fetcher = Fetcher(config, resolver=resolver)
        try:
            return await fetcher.fetch("http://rebind.test/")
        finally:
            await fetcher.close()

    with connection_spy() as seen:
        r = run(go)
    assert seen == []
    assert r.outcome == "blocked" and "rebind.test resolves to 10.0.0.7" in r.reason


def test_redirects_to_private_addresses_are_refused(hostile: HostileProcess) -> None:
    """The server itself (127.0.0.1) is allow-listed; everything it points at is not."""
    base = f"http://{hostile.host}:{hostile.port}"
    inside = f"http://inside.test:{hostile.port}/robots.txt"
    other_loopback = f"http://127.0.0.2:{hostile.port}/robots.txt"
    urls = [
        (f"{base}/redirect/private", "page"),
        (f"{base}/redirect/private", "robots"),
        (f"{base}/redirect/metadata", "robots"),
        (f"{base}/redirect/to?url={hs.quoted(inside)}", "robots"),
        (f"{base}/redirect/to?url={hs.quoted(other_loopback)}", "robots"),
        ("http://10.0.0.1/", "page"),  # the page redirect's target, when it comes back
    ]
    results, seen = fetch_guarded(
        urls, allowed_networks=("127.0.0.1/32",), resolve={"inside.test": "10.9.8.7"}
    )
    page, robots_private, robots_metadata, robots_inside, robots_loopback, target = results
    assert page.outcome == "redirect" and page.location == "http://10.0.0.1/"
    assert robots_private.outcome == "blocked"
    assert "10.0.0.1 is a private address" in robots_private.reason
    assert "169.254.169.254 is a link-local address" in robots_metadata.reason
    assert "inside.test resolves to 10.9.8.7, which is a private address" in robots_inside.reason
    assert "127.0.0.2 is a loopback address" in robots_loopback.reason
    assert target.outcome == "blocked" and "10.0.0.1 is a private address" in target.reason
    assert {host for host, _ in seen} == {"127.0.0.1"}, seen  # only the allow-listed server


# -- DNS failures -------------------------------------------------------------------------------


def test_dns_failures_are_recorded_and_negative_cached(hostile: HostileProcess) -> None:
    dns = FakeDns({"up.test": DnsAnswer(["127.0.0.1"], 60.0)})
    resolver = GuardedResolver({}, True, backend=dns)
    config = FetchConfig(user_agent=UA, allow_private=True, dns_backend="system", **RELAXED)
    port = hostile.port

    async def go() -> list[FetchResult]:
        fetcher = Fetcher(config, resolver=resolver)
        try:
            return [
                await fetcher.fetch(f"http://nx.test:{port}/ok"),
                await fetcher.fetch(f"http://nx.test:{port}/ok"),
                await fetcher.fetch(f"http://up.test:{port}/ok"),
                await fetcher.fetch(f"http://up.test:{port}/ok"),
            ]
        finally:
            await fetcher.close()

    with connection_spy():
        first, again, up, up_again = run(go)
    assert first.outcome == "dns-error" and first.status == 0
    assert first.reason == "dns: nx.test: Domain name not found"
    assert again.outcome == "dns-error" and "cached; next try in" in again.reason
    assert up.outcome == up_again.outcome == "fetched"
    assert dns.calls == ["nx.test", "up.test"], "a failure or an answer was asked twice"


# -- handlers --------------------------------------------------------------------------------------


def fetch_one(hp: HostileProcess, path: str, **kw: Any) -> FetchResult:
    config = make_config(hp, ["handler.hostile.test"])

    async def go() -> FetchResult:
        fetcher = Fetcher(config, **kw)
        try:
            return await fetcher.fetch(f"http://handler.hostile.test:{hp.port}{path}")
        finally:
            await fetcher.close()

    with connection_spy():
        return run(go)


def test_a_toy_png_handler_is_one_registration(hostile: HostileProcess) -> None:
    registry = DEFAULT_HANDLERS.copy()
    registry.register("image/png", handle_png)  # the one line
    r = fetch_one(hostile, "/type/png", handlers=registry)
    assert (r.outcome, r.reason, r.status) == ("image", "png 3x2", 200)
    assert r.wire_bytes <= 65536  # it asked for 24 bytes, the fetcher read one chunk at most
    # the default registry still refuses PNGs
    assert fetch_one(hostile, "/type/png").outcome == "not-html"


def test_register_handler_reaches_the_default_fetcher(hostile: HostileProcess) -> None:
    async def handle_json(response: ResponseView, result: FetchResult) -> None:
        body = await response.read(1024)
        result.outcome, result.body = "json", body.data
        result.reason = f"{len(json.loads(body.data)['items'])} items"

    register_handler("application/json", handle_json)
    try:
        r = fetch_one(hostile, "/type/json")
    finally:
        DEFAULT_HANDLERS.unregister("application/json")
    assert (r.outcome, r.reason, r.body) == ("json", "3 items", hs.JSON_BODY)


def test_a_handler_that_skips_the_body_never_reads_it(hostile: HostileProcess) -> None:
    async def count_only(response: ResponseView, result: FetchResult) -> None:
        result.outcome, result.reason = "skipped", response.mime

    registry = DEFAULT_HANDLERS.copy()
    registry.register("application/*", count_only)
    r = fetch_one(hostile, "/type/pdf", handlers=registry)  # an endless body
    assert (r.outcome, r.reason, r.wire_bytes) == ("skipped", "application/pdf", 0)


def test_a_broken_handler_becomes_an_error_result(hostile: HostileProcess) -> None:
    async def twice(response: ResponseView, result: FetchResult) -> None:
        await response.read()
        await response.read()

    registry = DEFAULT_HANDLERS.copy()
    registry.register("image/png", twice)
    r = fetch_one(hostile, "/type/png", handlers=registry)
    assert r.outcome == "error" and r.reason == "unexpected RuntimeError: the body can be read once"


def test_the_catalogue_is_served(hostile: HostileProcess) -> None:
    """Every endpoint in the index is reachable (a broken catalogue would test nothing)."""
    r = fetch_one(hostile, "/")
    links = parse_html(r.body).links
    assert set(links) == {p for p in hs._ROUTES if p != "/" and p not in hs.LEAVES_LOOPBACK}
    assert not set(links) & hs.LEAVES_LOOPBACK
