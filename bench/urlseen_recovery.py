"""How long url-seen takes to restore a partition's Bloom filter from its exact store.

When a worker takes over a partition, url-seen rebuilds that partition's Bloom
filter from the `seen` store before judging any URL (streams/stages/url_seen.py).
This bench writes N URLs over P partitions into the registry layout through the
real store (`streams.tables.registry.RegistryStore`: site id + URL hash keys, one
database per partition as Faust opens them) and times the real rebuild path,
`SeenFilters.for_partition` over `RegistryStore.partition_keys`. The peer, in the
same run, is the layout it replaced: a plain Faust table keyed by the
JSON-serialized URL, whose rebuild read the URLs out of the keys.

    .venv/bin/python bench/urlseen_recovery.py --urls 1000000 --partitions 4
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import faust  # noqa: E402
from rocksdict import Options, Rdict, WriteBatch  # noqa: E402

import topology  # noqa: E402
from streams.core.registry import key_of  # noqa: E402
from streams.stages.url_seen import SeenFilters  # noqa: E402
from streams.tables.registry import RegistryTable  # noqa: E402


def urls(n: int, hosts: int) -> Iterator[str]:
    for i in range(n):
        yield f"http://site-{i % hosts:05d}.example/section-{i % 97}/page-{i}.html"


def plain_partition_keys(db: Rdict) -> Iterator[bytes]:
    """The rebuild's read of the plain table (url_seen.table_partition_keys at 08ecbff)."""
    for raw in db.keys():  # noqa: SIM118
        key = cast(bytes, raw)
        if key.startswith(b"__faust"):
            continue
        if key[:1] == b'"' and b"\\" not in key:
            yield key[1:-1]
        else:
            yield json.loads(key).encode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--hosts", type=int, default=10_000)
    args = parser.parse_args()
    if args.urls > 20_000_000:
        parser.error("--urls is bounded at 20,000,000")
    directory = Path(tempfile.mkdtemp(prefix="seine-urlseen-"))
    plain: dict[int, Rdict] = {}
    try:
        app = faust.App("bench-recovery", store="rocksdb://", datadir=str(directory / "faust"))
        table = RegistryTable(
            app, name="seen", partitions=args.partitions, key_type=bytes, value_type=bytes
        )
        store = table.store
        for partition in range(args.partitions):
            plain[partition] = Rdict(
                str(directory / f"plain-seen-{partition}.db"), Options(raw_mode=True)
            )
        started = time.monotonic()
        pending: dict[int, list[str]] = {p: [] for p in range(args.partitions)}

        def flush(partition: int) -> None:
            chunk = pending[partition]
            keys = [key_of(u) for u in chunk]
            store.add_keyed(partition, chunk, keys, [True] * len(chunk))
            batch = WriteBatch(raw_mode=True)
            for url in chunk:
                batch.put(json.dumps(url).encode(), b"1")
            plain[partition].write(batch)
            pending[partition] = []

        for url in urls(args.urls, args.hosts):
            partition = topology.url_partition(url, args.partitions)
            pending[partition].append(url)
            if len(pending[partition]) >= 50_000:
                flush(partition)
        for partition in range(args.partitions):
            flush(partition)
            store._db_for_partition(partition).flush()
            plain[partition].flush()
        print(
            f"wrote {args.urls:,} URLs over {args.partitions} partitions, both layouts, in "
            f"{time.monotonic() - started:.1f}s; load average {os.getloadavg()[0]:.2f}"
        )
        capacity = max(1, args.urls // args.partitions)
        seconds: dict[str, float] = {}
        for name, keys_of in (
            ("registry", store.partition_keys),
            ("plain", lambda p: plain_partition_keys(plain[p])),
        ):
            filters = SeenFilters(capacity=capacity, error_rate=0.01)
            started = time.monotonic()
            bloom = filters.for_partition(0, lambda k=keys_of: k(0))  # type: ignore[misc]
            one = time.monotonic() - started
            for partition in range(1, args.partitions):
                filters.for_partition(partition, lambda p=partition, k=keys_of: k(p))  # type: ignore[misc]
            seconds[name] = total = time.monotonic() - started
            count = sum(sum(1 for _ in keys_of(p)) for p in range(args.partitions))
            assert count == args.urls, (name, count)  # every URL read back
            print(
                f"  {name:8s} partition 0 in {one:.2f}s; all "
                f"{args.partitions} partitions ({args.urls:,}): {total:.2f}s = "
                f"{args.urls / total:,.0f} URLs/s; filter {bloom.nbytes / 1e6:.1f} MB"
            )
        print(
            f"  registry is {seconds['plain'] / seconds['registry']:.2f}x plain in URLs/s; "
            f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB"
        )
    finally:
        for db in plain.values():
            db.close()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
