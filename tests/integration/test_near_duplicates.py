"""Near-duplicates in a real crawl: the same article on three hosts, differing only in its
date and view counter, is stored three times but link-extracted once.

Each copy links to a page only it links to, so the server's request log shows which
copies had their links extracted: exactly one with the default settings. Real broker,
real worker, real HTTP server on loopback, real page store.
"""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from streams.kafka.broker import EmbeddedBroker
from streams.store.storeset import open_stores
from tests.integration.conftest import run_crawl

COPIES = ("news-a.test", "news-b.test", "news-c.test")
HUB = "hub.test"


def _words(seed: int, n: int) -> str:
    rng = random.Random(seed)
    return " ".join("".join(rng.choices("bcdfgklmnprstvz", k=rng.randint(3, 8))) for _ in range(n))


ARTICLE = _words(1, 700)


def _page(title: str, text: str, links: list[str]) -> bytes:
    anchors = " ".join(f'<a href="{href}">more</a>' for href in links)
    return (
        f"<!DOCTYPE html><html><head><title>{title}</title></head>"
        f"<body><h1>{title}</h1><p>{text}</p><p>{anchors}</p></body></html>"
    ).encode()


def _site(host: str) -> dict[str, bytes]:
    if host == HUB:
        return {"/": _page("Hub", _words(2, 300), [f"http://{h}/story" for h in COPIES])}
    n = COPIES.index(host)
    return {
        # Same article, another date and counter: near-duplicates, not exact ones.
        "/story": _page(
            "Story",
            f"Published 2025-06-0{n + 1} 10:0{n}. {ARTICLE} Read 1,{n}17 times.",
            ["/only-here"],
        ),
        "/only-here": _page(f"Only {host}", _words(10 + n, 300), []),
    }


class _Handler(BaseHTTPRequestHandler):
    requests: list[tuple[str, str]]
    lock: threading.Lock

    def do_GET(self) -> None:
        host = (self.headers.get("Host") or "").split(":")[0]
        with self.lock:
            self.requests.append((host, self.path))
        body = _site(host).get(self.path) if host in (HUB, *COPIES) else None
        if body is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def web() -> Iterator[tuple[int, list[tuple[str, str]]]]:
    requests: list[tuple[str, str]] = []
    handler = type("H", (_Handler,), {"requests": requests, "lock": threading.Lock()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], requests
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("extract", [False, True], ids=["default", "extract-links"])
def test_near_duplicates_across_hosts(
    broker: EmbeddedBroker, tmp_path: Path, web: tuple[int, list[tuple[str, str]]], extract: bool
) -> None:
    port, requests = web
    resolve = {h: f"127.0.0.1:{port}" for h in (HUB, *COPIES)}
    env = {"SEINE_NEAR_DUP_EXTRACT_LINKS": "true"} if extract else {}
    # mypy matches **dict[str, str] to every keyword, not only to **env_extra
    run = run_crawl(
        broker,
        tmp_path / "data",
        [f"http://{HUB}/"],
        partitions=4,
        resolve=resolve,
        **env,  # type: ignore[arg-type]
    )
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    summary = re.search(r"(\d+) duplicates, (\d+) near-duplicates", run.stdout)
    assert summary is not None, run.stdout
    assert summary.groups() == ("0", "2"), run.stdout

    with open_stores(run.data_dir) as stores:
        captures = {h: stores.get(f"http://{h}/story") for h in COPIES}
        assert all(c is not None for c in captures.values())
        firsts = [h for h, c in captures.items() if c and c.near_duplicate_of is None]
        assert len(firsts) == 1, captures
        original = f"http://{firsts[0]}/story"
        for host, capture in captures.items():
            assert capture is not None
            assert capture.body == _site(host)["/story"]  # each stored whole
            if host != firsts[0]:
                assert capture.near_duplicate_of == original

    canaries = {h for h, path in requests if path == "/only-here"}
    if extract:
        assert canaries == set(COPIES)  # near_dup_extract_links: every copy's links
    else:
        assert canaries == {firsts[0]}  # only the first copy's links were extracted
    # Every page was fetched once, however its copies were judged.
    pages = [(h, p) for h, p in requests if p != "/robots.txt"]
    assert len(pages) == len(set(pages))
