"""The whole pipeline against the hostile catalogue and a normal web, side by side.

One hostile server (tests/hostile/server.py) on 127.0.2.1 serves every trap; each
trap gets its own host name (``--resolve`` to that one address), so the frontier's
per-host rules (Retry-After waits, parking after repeated errors) can't hide one
trap's record behind another's. A small demo web runs on 127.0.1.x. One crawl with
small timeouts and a small body cap must:

* finish (--until-idle, exit 0) within the test's bound;
* store every page of the normal web, as if the traps were not there;
* log one fetch record per trap with the outcome and reason the fetcher promises,
  each within the total timeout;
* keep the infinite traps bounded: the calendar by near-duplicate detection (its months
  differ only in numbers), session ids by url-filter dropping them;
* send nothing to dead-letters.

Nothing here leaves loopback: the catalogue's redirects to non-loopback addresses
are neither seeded nor linked (``LEAVES_LOOPBACK``), because run_crawl allows
private targets.
"""

from __future__ import annotations

import re
from collections import defaultdict, deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

import topology
from streams import codec
from streams.core import decode
from streams.demo.server import ServerProcess, start_server_process
from streams.demo.webgen import PRIVATE_PREFIX, DemoWeb, WebSpec
from streams.kafka.broker import EmbeddedBroker
from streams.store.pagestore import PageStore
from tests.hostile import server as hs
from tests.hostile.server import HostileProcess, start_hostile_process
from tests.integration.conftest import read_to_end, run_crawl

HOSTILE_IP = "127.0.2.1"
CAP = 262_144
TOTAL_TIMEOUT = 2.0
MAX_DEPTH = 4
SPEC = WebSpec(hosts=4, pages_per_host=12, seed=5)
ENV = {
    "SEINE_CONNECT_TIMEOUT": "1",
    "SEINE_READ_TIMEOUT": "0.5",
    "SEINE_TOTAL_TIMEOUT": str(TOTAL_TIMEOUT),
    "SEINE_MAX_BODY_BYTES": str(CAP),
    # an unreachable host's robots.txt is retried 3 times: quickly, here
    "SEINE_ROBOTS_RETRY": "0.2",
}
_BR = decode._BROTLI is not None

#: trap name → (path, outcome of its fetch record, reason regex)
TRAPS: dict[str, tuple[str, str, str]] = {
    "ok": ("/ok", "fetched", r"$"),
    "slow-first-byte": ("/slow-first-byte", "fetched", r"$"),
    "never-answers": ("/never-answers", "error", r"timeout: first byte"),
    "trickle-headers": ("/trickle-headers", "error", r"timeout: first byte"),
    "hang-after-headers": ("/hang-after-headers", "error", r"timeout: read"),
    "slow-body": ("/slow-body", "error", r"timeout: total"),
    "partial-body": ("/partial-body", "error", r"payload: "),
    "reset": ("/reset", "error", r"connection: "),
    "reset-mid-body": ("/reset-mid-body", "error", r"(payload|connection): "),
    "broken-chunked": ("/broken-chunked", "error", r"(malformed response|payload): "),
    "chunked-no-end": ("/chunked-no-end", "error", r"payload: "),
    "malformed-header": ("/malformed-header", "error", r"malformed response: "),
    "malformed-status": ("/malformed-status", "error", r"malformed response: "),
    "http09": ("/http09", "error", r"malformed response: "),
    "conflicting-length": ("/conflicting-length", "error", r"malformed response: "),
    "oversize": ("/oversize", "fetched", rf"body over {CAP} bytes, truncated"),
    "endless": ("/endless", "fetched", rf"body over {CAP} bytes, truncated"),
    "bomb-gzip": ("/bomb/gzip", "fetched", rf"body over {CAP} bytes, truncated"),
    "bomb-deflate": ("/bomb/deflate", "fetched", rf"body over {CAP} bytes, truncated"),
    "bomb-members": ("/bomb/gzip-members", "fetched", rf"body over {CAP} bytes, truncated"),
    "bomb-empty-members": ("/bomb/empty-members", "error", r"content-encoding: .*members"),
    "bomb-br": (
        ("/bomb/br", "fetched", rf"body over {CAP} bytes, truncated")
        if _BR
        else ("/bomb/br", "error", r"content-encoding: unsupported content-encoding 'br'")
    ),
    "redirect-loop": ("/redirect/loop", "redirect", r"redirect to /redirect/loop$"),
    "redirect-chain": ("/redirect/chain/0", "redirect", r"redirect to /redirect/chain/1$"),
    "redirect-no-location": ("/redirect/no-location", "redirect", r"redirect without Location"),
    "redirect-ftp": ("/redirect/ftp", "redirect", r"redirect to ftp://"),
    "404": ("/status/404", "http-error", r"HTTP 404$"),
    "410": ("/status/410", "http-error", r"HTTP 410$"),
    "500": ("/status/500", "http-error", r"HTTP 500$"),
    "503": ("/status/503", "http-error", r"HTTP 503, Retry-After 120 s$"),
    "429": ("/status/429", "http-error", r"HTTP 429, Retry-After 30 s$"),
    "charset-lies": ("/charset/lies", "fetched", r"$"),
    "charset-meta-lies": ("/charset/meta-lies", "fetched", r"$"),
    "utf16-bom": ("/charset/utf16-bom", "fetched", r"$"),
    "no-charset": ("/charset/none", "fetched", r"$"),
    "pdf": ("/type/pdf", "not-html", r"content type application/pdf$"),
    "png": ("/type/png", "not-html", r"content type image/png$"),
    "json": ("/type/json", "not-html", r"content type application/json$"),
    "no-content-type": ("/no-content-type", "fetched", r"$"),
    "empty": ("/empty", "fetched", r"$"),
    "garbage": ("/garbage", "fetched", r"$"),
    "malformed-html": ("/html/malformed", "fetched", r"$"),
    "nested-forms": ("/html/nested-forms", "fetched", r"$"),
    "deep-nesting": ("/html/deep", "fetched", rf"body over {CAP} bytes, truncated"),
    "calendar": ("/calendar/2024/01", "fetched", r"$"),
    "session": ("/session/home", "fetched", r"$"),
}
#: Bodies the page store must hold byte for byte.
STORED_EXACTLY = {
    "charset-lies": hs.CHARSET_LIES_BODY,
    "charset-meta-lies": hs.META_LIES_BODY,
    "utf16-bom": hs.UTF16_BODY,
    "no-charset": hs.NO_CHARSET_BODY,
    "garbage": hs.GARBAGE_BODY,
    "malformed-html": hs.MALFORMED_HTML_BODY,
}


def trap_host(name: str) -> str:
    return f"{name}.hostile.test"


@pytest.fixture
def hostile(tmp_path: Path) -> Iterator[HostileProcess]:
    with start_hostile_process(tmp_path / "hostile", host=HOSTILE_IP) as process:
        yield process


@pytest.fixture
def demo_web(tmp_path: Path) -> Iterator[ServerProcess]:
    with start_server_process(SPEC, None, tmp_path / "web") as server:
        yield server


def demo_depth(web: DemoWeb) -> int:
    """The deepest allowed demo page, in links from the seeds (so --max-depth keeps it)."""
    depth: dict[tuple[str, str], int] = {}
    queue: deque[tuple[str, str]] = deque()
    for seed in web.seeds():
        parts = urlsplit(seed)
        key = (parts.hostname or "", parts.path or "/")
        depth[key] = 0
        queue.append(key)
    while queue:
        host, target = queue.popleft()
        if target.startswith(PRIVATE_PREFIX):
            continue
        for link in web.links_of(host, target):
            if link.target is None:
                continue
            nxt = (link.host or host, link.target)
            if nxt not in depth:
                depth[nxt] = depth[(host, target)] + 1
                queue.append(nxt)
    return max(d for (_, t), d in depth.items() if not t.startswith(PRIVATE_PREFIX))


def test_a_crawl_survives_the_hostile_web(
    broker: EmbeddedBroker, hostile: HostileProcess, demo_web: ServerProcess, tmp_path: Path
) -> None:
    web = demo_web.web
    assert demo_depth(web) <= MAX_DEPTH, "the demo web is deeper than the crawl's bound"
    resolve = dict(demo_web.resolve)
    seeds = list(demo_web.seeds)
    trap_urls: dict[str, str] = {}
    for name, (path, _, _) in TRAPS.items():
        assert path.split("?")[0] not in hs.LEAVES_LOOPBACK
        resolve[trap_host(name)] = f"{HOSTILE_IP}:{hostile.port}"
        trap_urls[name] = f"http://{trap_host(name)}:{hostile.port}{path}"
    # no server behind these: the connect times out, or is refused
    resolve[trap_host("blackhole")] = f"{HOSTILE_IP}:{hostile.blackhole_port}"
    resolve[trap_host("refused")] = f"{HOSTILE_IP}:{hostile.refused_port}"
    dead_hosts = {
        "blackhole": f"http://{trap_host('blackhole')}:{hostile.blackhole_port}/",
        "refused": f"http://{trap_host('refused')}:{hostile.refused_port}/",
    }
    seeds += [*trap_urls.values(), *dead_hosts.values()]

    run = run_crawl(
        broker,
        tmp_path / "data",
        seeds,
        partitions=2,
        resolve=resolve,
        extra_args=["--max-depth", str(MAX_DEPTH)],
        timeout=90.0,
        **ENV,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.seconds < 90

    check_stored(run.data_dir, web, trap_urls)

    # -- the crawl log: one fetch record per trap, with the promised outcome
    messages = read_to_end(broker.bootstrap, topology.topic_name(run.app_id, topology.CRAWL_LOG))
    records = [codec.decode("crawl_log", m.value()) for m in messages]
    by_url: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        by_url[record["url"]].append(record)
    check_trap_records(by_url, trap_urls)
    check_dead_hosts(by_url, dead_hosts)
    check_redirect_chain(by_url, hostile)
    check_infinite_traps(records)

    # -- nothing unexpected in dead-letters
    letters = read_to_end(broker.bootstrap, topology.topic_name(run.app_id, topology.DEAD_LETTERS))
    assert [codec.decode("dead_letter", m.value()) for m in letters] == []


def check_stored(data_dir: Path, web: DemoWeb, trap_urls: dict[str, str]) -> None:
    # -- the normal web is crawled as if the traps were not there
    expected = web.reachable_allowed()
    demo_hosts = {urlsplit(u).hostname for u in expected}
    with PageStore(data_dir / "pages", read_only=True) as store:
        stored = set(store.urls())
        assert {u for u in stored if urlsplit(u).hostname in demo_hosts} == expected
        for name, body in STORED_EXACTLY.items():
            capture = store.get(trap_urls[name])
            assert capture is not None, f"{name} not stored"
            assert capture.body == body, name
        # stored at the cap, marked truncated; the bombs are all zeros, so all but one
        # are revisit records of whichever came first (its record carries the flag)
        for name in ("oversize", "endless", "deep-nesting", "bomb-gzip", "bomb-members"):
            capture = store.get(trap_urls[name])
            assert capture is not None, name
            original = store.get(capture.revisit_of) if capture.revisit_of else capture
            assert original is not None and original.truncated, name
            assert len(capture.body) == CAP, (name, len(capture.body))


def check_trap_records(by_url: dict[str, list[dict[str, Any]]], trap_urls: dict[str, str]) -> None:
    """One fetch record per trap, with the promised outcome, within the timeout and cap."""
    problems = []
    for name, (_path, outcome, reason) in TRAPS.items():
        fetches = [r for r in by_url.get(trap_urls[name], []) if r["stage"] == "fetch"]
        if len(fetches) != 1:
            problems.append(f"{name}: {len(fetches)} fetch records {by_url.get(trap_urls[name])}")
            continue
        got = fetches[0]
        if got["outcome"] != outcome or not re.match(reason, got["reason"]):
            problems.append(f"{name}: {got['outcome']} {got['reason']!r}, want {outcome} {reason}")
        if got["elapsed_ms"] > (TOTAL_TIMEOUT + 1.0) * 1000:
            problems.append(f"{name}: took {got['elapsed_ms']:.0f} ms")
        if got["bytes"] > CAP:
            problems.append(f"{name}: {got['bytes']} bytes logged over the cap")
    assert not problems, "\n".join(problems)


def check_dead_hosts(by_url: dict[str, list[dict[str, Any]]], dead_hosts: dict[str, str]) -> None:
    # an unreachable host: robots.txt fails (retried), then its URLs are given up, logged
    for name, url in dead_hosts.items():
        robots = [r for r in by_url.get(url + "robots.txt", []) if r["stage"] == "fetch"]
        assert robots and all(r["outcome"] == "error" for r in robots), (name, robots)
        # A black hole never completes the handshake: the connect timer fires, or, when
        # the event loop was held up past both deadlines (a loaded machine), the
        # first-byte or total timer that covers the same wait. Never anything else.
        want: tuple[str, ...] = ("timeout: connect", "timeout: first byte", "timeout: total")
        if name == "refused":
            want = ("connect: ",)
        reasons = [r["reason"] for r in robots]
        assert all(reason.startswith(want) for reason in reasons), (name, reasons)
        assert [r["outcome"] for r in by_url[url]] == ["robots-unavailable"], by_url[url]


def check_redirect_chain(by_url: dict[str, list[dict[str, Any]]], hostile: HostileProcess) -> None:
    # a redirect chain: every hop went back through url-filter/url-seen, one depth level
    # deeper each time, so an endless chain ends at --max-depth, logged as filtered
    base = f"http://{trap_host('redirect-chain')}:{hostile.port}/redirect/chain/"
    hops = [
        [r["outcome"] for r in by_url.get(f"{base}{n}", []) if r["stage"] == "fetch"]
        for n in range(hs.CHAIN_END + 1)
    ]
    followed = [h for h in hops if h]
    assert followed == [["redirect"]] * (MAX_DEPTH + 1), hops
    cut = by_url.get(f"{base}{MAX_DEPTH + 1}", [])
    assert [r["outcome"] for r in cut] == ["filtered"] and "depth" in cut[0]["reason"], cut


def check_infinite_traps(records: list[dict[str, Any]]) -> None:
    # infinite traps stay bounded by --max-depth, and were really entered
    def fetched_urls(host: str) -> set[str]:
        return {
            r["url"]
            for r in records
            if r["stage"] == "fetch" and r["outcome"] == "fetched" and r["host"].startswith(host)
        }

    # the calendar's months differ only in their numbers: near-duplicates (same simhash)
    # of the first month fetched, so their links are not followed and the trap ends
    # before the depth bound would end it
    calendar = fetched_urls(trap_host("calendar"))
    assert 1 < len(calendar) <= 2 * MAX_DEPTH + 1, sorted(calendar)
    assert any(
        r["outcome"] == "near-duplicate"
        for r in records
        if r["url"].startswith(f"http://{trap_host('calendar')}")
    )
    # each session page links two URLs with fresh session ids: url-filter drops the ids,
    # so the trap is its two pages, each fetched once
    session = fetched_urls(trap_host("session"))
    assert {urlsplit(u).path for u in session} == {"/session/home", "/session/about"}, session
    assert len(session) == 2
