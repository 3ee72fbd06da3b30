"""Near-duplicate detection across partitions: the content-dedup stage's band chain.

The stage function runs for real over dict tables, one dict per partition (as Faust
keeps one RocksDB per table partition), with the messages it emits delivered in a
random interleaving across partitions: whatever the order, no two pages that both come
out as first copies are within the distance, exact duplicates still meet, and a page
with only a date or counter changed is found on another host.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

import topology
from streams.core.partitioning import partition_for
from streams.core.records import ParsedPage
from streams.core.simhash import band_step, bands, hamming, simhash, to_signed, to_unsigned
from streams.settings import Settings
from streams.stages import dedup


@dataclass
class FakeCtx:
    """The two partition functions and the settings the stage reads."""

    settings: Settings

    def fingerprint_partition(self, key: str) -> int:
        return partition_for(key, self.settings.kafka.partitions)

    def url_partition(self, url: str) -> int:
        return partition_for(url.split("/")[2], self.settings.kafka.partitions)


@dataclass
class FakeOutbox:
    items: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)
    logs: list[dict[str, Any]] = field(default_factory=list)

    def add(self, spec: Any, partition: int, item: dict[str, Any]) -> None:
        self.items.append((spec.name, partition, item))

    def log(self, record: dict[str, Any]) -> None:
        self.logs.append(record)


class PartitionedTable(dict[str, Any]):
    """A table of one partition; the test routes each message to its partition's tables."""


def parsed(url: str, text: str, fingerprint: str | None = None) -> dict[str, Any]:
    sh = simhash(text)
    return {
        "page": {
            "url": url,
            "status": 200,
            "headers": [],
            "body": text.encode(),
            "fetched_at": 1.0,
            "ip": None,
            "depth": 1,
            "truncated": False,
        },
        "fingerprint": fingerprint or f"fp-{hash(text) & 0xFFFFFFFF:x}",
        "title": "",
        "links": ["/next"],
        "base": None,
        "nofollow": False,
        "noindex": False,
        "duplicate_of": None,
        "simhash": to_signed(sh),
        "band": 0,
        "near_duplicate_of": None,
    }


def run_pipeline(
    pages: list[dict[str, Any]], settings: Settings, seed: int
) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]], int]:
    """Deliver every content-dedup message in a random order; return link-extract items by
    URL, the crawl-log records, and how many content-dedup messages were handled."""
    ctx = FakeCtx(settings)
    rng = random.Random(seed)
    fingerprints: dict[int, PartitionedTable] = defaultdict(PartitionedTable)
    band_tables: dict[int, PartitionedTable] = defaultdict(PartitionedTable)
    queue: list[tuple[int, dict[str, Any]]] = [
        (dedup.dedup_partition(ctx, p["fingerprint"], p["simhash"], 0), p)  # type: ignore[arg-type]
        for p in pages
    ]
    out_items: dict[str, dict[str, Any]] = {}
    logs: list[dict[str, Any]] = []
    handled = 0
    while queue:
        partition, item = queue.pop(rng.randrange(len(queue)))
        out = FakeOutbox()
        handled += 1
        dedup.handle(
            ctx,  # type: ignore[arg-type]
            {"pages": [cast(ParsedPage, item)]},
            fingerprints[partition],
            out,  # type: ignore[arg-type]
            band_tables[partition],
        )
        logs += out.logs
        for topic, p, produced in out.items:
            if topic == topology.CONTENT_DEDUP.name:
                queue.append((p, produced))
            else:
                assert topic == topology.LINK_EXTRACT.name
                assert produced["page"]["url"] not in out_items
                out_items[produced["page"]["url"]] = produced
    return out_items, logs, handled


# Letters only: digits are masked by the simhash (every number is "0").
WORDS = sorted({"".join(random.Random(i).choices("bcdfgklmnprstvz", k=6)) for i in range(5000)})


def article(rng: random.Random, n: int = 400) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def mutate(text: str, rng: random.Random, edits: int) -> str:
    words = text.split()
    for _ in range(edits):
        words[rng.randrange(len(words))] = rng.choice(WORDS)
    return " ".join(words)


def test_band_step_files_then_finds() -> None:
    table: dict[str, Any] = {}
    a = 0x0123_4567_89AB_CDEF
    b = a ^ 0b1011  # distance 3
    step = band_step(table.get("k"), "http://a/", a, 0)
    assert step.near is None and step.next_band == 1 and step.bucket == [(a, "http://a/")]
    table["k"] = step.bucket
    assert band_step(table["k"], "http://b/", b, 2).near == ("http://a/", 3)
    assert band_step(table["k"], "http://a/", a, 3).near is None  # a recrawl of itself
    assert band_step(table["k"], "http://c/", a ^ 0b1111, 3).near is None  # distance 4
    assert band_step(None, "http://c/", a, 3).next_band is None  # the last band


@pytest.mark.parametrize("seed", range(6))
def test_no_two_first_copies_within_distance_whatever_the_order(seed: int) -> None:
    rng = random.Random(seed)
    settings = Settings.of(partitions=5)
    pages = []
    for cluster in range(12):
        base = article(rng)
        for copy in range(rng.randint(1, 4)):
            text = base if copy == 0 else mutate(base, rng, rng.randint(1, 3))
            pages.append(parsed(f"http://host{cluster}-{copy}.example/p", text))
    for i in range(15):
        pages.append(parsed(f"http://solo{i}.example/", article(rng)))
    out, logs, handled = run_pipeline(pages, settings, seed)
    assert set(out) == {p["page"]["url"] for p in pages}  # every page comes out once
    firsts = {u: to_unsigned(i["simhash"]) for u, i in out.items() if not i["near_duplicate_of"]}
    urls = sorted(firsts)
    for i, u in enumerate(urls):
        for v in urls[i + 1 :]:
            assert hamming(firsts[u], firsts[v]) > 3, (u, v)
    for url, item in out.items():
        near = item["near_duplicate_of"]
        if near:
            got = to_unsigned(item["simhash"])
            assert near["distance"] == hamming(got, to_unsigned(out[near["url"]]["simhash"]))
            assert near["distance"] <= 3 and near["url"] != url
    near_logs = [r for r in logs if r["outcome"] == "near-duplicate"]
    assert len(near_logs) == sum(1 for i in out.values() if i["near_duplicate_of"])
    assert near_logs and all("(distance " in r["reason"] for r in near_logs)
    # A first copy visits its 4 band partitions; a near-duplicate stops at the band
    # that found it: at most 4 messages per page, never one per page *and* band more.
    assert handled <= 4 * len(pages)


def test_date_or_counter_change_on_another_host_is_a_near_duplicate() -> None:
    rng = random.Random(7)
    body = article(rng, 600)
    texts = {
        "http://a.example/news": f"Published 2025-06-01. {body} 1,234 views",
        "http://b.example/mirror": f"Published 2025-06-02. {body} 1,301 views",
        "http://c.example/copy": f"Published 2026-01-17. {body} 5,678 views",
        "http://d.example/other": article(rng, 600),
    }
    pages = [parsed(u, t) for u, t in texts.items()]
    out, _logs, _ = run_pipeline(pages, Settings.of(partitions=4), 1)
    near = {u: i["near_duplicate_of"] for u, i in out.items() if i["near_duplicate_of"]}
    assert set(near) | {u for u, i in out.items() if not i["near_duplicate_of"]} == set(texts)
    assert len(near) == 2 and "http://d.example/other" not in near
    assert all(n["distance"] == 0 for n in near.values())  # numbers are masked


def test_exact_duplicates_still_meet_and_skip_the_bands() -> None:
    rng = random.Random(3)
    text = article(rng)
    pages = [parsed(f"http://h{i}.example/", text, fingerprint="same") for i in range(3)]
    out, logs, handled = run_pipeline(pages, Settings.of(partitions=4), 2)
    dups = [u for u, i in out.items() if i["duplicate_of"]]
    assert len(dups) == 2 and all(out[u]["page"]["body"] == b"" for u in dups)
    assert [r["outcome"] for r in logs] == ["duplicate", "duplicate"]
    # The first copy hops once per other partition its bands live in; duplicates stop.
    first = pages[0]["simhash"]
    route = dedup.band_route(FakeCtx(Settings.of(partitions=4)), first, 3)  # type: ignore[arg-type]
    assert handled == 3 + len({partition for _, _, partition in route}) - 1


@pytest.mark.parametrize("partitions", [1, 2, 4, 16])
def test_a_first_copy_hops_once_per_partition_not_once_per_band(partitions: int) -> None:
    rng = random.Random(partitions)
    settings = Settings.of(partitions=partitions)
    ctx = FakeCtx(settings)
    pages = [parsed(f"http://solo{i}.example/", article(rng)) for i in range(40)]
    visits = 0
    for page in pages:
        route = dedup.band_route(ctx, page["simhash"], 3)  # type: ignore[arg-type]
        assert route[0][0] == 0 and sorted(b for b, _, _ in route) == [0, 1, 2, 3]
        order = [partition for _, _, partition in route]
        assert order == sorted(order, key=lambda p: (p != order[0], p))  # grouped
        visits += len(set(order))
    out, _logs, handled = run_pipeline(pages, settings, partitions)
    assert not any(i["near_duplicate_of"] for i in out.values())
    assert handled == visits
    if partitions == 1:
        assert handled == len(pages)  # every band is local: no hop at all
    else:
        assert handled < 4 * len(pages)


def test_near_dup_off_and_wordless_pages_are_exact_only() -> None:
    rng = random.Random(4)
    base = article(rng)
    pages = [parsed("http://a.example/", base), parsed("http://b.example/", mutate(base, rng, 1))]
    out, _logs, handled = run_pipeline(pages, Settings.of(partitions=4, near_dup_distance=-1), 0)
    assert not any(i["near_duplicate_of"] for i in out.values()) and handled == 2
    wordless = [{**parsed(f"http://w{i}.example/", "x"), "simhash": None} for i in range(2)]
    out, _logs, handled = run_pipeline(wordless, Settings.of(partitions=4), 0)
    assert not any(i["near_duplicate_of"] for i in out.values()) and handled == 2


def test_band_keys_route_each_band_to_its_own_partition_key() -> None:
    settings = Settings.of(partitions=64)
    ctx = FakeCtx(settings)
    fp = 0xFFFF_0000_1234_ABCD
    keys = [dedup.band_key(to_signed(fp), b, 3) for b in range(4)]
    assert keys == [f"b{k:x}" for k in bands(fp, 3)] and len(set(keys)) == 4
    parts = {dedup.dedup_partition(ctx, "f", to_signed(fp), b) for b in range(4)}  # type: ignore[arg-type]
    assert parts <= set(range(64))


@pytest.mark.parametrize("partitions", [1, 2, 3, 4, 9])
def test_memoised_band_routes_are_the_computed_ones(
    partitions: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """band_route keeps recent routes: whatever the cache holds (filled past its bound,
    other partition counts and distances interleaved), a route is the one computed
    afresh from the bands, and the message keying (dedup_partition) follows it."""
    monkeypatch.setattr(dedup, "_ROUTES_MAX", 64)
    rng = random.Random(partitions)
    ctx = FakeCtx(Settings.of(partitions=partitions))
    other = FakeCtx(Settings.of(partitions=partitions + 1))

    def fresh(fingerprint: int, distance: int) -> list[tuple[int, str, int]]:
        keys = [f"b{key:x}" for key in bands(to_unsigned(fingerprint), distance)]
        route = [(band, key, partition_for(key, partitions)) for band, key in enumerate(keys)]
        first = route[0][2]
        return sorted(route, key=lambda r: (r[0] != 0, r[2] != first, r[2], r[0]))

    fingerprints = [to_signed(rng.getrandbits(64)) for _ in range(300)]
    for _ in range(2):
        for fingerprint in fingerprints:
            for distance in (3, 7):
                dedup.band_route(other, fingerprint, distance)  # type: ignore[arg-type]
                route = dedup.band_route(ctx, fingerprint, distance)  # type: ignore[arg-type]
                assert route == fresh(fingerprint, distance)
                assert dedup.band_route(ctx, fingerprint, distance) is route  # type: ignore[arg-type]
    assert len(dedup._ROUTES) <= 64
