"""The whole pipeline on the real embedded broker against the demo web on loopback.

The same test runs with 1 and with 4 partitions. It reads the truth from two
independent places: the demo server's own request log (what was asked of the
web) and the page store (what was kept).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from streams.demo.server import read_request_log, start_server_process
from streams.demo.webgen import DemoWeb, WebSpec
from streams.kafka.broker import EmbeddedBroker
from streams.ops.multiworker import STATUS_FILE, read_status, worker_dir
from streams.ops.resume import url_states
from streams.store.storeset import open_stores
from tests.integration.conftest import CrawlRun, crawl_env, run_crawl, run_seine

SPEC = WebSpec(hosts=30, pages_per_host=30, seed=7)


@pytest.fixture
def demo_web(tmp_path: Path):
    """A fresh server per test: stopping it flushes its request log, so the test reads
    a complete log without waiting on a timer."""
    server = start_server_process(SPEC, tmp_path / "requests.jsonl", tmp_path / "web")
    yield server
    server.stop()


@pytest.mark.parametrize(
    ("partitions", "workers"), [(1, 1), (4, 1), (4, 2)], ids=["1p", "4p", "4p-2workers"]
)
def test_crawl_of_the_demo_web(
    broker: EmbeddedBroker, demo_web, tmp_path: Path, partitions: int, workers: int
) -> None:
    web = demo_web.web
    run = run_crawl(
        broker,
        tmp_path / "data",
        demo_web.seeds,
        partitions=partitions,
        resolve=demo_web.resolve,
        extra_args=["--workers", str(workers)],
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "pages stored" in run.stdout
    # every body parse kept was found by link-extract (no rebalance mid-crawl here)
    assert " 0 hand-off misses" in run.stdout, run.stdout[-2000:]
    if workers > 1:
        # fetches started at their dispatch and completions applied at the fetch's end,
        # in each worker, without their messages (the checks below: nothing lost)
        statuses = [read_status(worker_dir(run.data_dir, i) / STATUS_FILE) for i in range(workers)]
        for status in statuses:
            assert status is not None
            assert status["fetches_started_at_dispatch"] > 0, status
            assert status["completions_at_fetch_end"] > 0, status

    expected = web.reachable_allowed()
    stored = check_stores(run.data_dir, web, expected)
    check_url_registry(run.data_dir, web, stored)
    check_server_log(demo_web, web, expected)
    check_seine_get(run, web, expected)


def check_stores(data_dir: Path, web: DemoWeb, expected: set[str]) -> set[str]:
    """The page stores hold every expected page once, duplicates as revisits; the URLs."""
    with open_stores(data_dir) as store:
        stored = set(store.urls())
        # every reachable, allowed page is stored, and nothing else
        assert stored == expected, (
            f"missing {sorted(expected - stored)[:5]}, extra {sorted(stored - expected)[:5]}"
        )
        # ... exactly once
        multi = [u for u in stored if sum(len(s.captures(u)) for s in store.stores) != 1]
        assert not multi, multi[:5]
        # duplicates: one full copy per group, the rest revisit records
        for group in web.duplicate_groups():
            in_crawl = sorted(group & stored)
            if len(in_crawl) < 2:
                continue
            captures = [store.get(u) for u in in_crawl]
            originals = [c for c in captures if c is not None and c.revisit_of is None]
            assert len(originals) == 1, (in_crawl, [c and c.revisit_of for c in captures])
            assert len({c.body for c in captures if c is not None}) == 1
    return stored


def check_url_registry(data_dir: Path, web: DemoWeb, stored: set[str]) -> None:
    # The URL registry says what happened to every URL: each stored page was fetched,
    # each disallowed one refused with the reason, none is left queued or in flight.
    states = url_states(data_dir)
    assert stored <= set(states)
    for url in stored:
        state = states[url]
        assert state is not None and (state["s"], state["status"]) == ("fetched", 200), (url, state)
    # (a disallowed URL linked only from a near-duplicate is never met: its links are
    # not extracted, and which copy comes first depends on timing)
    disallowed = web.disallowed_linked() & set(states)
    assert disallowed
    for url in disallowed:
        state = states[url]
        assert state is not None and (state["s"], state["outcome"], state["reason"]) == (
            "refused",
            "robots-disallowed",
            "disallowed by robots.txt",
        ), (url, state)
    unsettled = {u: s for u, s in states.items() if s is None or s["s"] in ("queued", "fetching")}
    assert not unsettled, list(unsettled.items())[:5]


def check_server_log(demo_web: Any, web: DemoWeb, expected: set[str]) -> None:
    # The server's own log: nothing disallowed, nothing twice, one in flight per host.
    assert demo_web.stop() == 0
    requests = read_request_log(demo_web.log_path)
    page_requests = [r for r in requests if r["path"] != "/robots.txt"]
    assert len(page_requests) == len(expected)
    seen: set[tuple[str, str]] = set()
    for r in page_requests:
        key = (r["host"], r["path"])
        assert key not in seen, f"requested twice: {key}"
        seen.add(key)
    disallowed_paths = {(urlsplit(u).hostname, urlsplit(u).path) for u in web.disallowed_linked()}
    assert not (seen & {(h, p) for h, p in disallowed_paths}), "a disallowed path was requested"
    by_host: dict[str, list[dict]] = defaultdict(list)
    for r in requests:
        by_host[r["host"]].append(r)
    for host, rs in by_host.items():
        rs.sort(key=lambda r: r["start"])
        for before, after in itertools.pairwise(rs):
            assert after["start"] >= before["end"], f"two requests in flight to {host}"
        robots = [r for r in rs if r["path"] == "/robots.txt"]
        assert len(robots) == 1, f"robots.txt of {host} fetched {len(robots)} times"
        assert rs[0]["path"] == "/robots.txt", f"{host}: a page was fetched before robots.txt"


def check_seine_get(run: CrawlRun, web: DemoWeb, expected: set[str]) -> None:
    # `seine get` returns the bytes the server sent
    sample = sorted(expected)[:: max(1, len(expected) // 5)]
    for url in sample:
        parts = urlsplit(url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        served = web.page(parts.hostname or "", target)
        assert served is not None
        _status, _headers, body = served
        got = run_seine(["get", url, "--data-dir", str(run.data_dir)], env=crawl_env(run.app_id))
        assert got.returncode == 0, got.stderr
        assert got.stdout.encode("utf-8") == body
    missing = run_seine(
        ["get", "http://nowhere.invalid/", "--data-dir", str(run.data_dir)],
        env=crawl_env(run.app_id),
    )
    assert missing.returncode == 1 and "not stored" in missing.stderr
