"""The frontier on disk: 1,000,000 queued URLs over 10,000 hosts, memory and speed.

The real `streams.core.frontier.Frontier` runs over RocksDB tables kept the way
Faust's rocksdb store keeps the stage's `hosts` and `queue` tables: one database
per partition, opened by Faust's own `RocksDBOptions` with the options the app
gives those tables (`streams.tables.produced.FRONTIER_STORE_OPTIONS`), JSON keys
(`authority\\x00tier\\x00seq`) and values, each key in its host's partition.
What is left out is the changelog send (it costs the broker memory, not the
worker's). Host states are written back once per event (1,000 URLs), as the
stage does.

Phase 1 enqueues N URLs (tiers mixed by depth) and prints the rate and RSS per
100k-URL step as the frontier grows; phase 2 answers every host's robots.txt and
dequeues everything (each host asked again as soon as its fetch completes) and
prints the rate per 100k step as it shrinks. The peak RSS of the process is
checked against the limit.

    .venv/bin/python bench/frontier.py                 # 1,000,000 URLs, 10,000 hosts
    .venv/bin/python bench/frontier.py --urls 200000   # a quick look
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

from faust.stores.rocksdb import RocksDBOptions

import topology
from streams.core.frontier import Frontier, Politeness
from streams.tables.produced import FRONTIER_STORE_OPTIONS

STEP = 100_000
EVENT = 1_000  # URLs per frontier event (one write-back of host states each)


def rss_mb() -> tuple[float, float]:
    """(current, peak) resident set size of this process, from the kernel."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) / 1024
    return fields["VmRSS"], fields["VmHWM"]


class RocksTable(MutableMapping[str, Any]):
    """A table as Faust's rocksdb store keeps it: a database per partition, JSON keys
    and values; a key lives in its host's partition (Faust: the current event's)."""

    def __init__(self, directory: Path, partitions: int) -> None:
        options = RocksDBOptions(**FRONTIER_STORE_OPTIONS, use_rocksdict=True)
        self.partitions = partitions
        self.dbs = [options.open(directory / f"{p}.db") for p in range(partitions)]
        self._partition: dict[str, int] = {}  # the bench's 10,000 hosts

    def _db(self, key: str) -> Any:
        authority = key.split("\x00", 1)[0]
        partition = self._partition.get(authority)
        if partition is None:
            partition = topology.host_partition(authority, self.partitions)
            self._partition[authority] = partition
        return self.dbs[partition]

    def __getitem__(self, key: str) -> Any:
        raw = self._db(key).get(json.dumps(key).encode())
        if raw is None:
            raise KeyError(key)
        return json.loads(raw)

    def get(self, key: str, default: Any = None) -> Any:
        raw = self._db(key).get(json.dumps(key).encode())
        return default if raw is None else json.loads(raw)

    def __setitem__(self, key: str, value: Any) -> None:
        self._db(key).put(json.dumps(key).encode(), json.dumps(value).encode())

    def __delitem__(self, key: str) -> None:
        self._db(key).delete(json.dumps(key).encode())

    def pop(self, key: str, default: Any = None) -> Any:
        db = self._db(key)
        raw_key = json.dumps(key).encode()
        raw = db.get(raw_key)
        if raw is None:
            return default
        db.delete(raw_key)
        return json.loads(raw)

    def __iter__(self) -> Iterator[str]:
        for db in self.dbs:
            for key in db.keys():  # noqa: SIM118
                yield json.loads(key)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def close(self) -> None:
        for db in self.dbs:
            db.close()


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def enqueue_all(frontier: Frontier, n: int, hosts: int, rates: list[float]) -> float:
    """Phase 1: enqueue `n` URLs over `hosts` hosts, the frontier grows; the seconds taken."""
    started = step_started = time.perf_counter()
    for i in range(n):
        host = i % hosts
        depth = (i // hosts) % 7
        frontier.enqueue(f"http://host-{host:05d}.example/d{depth}/page-{i}.html", depth)
        if (i + 1) % EVENT == 0:
            frontier.flush()
        if (i + 1) % STEP == 0:
            now = time.perf_counter()
            current, peak = rss_mb()
            rates.append(STEP / (now - step_started))
            print(
                f"enqueue {i + 1:>9,}: {rates[-1]:>8,.0f} URLs/s  "
                f"RSS {current:.0f} MB (peak {peak:.0f})",
                flush=True,
            )
            step_started = now
    frontier.flush()
    return time.perf_counter() - started


def answer_robots(frontier: Frontier, partitions: int, clock: Clock) -> int:
    """Phase 2's start: robots.txt for every host (404: allow all); how many were asked."""
    robots = 0
    for p in range(partitions):
        dispatches, _ = frontier.due(p)
        for d in dispatches:
            assert d.kind == "robots"
            frontier.complete(d.host, d.kind, 404, "robots", 1.0, clock())
            robots += 1
        frontier.flush()
    return robots


def drain(
    frontier: Frontier, partitions: int, clock: Clock, rates: list[float]
) -> tuple[int, float]:
    """Phase 2: dispatch and complete until the queues are empty; (URLs, seconds)."""
    started = step_started = time.perf_counter()
    dequeued = 0
    next_report = STEP
    while frontier.queued:
        clock.now += 0.001
        for p in range(partitions):
            dispatches, decisions = frontier.due(p)
            assert not decisions
            for d in dispatches:
                frontier.complete(d.host, d.kind, 200, "fetched", 1.0, clock())
                dequeued += 1
                if dequeued % EVENT == 0:
                    frontier.flush()
            frontier.flush()
            while dequeued >= next_report:
                now = time.perf_counter()
                current, peak = rss_mb()
                rates.append(STEP / (now - step_started))
                print(
                    f"dequeue {next_report:>9,}: "
                    f"{rates[-1]:>8,.0f} URLs/s  "
                    f"RSS {current:.0f} MB (peak {peak:.0f})",
                    flush=True,
                )
                step_started = now
                next_report += STEP
    return dequeued, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=1_000_000)
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--limit-mb", type=float, default=500.0)
    parser.add_argument("--dir", help="where the databases go (default: a temp dir, removed)")
    args = parser.parse_args()
    directory = Path(args.dir or tempfile.mkdtemp(prefix="seine-frontier-"))
    directory.mkdir(parents=True, exist_ok=True)
    n, partitions = args.urls, args.partitions
    print(
        f"frontier bench: {n:,} URLs over {args.hosts:,} hosts, {partitions} partitions, "
        f"RocksDB options {FRONTIER_STORE_OPTIONS}, RSS at start {rss_mb()[0]:.0f} MB"
    )
    hosts = RocksTable(directory / "hosts", partitions)
    queue = RocksTable(directory / "queue", partitions)
    clock = Clock()
    frontier = Frontier(
        hosts,
        queue,
        Politeness(),
        lambda authority: topology.host_partition(authority, partitions),
        clock=clock,
        write_back=True,
    )
    try:
        # -- phase 1: enqueue, the frontier grows
        rates: dict[str, list[float]] = {"enqueue": [], "dequeue": []}
        enqueue_s = enqueue_all(frontier, n, args.hosts, rates["enqueue"])
        assert frontier.queued == n, frontier.queued

        # -- phase 2: robots.txt for every host (404: allow all), then drain the queues
        robots = answer_robots(frontier, partitions, clock)
        assert robots == args.hosts, robots
        dequeued, dequeue_s = drain(frontier, partitions, clock, rates["dequeue"])
        assert dequeued == n, dequeued
        _, peak = rss_mb()
        for phase, steps in rates.items():
            if len(steps) >= 2:
                # flat means the last step (largest frontier for enqueue, smallest for
                # dequeue) runs as fast as the first: the ratio is the figure
                print(
                    f"{phase}: last/first 100k step {steps[-1] / steps[0]:.2f}x, "
                    f"slowest/fastest {min(steps) / max(steps):.2f}x"
                )
        print(
            f"enqueued {n:,} in {enqueue_s:.1f} s ({n / enqueue_s:,.0f}/s), dequeued in "
            f"{dequeue_s:.1f} s ({n / dequeue_s:,.0f}/s); peak RSS {peak:.0f} MB "
            f"(limit {args.limit_mb:.0f} MB): {'OK' if peak < args.limit_mb else 'OVER'}"
        )
        return 0 if peak < args.limit_mb else 1
    finally:
        hosts.close()
        queue.close()
        if not args.dir:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
