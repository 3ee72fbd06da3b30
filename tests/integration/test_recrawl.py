"""Freshness in a running crawl: revisits on schedule, conditional GETs, 304s; re-feeds.

The loopback server's own log shows what the crawler sent. /changing serves a new
version on every visit; /static answers a conditional GET with 304. With
``seine crawl --recrawl`` and intervals of a second or two, the changed page gets
new captures in the page store, the 304 one keeps its single capture and is
logged as "unchanged", and the revisits carry If-None-Match / If-Modified-Since.

Without --recrawl nothing is revisited, but a URL re-fed to the frontier topic
(`streams.stages.recrawl.send_refeed`, the entry point for ``seine replay``) is
fetched again although url-seen has seen it.
"""

from __future__ import annotations

import itertools
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import topology
from streams import codec
from streams.kafka.broker import EmbeddedBroker
from streams.stages.recrawl import send_refeed
from streams.store.pagestore import PageStore
from tests.integration.conftest import REPO, crawl_env, read_topic
from tests.integration.loopback import Response, page, serve

H = "http://fresh.test"
LAST_MODIFIED = "Mon, 01 Jan 2024 00:00:00 GMT"


def routes() -> dict:
    versions = itertools.count(1)

    def changing(_headers: dict[str, str]) -> Response:
        n = next(versions)
        body = f"<html><title>news</title><body>edition number {n}</body></html>"
        return 200, {"Content-Type": "text/html", "ETag": f'"c{n}"'}, body.encode()

    def static(headers: dict[str, str]) -> Response:
        validators = {"ETag": '"s1"', "Last-Modified": LAST_MODIFIED}
        if headers.get("if-none-match") == '"s1"':
            return 304, validators, b""
        body = b"<html><title>static</title><body>the same forever</body></html>"
        return 200, {"Content-Type": "text/html", **validators}, body

    return {
        ("fresh.test", "/"): page(
            '<html><body><a href="/changing">c</a> <a href="/static">s</a></body></html>',
            ETag='"home"',
        ),
        ("fresh.test", "/changing"): changing,
        ("fresh.test", "/static"): static,
    }


@contextmanager
def crawl_running(
    broker: EmbeddedBroker, data: Path, seeds: list[str], resolve: dict[str, str], *extra: str
) -> Iterator[str]:
    """`seine crawl` in the background on the session broker; yields its app id."""
    app_id = f"t{uuid.uuid4().hex[:10]}"
    args = [
        sys.executable, "-m", "streams.cli", "crawl", *seeds,
        "--bootstrap", broker.bootstrap, "--data-dir", str(data),
        "--partitions", "2", "--allow-private", "--keep-running", *extra,
    ]  # fmt: skip
    for host, addr in resolve.items():
        args += ["--resolve", f"{host}={addr}"]
    log = open(data.parent / f"{app_id}.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(
        args, env=crawl_env(app_id), cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield app_id
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


def wait_for(what: str, check: Callable[[], bool], deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"not within {deadline_s:g} s: {what}")


def captures(data: Path, url: str) -> int:
    try:
        with PageStore(data / "pages", read_only=True) as store:
            return len(store.captures(url))
    except OSError:
        return 0  # not created yet


@pytest.mark.timeout(240)
def test_recrawl_revisits_with_conditional_gets(broker: EmbeddedBroker, tmp_path: Path) -> None:
    data = tmp_path / "data"
    with serve(routes()) as web, crawl_running(
        broker, data, [f"{H}/"], web.resolve("fresh.test"),
        "--recrawl", "--revisit-initial", "1", "--revisit-min", "0.5", "--revisit-max", "2",
    ) as app_id:  # fmt: skip
        wait_for(
            "/changing captured three times, /static answered 304 twice",
            lambda: (
                captures(data, f"{H}/changing") >= 3
                and sum(r.status == 304 for r in web.requests("fresh.test", "/static")) >= 2
            ),
            150,
        )
        static_captures = captures(data, f"{H}/static")
        requests = web.requests("fresh.test")

    assert static_captures == 1  # the 304s stored nothing
    static = [r for r in requests if r.path == "/static"]
    assert static[0].status == 200 and "if-none-match" not in static[0].headers
    for r in static[1:]:  # every revisit was conditional, with both validators
        assert r.headers.get("if-none-match") == '"s1"', r.headers
        assert r.headers.get("if-modified-since") == LAST_MODIFIED
        assert r.status == 304
    changing = [r for r in requests if r.path == "/changing"]
    assert len(changing) >= 3
    # each revisit asked with the ETag of the version it had seen last
    for before, after in itertools.pairwise(changing[:3]):
        assert after.headers.get("if-none-match") is not None
        assert after.at > before.at
    assert changing[1].headers["if-none-match"] == '"c1"'

    topic = topology.topic_name(app_id, topology.CRAWL_LOG)
    records = [
        codec.decode("crawl_log", m.value())
        for m in read_topic(broker.bootstrap, topic, 10**6, 5.0)
    ]
    unchanged = [r for r in records if r["url"] == f"{H}/static" and r["outcome"] == "unchanged"]
    assert len(unchanged) >= 2 and all(r["status"] == 304 for r in unchanged)
    assert not [r for r in records if r["url"] == f"{H}/changing" and r["outcome"] == "unchanged"]


@pytest.mark.timeout(180)
def test_refed_url_is_fetched_again(broker: EmbeddedBroker, tmp_path: Path) -> None:
    data = tmp_path / "data"
    with serve(routes()) as web, crawl_running(
        broker, data, [f"{H}/static"], web.resolve("fresh.test")
    ) as app_id:  # fmt: skip
        wait_for("/static stored", lambda: captures(data, f"{H}/static") == 1, 90)
        assert len(web.requests("fresh.test", "/static")) == 1
        # seen by url-seen, not due for a day: re-fed "now" it is fetched again, conditionally
        assert send_refeed(broker.bootstrap, app_id, [f"{H}/static"]) == 1
        wait_for(
            "/static fetched again",
            lambda: len(web.requests("fresh.test", "/static")) >= 2,
            60,
        )
        again = web.requests("fresh.test", "/static")[1]
    assert again.headers.get("if-none-match") == '"s1"' and again.status == 304
    assert captures(data, f"{H}/static") == 1
