"""url-seen's cost per URL: the registry store against the plain Faust table it replaced.

Both run the url-seen step over the same link stream, in one process, against
real RocksDB partition databases opened by Faust and a real embedded broker
receiving the changelog through the crawl's librdkafka producer:

* **registry** — `streams.stages.url_seen.handle` over `RegistryTable`: keys are
  site id + URL hash, one WriteBatch and one changelog record per message, the
  Bloom filter over registry keys (definitely-new URLs are written with no read);
* **plain** — the step as it was before, over a `ProducedTable` keyed by the URL
  (JSON key, one RocksDB put and one changelog message per new URL).

The link stream imitates link-extract's output: batches of `--batch` URLs of one
partition, `--repeat` of the links pointing at URLs already met (navigation,
pages linking each other). Figures are CPU time of this process (the producer's C
threads included) per link handled, and changelog messages per new URL.

    .venv/bin/python bench/urlseen.py                  # 300,000 links, ~1 minute
    .venv/bin/python bench/urlseen.py --links 100000   # quicker
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
import weakref
from collections.abc import Callable, MutableMapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

#: The page every benchmark link comes from.
SOURCE = "http://source.test/"

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import faust  # noqa: E402
import faust.streams as faust_streams  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

import topology  # noqa: E402
from streams.kafka.broker import EmbeddedBroker  # noqa: E402
from streams.kafka.producer import StageProducer  # noqa: E402
from streams.stages.url_seen import SeenFilters, handle  # noqa: E402
from streams.tables.produced import ProducedTable  # noqa: E402
from streams.tables.registry import RegistryTable  # noqa: E402


def link_stream(
    links: int, hosts: int, repeat: float, partitions: int, batch: int, seed: int = 7
) -> list[tuple[int, list[str]]]:
    """Batches of (partition, URLs): each link is a repeat of an earlier URL with
    probability `repeat`, else a new URL."""
    rng = random.Random(seed)
    met: list[str] = []
    pending: dict[int, list[str]] = {p: [] for p in range(partitions)}
    out: list[tuple[int, list[str]]] = []
    for i in range(links):
        if met and rng.random() < repeat:
            url = met[rng.randrange(len(met))]
        else:
            url = (
                f"http://site-{rng.randrange(hosts):04d}.example/"
                f"section-{i % 37}/page-{i}.html?ref={i % 11}"
            )
            met.append(url)
        p = topology.url_partition(url, partitions)
        pending[p].append(url)
        if len(pending[p]) >= batch:
            out.append((p, pending[p]))
            pending[p] = []
    out.extend((p, urls) for p, urls in pending.items() if urls)
    return out


class Event:
    def __init__(self, topic: str, partition: int) -> None:
        self.message = SimpleNamespace(topic=topic, partition=partition)


class Sink:
    def __init__(self) -> None:
        self.new = 0

    def add_frontier(self, partition: int, kind: str, item: Any) -> None:
        self.new += 1

    def log(self, record: dict[str, Any]) -> None:
        pass


def plain_handle(
    partition: int,
    batch: dict[str, Any],
    seen: MutableMapping[str, int],
    filters: SeenFilters,
    out: Sink,
) -> None:
    """url-seen's step before the registry (streams/stages/url_seen.py at 08ecbff)."""
    bloom = filters.for_partition(partition, lambda: [])
    candidates = batch["urls"]
    urls = [candidate["url"] for candidate in candidates]
    maybe = bloom.contains_many(urls)
    fresh: list[str] = []
    for candidate, url, maybe_seen in zip(candidates, urls, maybe, strict=True):
        if maybe_seen:
            if url in seen:
                filters.confirmed_seen += 1
                continue
            if url not in fresh:
                filters.false_positives += 1
        if url in fresh:
            continue
        seen[url] = 1
        fresh.append(url)
        out.add_frontier(partition, "new_urls", candidate)
    if fresh:
        bloom.add_many(fresh)


def run(
    name: str,
    table: Any,
    producer: StageProducer,
    batches: list[tuple[int, list[str]]],
    step: Callable[[int, dict[str, Any], Sink], None],
) -> dict[str, float]:
    sink = Sink()
    topic = "url-seen"
    events = [Event(topic, p) for p in range(8)]
    records = 0
    produce_changelog = producer.produce_changelog

    def counting(*args: Any, **kwargs: Any) -> None:
        nonlocal records
        records += 1
        produce_changelog(*args, **kwargs)

    producer.produce_changelog = counting  # type: ignore[method-assign]
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for partition, urls in batches:
        faust_streams._current_event.set(weakref.ref(events[partition]))  # type: ignore[arg-type]
        step(
            partition,
            # links from a page, as link-extract sends them: a repeat adds to the
            # URL's in-link count in the registry (the plain peer ignores `via`)
            {"urls": [{"url": u, "depth": 1, "priority": 0, "via": SOURCE} for u in urls]},
            sink,
        )
        producer.poll()
    producer._producer.flush(60)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    links = sum(len(urls) for _, urls in batches)
    return {
        "links": links,
        "new": sink.new,
        "cpu_us_per_link": 1e6 * cpu / links,
        "wall_s": wall,
        "records": records,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--links", type=int, default=300_000)
    parser.add_argument("--hosts", type=int, default=500)
    parser.add_argument("--repeat", type=float, default=0.5)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    if args.links > 2_000_000:
        parser.error("--links is bounded at 2,000,000 (the producer queue holds them all)")
    batches = link_stream(args.links, args.hosts, args.repeat, args.partitions, args.batch)
    work = Path(tempfile.mkdtemp(prefix="seine-urlseen-bench-"))
    results: dict[str, dict[str, float]] = {}
    try:
        with EmbeddedBroker(log_path=work / "tansu.log") as broker:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            names = {
                "registry": "bench-registry-seen-changelog",
                "plain": "bench-plain-seen-changelog",
            }
            futures = admin.create_topics(
                [NewTopic(t, args.partitions, 1) for t in names.values()], request_timeout=20
            )
            for future in futures.values():
                future.result(30)
            for name in ("plain", "registry"):
                app = faust.App(
                    f"bench-{name}",
                    store="rocksdb://",
                    datadir=str(work / name),
                    topic_partitions=args.partitions,
                    Table=ProducedTable,
                )
                producer = StageProducer(
                    broker.bootstrap, **{"queue.buffering.max.messages": 2_500_000}
                )
                app.seine_producer = producer  # type: ignore[attr-defined]
                filters = SeenFilters(capacity=args.links, error_rate=0.01)
                # the two tables and their steps differ in type; the bench drives both alike
                table: Any
                step: Any
                if name == "registry":
                    table = RegistryTable(
                        app,
                        name="seen",
                        partitions=args.partitions,
                        key_type=bytes,
                        value_type=bytes,
                    )
                    app.tables.add(table)
                    step = lambda p, b, out, t=table, f=filters: handle(  # noqa: E731
                        p,
                        b,
                        t,
                        {},
                        f,
                        t.store.partition_keys,
                        out,  # type: ignore[arg-type]
                    )
                else:
                    table = app.Table(
                        "seen", default=None, partitions=args.partitions, key_type=str
                    )
                    assert isinstance(table, ProducedTable)
                    step = lambda p, b, out, t=table, f=filters: plain_handle(p, b, t, f, out)  # noqa: E731
                results[name] = run(name, table, producer, batches, step)
                results[name]["changelog_per_new_url"] = results[name]["records"] / max(
                    results[name]["new"], 1
                )
                producer.close()
                for db in list(table.data._dbs.values()):
                    db.close()
                table.data._dbs.clear()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"{args.links:,} links ({args.repeat:.0%} repeats) over {args.hosts} hosts, "
        f"{args.partitions} partitions, batches of {args.batch}; load average "
        f"{os.getloadavg()[0]:.2f}"
    )
    for name in ("plain", "registry"):
        r = results[name]
        print(
            f"  {name:8s} {r['cpu_us_per_link']:6.2f} µs CPU per link, {r['new']:,} new, "
            f"{r['changelog_per_new_url']:.4f} changelog messages per new URL, "
            f"{r['wall_s']:.1f} s wall"
        )
    assert results["plain"]["new"] == results["registry"]["new"], "the two disagree on what is new"
    plain, registry = results["plain"], results["registry"]
    ratio = plain["cpu_us_per_link"] / registry["cpu_us_per_link"]
    print(f"  registry is {ratio:.2f}x plain in links per CPU second")


if __name__ == "__main__":
    main()
