"""Crawl statistics: the tally of crawl-log records, per-second rates, merging the
snapshots of several workers, and the Prometheus text built from a snapshot."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from streams.core.bloom import BloomFilter
from streams.core.frontier import Frontier, Politeness
from streams.core.stats import (
    CrawlTally,
    RateHistory,
    busiest,
    consumer_lag,
    merge_series,
    merge_snapshots,
    reason_group,
    stage_breakdown,
    top_reasons,
)
from streams.ops.crawllog import parse_since, plan_replay
from streams.web.observe import SeineCollector


def record(url: str, outcome: str = "fetched", **kw: Any) -> dict[str, Any]:
    base = {
        "url": url,
        "host": url.split("/")[2],
        "stage": "fetch",
        "outcome": outcome,
        "status": 200,
        "reason": "",
        "bytes": 100,
        "elapsed_ms": 30.0,
        "depth": 0,
        "at": 1000.5,
    }
    base.update(kw)
    return base


def test_reason_groups_drop_the_instance() -> None:
    a = reason_group("connect timeout after 5.0s to http://a.test/x")
    b = reason_group("connect timeout after 5.0s to http://b.test/y")
    assert a == b == "connect timeout after to"
    assert reason_group("") == "(no reason)"
    assert reason_group("dns: no such host a.test") == "dns"


def test_the_tally_counts_why_pages_were_not_stored() -> None:
    tally = CrawlTally()
    tally.add(record("http://a.test/"))
    tally.add(record("http://a.test/d", "duplicate"))
    for host in ("a", "b", "c"):
        tally.add(record(f"http://{host}.test/x", "http-error", reason="HTTP 404"))
    tally.add(record("http://g.test/1", "host-budget", reason="host page budget of 700 spent"))
    tally.add(record("http://g.test/2", "host-budget", reason="host page budget of 900 spent"))
    tally.add(record("http://c.test/2031/01/", "filtered", reason="trap guard: calendar"))
    assert tally.reasons == {
        "http-error: HTTP": 3,
        "host-budget: host page budget of spent": 2,
        "filtered: trap guard: calendar": 1,
    }
    assert top_reasons(tally.reasons, limit=2) == (
        "3× http-error: HTTP; 2× host-budget: host page budget of spent"
    )


def test_reason_rows_are_bounded() -> None:
    tally = CrawlTally()
    for n in range(600):
        word = "".join(chr(97 + (n // 26**k) % 26) for k in range(3))  # letters: kept
        tally.add(record(f"http://x{n}.test/", "filtered", reason=f"rule {word}"))
    assert len(tally.reasons) <= 501 and tally.reasons["other"] > 0


def test_rate_history_counts_per_second_and_forgets_old_seconds() -> None:
    history = RateHistory(seconds=10)
    for t in (100.1, 100.9, 101.5, 105.0):
        history.add(t)
    series = history.series(now=106.2, seconds=7)
    assert series == [[99, 0], [100, 2], [101, 1], [102, 0], [103, 0], [104, 0], [105, 1]]
    history.add(500.0)
    for t in range(501, 600):
        history.add(float(t))
    assert min(history._counts) >= 599 - 10 - 60


def test_tally_folds_outcomes_statuses_errors_latency_and_bytes() -> None:
    tally = CrawlTally()
    tally.add(record("http://a.test/1"))
    tally.add(record("http://a.test/2", elapsed_ms=700.0))
    tally.add(record("http://b.test/3", "http-error", status=404, reason="HTTP 404"))
    tally.add(record("http://c.test/", "dns-error", status=0, reason="dns: no such host c.test"))
    tally.add(record("http://a.test/2", "duplicate", stage="content-dedup", status=0))
    assert tally.outcomes == {"fetched": 2, "http-error": 1, "dns-error": 1, "duplicate": 1}
    assert tally.statuses == {"200": 2, "404": 1, "dns-error": 1}
    assert tally.errors == {"http-error: HTTP": 1, "dns-error: dns": 1}
    assert tally.bytes == 400
    assert tally.latency.count == 4
    assert tally.latency.counts[tally.latency.buckets.index(0.05)] == 3
    assert tally.latency.counts[tally.latency.buckets.index(1.0)] == 1
    assert tally.duplicate_rate() == 0.5
    assert tally.hosts.most_common(1) == [("a.test", 2)]
    assert tally.pages.series(1002.0, 2) == [[1000, 2], [1001, 0]]


def test_merge_adds_workers_up() -> None:
    def snap(fetched: int, lag: int, second: int, hosts: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "at": 10.0 + fetched,
            "started_at": 1.0 * fetched,
            "outcomes": {"fetched": fetched, "duplicate": 1},
            "statuses": {"200": fetched},
            "errors": {},
            "lag": {"fetch": lag},
            "stage_events": {"fetch": 3},
            "stage_errors": {"parse": 1},
            "bytes": 10,
            "queued": 5,
            "in_flight": 1,
            "pages_stored": fetched,
            "dead_letters": 1,
            "page_store_bytes": 100,
            "bloom_bits": 1000,
            "bloom_bits_set": 100 * fetched,
            "bloom_items": 7,
            "latency": {"buckets": [0.1], "counts": [fetched, 1], "sum": 0.5},
            "pages_per_second": [[second, fetched], [second + 1, 1]],
            "hosts": hosts,
            "links": [{"code": f"c{fetched}", "url": "u", "clicks": fetched}],
        }

    merged = merge_snapshots(
        [
            snap(2, 4, 100, [{"host": "a", "queued": 3, "next_at": 5.0}]),
            snap(4, 1, 101, [{"host": "b", "queued": 9, "next_at": 1.0}]),
        ]
    )
    assert merged["workers"] == 2
    assert merged["outcomes"] == {"fetched": 6, "duplicate": 2}
    assert merged["lag"] == {"fetch": 5}
    assert merged["stage_errors"] == {"parse": 2}
    assert merged["queued"] == 10 and merged["pages_stored"] == 6
    assert merged["bloom_fill_ratio"] == 600 / 2000
    assert merged["pages_per_second"] == [[100, 2], [101, 5], [102, 1]]
    assert merged["latency"]["counts"][:2] == [6, 2]
    assert [h["host"] for h in merged["hosts"]] == ["b", "a"]
    assert [link["code"] for link in merged["links"]] == ["c4", "c2"]
    assert merged["duplicate_rate"] == 2 / 6
    assert merge_snapshots([]) == {"workers": 0}
    assert merge_series([[[1, 1]], [[1, 2], [3, 1]]]) == [[1, 3], [3, 1]]


def test_busiest_and_lag_helpers() -> None:
    hosts = [
        {"host": "x", "queued": 1, "next_at": 0.0},
        {"host": "y", "queued": 1, "next_at": None},
        {"host": "z", "queued": 2, "next_at": 9.0},
    ]
    assert [h["host"] for h in busiest(hosts, 2)] == ["z", "x"]
    assert consumer_lag(10, 4) == 6
    assert consumer_lag(None, 4) == 0
    assert consumer_lag(3, 7) == 0


def test_frontier_busiest_hosts_reports_queues_and_next_allowed() -> None:
    now = [1000.0]
    frontier = Frontier({}, {}, Politeness(delay=2.0), lambda host: 0, clock=lambda: now[0])
    for i in range(3):
        frontier.enqueue(f"http://big.test/{i}")
    frontier.enqueue("http://small.test/")
    rows = frontier.busiest_hosts(5)
    assert [(r["host"], r["queued"]) for r in rows] == [("big.test", 3), ("small.test", 1)]
    dispatches, _ = frontier.due(0)  # robots.txt of both hosts
    assert {d.host for d in dispatches} == {"big.test", "small.test"}
    by_host = {r["host"]: r for r in frontier.busiest_hosts(5)}
    assert by_host["big.test"]["busy"] and by_host["big.test"]["queued"] == 3
    frontier.complete("big.test", "robots", 404, "robots", 5.0, 1000.0)
    row = {r["host"]: r for r in frontier.busiest_hosts(5)}["big.test"]
    assert not row["busy"] and row["next_at"] == 1002.0
    assert frontier.busiest_hosts(1) == [frontier.busiest_hosts(5)[0]]


def test_bloom_bits_count_what_is_set() -> None:
    bloom = BloomFilter(1000, 0.01)
    assert bloom.bits()[0] == 0
    bloom.add_many([f"http://a.test/{i}" for i in range(500)])
    set_bits, total = bloom.bits()
    assert total == bloom.slice_params[0][2]
    assert 0.2 < set_bits / total < 0.5  # half capacity of a 1% filter: ~29% of bits


def test_prometheus_text_parses_and_carries_every_family() -> None:
    tally = CrawlTally()
    tally.add(record("http://a.test/1"))
    tally.add(record("http://a.test/2", "http-error", status=500, elapsed_ms=2000.0))
    snap = {
        **tally.snapshot(1002.0),
        "stage_events": {"fetch": 7},
        "stage_errors": {"parse": 2},
        "lag": {"fetch": 3},
        "queued": 11,
        "in_flight": 2,
        "bloom_fill_ratio": 0.25,
        "bloom_items": 9,
        "page_store_bytes": 12345,
        "pages_stored": 1,
    }

    class Stub:
        def snapshot(self) -> dict[str, Any]:
            return snap

    registry = CollectorRegistry(auto_describe=False)
    registry.register(SeineCollector(Stub()))  # type: ignore[arg-type]
    families = {
        f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())
    }
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in families.values()
        for s in f.samples
    }
    assert samples[("seine_pages_fetched_total", (("status", "200"),))] == 1
    assert samples[("seine_pages_fetched_total", (("status", "500"),))] == 1
    assert samples[("seine_fetched_bytes_total", ())] == 200
    assert families["seine_fetch_latency_seconds"].type == "histogram"
    assert samples[("seine_fetch_latency_seconds_bucket", (("le", "0.05"),))] == 1
    assert samples[("seine_fetch_latency_seconds_bucket", (("le", "+Inf"),))] == 2
    assert samples[("seine_fetch_latency_seconds_count", ())] == 2
    assert samples[("seine_stage_events_total", (("stage", "fetch"),))] == 7
    assert samples[("seine_stage_errors_total", (("stage", "parse"),))] == 2
    assert samples[("seine_consumer_lag", (("stage", "fetch"),))] == 3
    assert samples[("seine_frontier_queued", ())] == 11
    assert samples[("seine_urlseen_bloom_fill_ratio", ())] == 0.25
    assert samples[("seine_page_store_bytes", ())] == 12345


def test_parse_since_forms() -> None:
    assert parse_since("1700000000") == 1700000000.0
    assert parse_since("15m", now=10_000.0) == 10_000.0 - 900
    assert parse_since("2h", now=10_000.0) == 10_000.0 - 7200
    assert parse_since("2023-11-14T22:13:20Z") == 1700000000.0
    assert parse_since("2023-11-14T22:13:20") == 1700000000.0
    try:
        parse_since("yesterday-ish")
    except ValueError as exc:
        assert "--since" in str(exc)
    else:
        raise AssertionError("no error")


def test_plan_replay_takes_each_url_once_and_honours_min_age() -> None:
    records = [
        record("http://a.test/1", at=100.0),
        record("http://a.test/1", at=200.0, depth=2),
        record("http://a.test/2", at=950.0),
        record("http://a.test/3", "http-error", status=404, at=100.0),
        record("http://a.test/robots.txt", "robots", at=100.0),
        record("http://a.test/4", "duplicate", stage="content-dedup", at=100.0),
    ]
    stream = ((0, i, r) for i, r in enumerate(records))
    plan = plan_replay(stream, min_age=100.0, now=1000.0)
    assert list(plan.urls) == ["http://a.test/1"]
    assert plan.urls["http://a.test/1"]["depth"] == 2
    assert plan.too_recent == 1
    stream = ((0, i, r) for i, r in enumerate(records))
    everything = plan_replay(stream, outcomes=("fetched", "http-error"), now=1000.0)
    assert sorted(everything.urls) == ["http://a.test/1", "http://a.test/2", "http://a.test/3"]
    stream = ((0, i, r) for i, r in enumerate(records))
    early = plan_replay(stream, until=150.0, now=1000.0)
    assert list(early.urls) == ["http://a.test/1"]
    assert early.urls["http://a.test/1"]["at"] == 100.0


def test_stage_breakdown_names_each_stage_share_and_the_rest() -> None:
    line = stage_breakdown(
        {"parse": 3.0, "url-seen": 1.0},
        {"parse": 1000, "url-seen": 20000},
        {"parse": 50, "url-seen": 80},
        worker_cpu_s=10.0,
        elapsed_s=10.0,
    )
    parse, seen, other = line.split("; ")
    assert parse.startswith("parse 30.0% (3.0 s, 100 items/s in 50 msgs, 3000 µs/item)")
    assert seen.startswith("url-seen 10.0% (1.0 s, 2000 items/s in 80 msgs, 50 µs/item)")
    assert other == "other 60.0% (6.0 s)"
