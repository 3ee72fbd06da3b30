"""How long url-seen takes to restore a partition's Bloom filter from its exact table.

When a worker takes over a partition, url-seen rebuilds that partition's Bloom
filter from the `seen` table before judging any URL (streams/stages/url_seen.py).
This bench builds a RocksDB store the way Faust's rocksdb store keeps the table
(JSON-serialized string keys) with N URLs over P partitions, then times the real
rebuild path, `SeenFilters.for_partition`, for one partition and for all of them.

    .venv/bin/python bench/urlseen_recovery.py --urls 10000000 --partitions 4
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from rocksdict import Options, Rdict, WriteBatch

from streams.core.partitioning import partition_for
from streams.core.urls import host_of, site_key
from streams.stages.url_seen import SeenFilters, table_partition_keys


def urls(n: int, hosts: int) -> Iterator[str]:
    for i in range(n):
        yield f"http://site-{i % hosts:05d}.example/section-{i % 97}/page-{i}.html"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=10_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--hosts", type=int, default=10_000)
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="seine-urlseen-"))
    dbs: dict[int, Rdict] = {}
    try:
        # Faust's rocksdb store: one database per partition, JSON-serialized keys.
        for partition in range(args.partitions):
            dbs[partition] = Rdict(str(directory / f"seen-{partition}.db"), Options(raw_mode=True))
        started = time.monotonic()
        batches = {p: WriteBatch(raw_mode=True) for p in dbs}
        for count, url in enumerate(urls(args.urls, args.hosts), start=1):
            partition = partition_for(site_key(host_of(url)), args.partitions)
            batches[partition].put(json.dumps(url).encode(), b"1")
            if count % 100_000 == 0:
                for p, batch in batches.items():
                    dbs[p].write(batch)
                batches = {p: WriteBatch(raw_mode=True) for p in dbs}
        for p, batch in batches.items():
            dbs[p].write(batch)
            dbs[p].flush()
        print(
            f"wrote {args.urls:,} URLs over {args.partitions} partitions in "
            f"{time.monotonic() - started:.1f}s"
        )

        class Store:
            def _db_for_partition(self, partition: int) -> Rdict:
                return dbs[partition]

        class Table:
            data = Store()

        filters = SeenFilters(capacity=max(1, args.urls // args.partitions), error_rate=0.01)
        started = time.monotonic()
        bloom = filters.for_partition(0, lambda: table_partition_keys(Table(), 0))
        one = time.monotonic() - started
        print(
            f"rebuild of partition 0: {len(bloom):,} URLs in {one:.2f}s "
            f"({len(bloom) / one:,.0f} URLs/s), filter {bloom.nbytes / 1e6:.1f} MB"
        )
        started = time.monotonic()
        for partition in range(1, args.partitions):
            filters.for_partition(partition, lambda p=partition: table_partition_keys(Table(), p))
        total = one + time.monotonic() - started
        print(
            f"rebuild of all {args.partitions} partitions ({args.urls:,} URLs): {total:.1f}s "
            f"= {args.urls / total:,.0f} URLs/s; peak RSS "
            f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB"
        )
    finally:
        for db in dbs.values():
            db.close()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
