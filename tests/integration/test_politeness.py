"""Politeness, judged by what the web saw: the demo server's own request log.

One demo web, some of whose hosts misbehave (streams.demo.server.Quirks): one
answers every fourth page request 429 with Retry-After: 2, one asks for a
Crawl-delay far above the cap, one answers slowly. The crawl runs with a 0.2 s
delay, with one worker and with two worker processes; the log must show, per
host, no two requests at once and none closer than what the politeness clock
allows — and the crawl log must say why a host was kept waiting.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from streams.demo.server import Quirks, ServerProcess, read_request_log, start_server_process
from streams.demo.webgen import PRIVATE_PREFIX, DemoWeb, WebSpec
from streams.kafka.broker import EmbeddedBroker
from streams.store.storeset import open_stores
from tests.integration.conftest import read_crawl_log, run_crawl

SPEC = WebSpec(hosts=6, pages_per_host=12, seed=11, disallowed_fraction=0.2)
DELAY = 0.2
RETRY_AFTER = 2.0
#: Crawl-delay the slow-robots host asks for, and the cap the crawl puts on it.
CRAWL_DELAY, CRAWL_DELAY_CAP = 30.0, 0.6
HOST_LATENCY, RESPONSE_FACTOR = 0.1, 4.0
#: Timestamps come from two clocks (the server's and the crawler's time.time plus a
#: monotonic elapsed time): a millisecond of slack for rounding, far below any bound.
SLACK = 0.001
#: The k x response-time bound reads the server's own end of the previous response:
#: a server descheduled between its write and noting the end lengthens `took` and
#: shortens the gap alike, k times over (a loaded CI run missed it by 4.6 ms). The
#: bound still sits far above DELAY.
RESPONSE_SLACK = 0.02


@pytest.fixture
def quirky_web(tmp_path: Path):
    hosts = DemoWeb(SPEC).hosts
    quirks = Quirks(
        throttle={hosts[0]: (4, RETRY_AFTER)},
        crawl_delay={hosts[1]: CRAWL_DELAY},
        latency={hosts[2]: HOST_LATENCY},
    )
    server = start_server_process(
        SPEC, tmp_path / "requests.jsonl", tmp_path / "web", extra_args=quirks.to_args()
    )
    server.quirks = quirks  # type: ignore[attr-defined]
    yield server
    server.stop()


@pytest.mark.parametrize("workers", [1, 2], ids=["1worker", "2workers"])
def test_the_server_log_shows_a_polite_crawl(
    broker: EmbeddedBroker, quirky_web: ServerProcess, tmp_path: Path, workers: int
) -> None:
    quirks: Quirks = quirky_web.quirks  # type: ignore[attr-defined]
    (throttled,) = quirks.throttle
    (slow_robots,) = quirks.crawl_delay
    (slow_host,) = quirks.latency
    web = quirky_web.web
    run = run_crawl(
        broker,
        tmp_path / "data",
        quirky_web.seeds,
        partitions=4,
        resolve=quirky_web.resolve,
        extra_args=[
            "--workers",
            str(workers),
            "--delay",
            str(DELAY),
            "--max-crawl-delay",
            str(CRAWL_DELAY_CAP),
            "--response-time-factor",
            str(RESPONSE_FACTOR),
        ],
        timeout=180.0,
        # Two workers on a loaded 2-core machine: a longer session timeout, so that a
        # late heartbeat does not rebalance the group in the middle of the crawl.
        **({"SEINE_SESSION_TIMEOUT": "12"} if workers > 1 else {}),
    )
    assert run.returncode == 0, run.stderr[-3000:]

    # Throttling delays pages, it loses none: the 429'd pages were asked again later.
    expected = web.reachable_allowed()
    with open_stores(run.data_dir) as store:
        assert set(store.urls()) == expected

    assert quirky_web.stop() == 0
    assert quirky_web.log_path is not None
    requests = read_request_log(quirky_web.log_path)
    by_host: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in requests:
        by_host[r["host"]].append(r)
    assert set(by_host) == set(web.hosts)

    # Disallowed paths are linked, and never requested.
    assert web.disallowed_linked(), "the web should link some disallowed pages"
    assert not [r for r in requests if r["path"].startswith(PRIVATE_PREFIX)]

    throttled_seen = 0
    for host, rs in by_host.items():
        rs.sort(key=lambda r: r["start"])
        assert rs[0]["path"] == "/robots.txt", f"{host}: a page before robots.txt"
        for before, after in itertools.pairwise(rs):
            gap = after["start"] - before["end"]
            # never two at once, never closer than the configured delay
            assert gap >= DELAY - SLACK, f"{host}: {gap:.3f} s between {before} and {after}"
            if host == slow_robots:
                assert gap >= CRAWL_DELAY_CAP - SLACK, f"{host}: Crawl-delay (capped) not kept"
                assert gap < CRAWL_DELAY, "the Crawl-delay cap was not applied"
            if host == slow_host:
                took = before["end"] - before["start"]
                assert took >= HOST_LATENCY - SLACK
                assert gap >= RESPONSE_FACTOR * took - RESPONSE_SLACK, f"{host}: k × response time"
            if before["status"] == 429:
                throttled_seen += 1
                assert gap >= RETRY_AFTER - SLACK, f"{host}: asked again {gap:.3f} s after 429"
    assert throttled_seen >= 2, "the throttled host never answered 429 twice"

    # The crawl log says why the throttled host was kept waiting.
    records = read_crawl_log(broker.bootstrap, run.app_id)
    backoffs = [r for r in records if r["outcome"] == "backoff"]
    assert backoffs and {urlsplit(r["url"]).hostname for r in backoffs} == {throttled}
    assert all(f"Retry-After {RETRY_AFTER:g} s" in r["reason"] for r in backoffs)
    assert len(backoffs) == throttled_seen
    fetched_429 = [r for r in records if r["stage"] == "fetch" and r["status"] == 429]
    assert {urlsplit(r["url"]).hostname for r in fetched_429} == {throttled}
    assert len(fetched_429) == throttled_seen
    disallowed = {r["url"] for r in records if r["outcome"] == "robots-disallowed"}
    assert disallowed and all(PRIVATE_PREFIX in u for u in disallowed)
