"""Benchmark the page store (WARC segments + RocksDB index) against a SQLite table.

Run:  .venv/bin/python bench/pagestore.py                  (1,000,000 pages: 2.9 GB of WARC
                                                            + 9.2 GB of SQLite, 25-40 min
                                                            on 2 cores; check df first)
      .venv/bin/python bench/pagestore.py --pages 100000   (a quick look, ~3 min)
      .venv/bin/python bench/pagestore.py --no-sqlite      (the page store alone)
      .venv/bin/python bench/pagestore.py --keep, then --reuse DIR   (re-run the reads)
      .venv/bin/python bench/pagestore.py --reuse DIR --no-sqlite --warm-only   (~20 s)

What it answers: can one worker's page store serve 10,000 random reads by URL
in <= 1 s with p99 <= 1 ms, does that stay flat as the store grows, and what does writing
cost -- each next to the obvious alternative, a SQLite table ``url TEXT PRIMARY KEY, body
BLOB`` in WAL mode, fed the *same* pages in transactions of the same batch size.

How it measures, and why:

* Pages are ~8 KB of HTML-like bytes (shared template, per-page title, date, counter,
  ~30 links, paragraphs of Zipf-distributed pseudo-words), so gzip compresses them about
  as much as real HTML (3.5x) and the store's compression cost is realistic.  Page ``i``
  is a pure function of ``i`` (reads are checked against it) and is generated *outside*
  the timed sections: only ``put_many`` and the SQLite inserts are timed.
* Durability is matched: ``put_many`` flushes segment bytes to the OS and writes the
  index through RocksDB's WAL without fsync; SQLite runs ``synchronous=NORMAL`` in WAL
  mode, which also fsyncs only at checkpoints.
* Reads happen at checkpoints during the write (100k, 300k, 1M pages, those <= --pages,
  plus --pages itself): the same 10,000 random URLs, drawn from every page written so
  far, read from both stores, one call per URL, each timed, best of --passes passes
  (the cores may be shared: each pass also reports its CPU time).  A flat total from
  100k to 1M means a read costs the same whatever the store's size.
* Each pass reads its URLs twice: *first touch* (whatever the caches hold) and *hot*
  (the same URLs again, so their index blocks and segment pages are in memory): the hot
  figure is the store's own CPU cost, independent of the disk.
* After the write: reads from a fresh ``read_only=True`` store (what ``seine get`` does),
  then *cold* reads, after evicting both stores' files from the OS page cache with
  ``posix_fadvise(DONTNEED)`` (no root needed, only our own files are touched).  Note
  that a machine's page cache may be far smaller than its RAM: on the VM this was
  written on, the kernel's DAMON ``pageout`` scheme kept it at 1-2 GB of 23 GB, so at
  1M pages (2.9 GB of WARC, 9.2 GB of SQLite) first-touch reads went to disk for both.
* Cold reads are also made by ``--threads`` threads at once (8 by default), each with
  its own read-only store or connection, since cold reads wait on the disk.
* The index size is measured on disk after the run, before and after a full compaction:
  bytes per index entry is what sizes the index of a billion pages (docs/SCALING.md).

Everything lives in a temporary directory under --dir, removed at the end (--keep keeps
it, and ``--reuse DIR`` re-runs only the final read passes on it).  The run is bounded:
progress lines every 50,000 pages with an ETA.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.pagestore_corpus import Corpus, SqliteStore
from streams.store.pagestore import PageStore

BASE_TIME = 1_750_000_000.0  # fetch time of page 0; page i is fetched i ms later
CHECKPOINTS = (100_000, 300_000, 1_000_000)
PROGRESS_EVERY = 50_000


# --------------------------------------------------------------------------- measuring


@dataclass
class ReadResult:
    """Wall time of a read pass, its latency quantiles, and the CPU time it used.

    CPU time is printed because other processes may share the two cores: wall time
    minus CPU time is mostly waiting for a core (or, cold, for the disk).
    """

    total_s: float
    cpu_s: float
    p50_ms: float
    p99_ms: float
    max_ms: float

    def line(self) -> str:
        return (
            f"{self.total_s:6.3f} s total ({self.cpu_s:5.3f} s CPU)  p50 {self.p50_ms:6.3f} ms  "
            f"p99 {self.p99_ms:6.3f} ms  max {self.max_ms:7.3f} ms"
        )


def time_reads(get: Callable[[str], Any], urls: Sequence[str]) -> ReadResult:
    """One call per URL, each timed; a miss is an error (every URL was written)."""
    lat: list[int] = []
    clock = time.perf_counter_ns
    cpu0 = time.process_time()
    start = clock()
    for url in urls:
        t0 = clock()
        got = get(url)
        lat.append(clock() - t0)
        if got is None:
            raise AssertionError(f"stored page not found: {url}")
    total = (clock() - start) / 1e9
    cpu = time.process_time() - cpu0
    lat.sort()

    def q(p: float) -> float:
        return lat[min(len(lat) - 1, int(p * len(lat)))] / 1e6

    return ReadResult(total, cpu, q(0.50), q(0.99), lat[-1] / 1e6)


def time_threaded_reads(gets: Sequence[Callable[[str], Any]], urls: Sequence[str]) -> ReadResult:
    """``len(gets)`` threads, each with its own store handle, share the URLs.

    Why: a first-touch read is mostly waiting for the disk, and a disk serves many
    requests at once; ``os.pread`` and zlib release the GIL, so threads overlap the
    waits.  This is how a server (the web API, several ``seine get``) reads, and shows
    what the same store does when reads are not strictly one after another.
    """
    k = len(gets)
    lats: list[list[int]] = [[] for _ in range(k)]
    missing: list[str] = []
    barrier = threading.Barrier(k + 1)
    clock = time.perf_counter_ns

    def work(j: int) -> None:
        get, lat = gets[j], lats[j]
        barrier.wait()
        for url in urls[j::k]:
            t0 = clock()
            if get(url) is None:
                missing.append(url)
            lat.append(clock() - t0)

    threads = [threading.Thread(target=work, args=(j,)) for j in range(k)]
    for t in threads:
        t.start()
    cpu0 = time.process_time()
    barrier.wait()
    start = clock()
    for t in threads:
        t.join()
    total = (clock() - start) / 1e9
    cpu = time.process_time() - cpu0
    if missing:
        raise AssertionError(f"stored page not found: {missing[0]}")
    lat = sorted(x for part in lats for x in part)

    def q(p: float) -> float:
        return lat[min(len(lat) - 1, int(p * len(lat)))] / 1e6

    return ReadResult(total, cpu, q(0.50), q(0.99), lat[-1] / 1e6)


@dataclass
class Passes:
    """Several read passes of one store: the best one (least wall time) and every total.

    Why best-of-N: the two cores are shared with whatever else runs; one pass hit by a
    burst of someone else's work says nothing about the store.  All totals are printed.
    """

    best: ReadResult
    totals: list[float]

    def line(self) -> str:
        return f"{self.best.line()}  (passes: {', '.join(f'{t:.3f}' for t in self.totals)} s)"


def read_passes(
    gets: dict[str, Callable[[str], Any]], url_sets: Sequence[Sequence[str]]
) -> dict[str, Passes]:
    """Each pass reads its URL set from every store in turn (interleaved, same conditions).

    Every store reads the set twice: first touch (whatever the caches hold), then the
    same URLs again, "hot": their segment pages and index blocks are now in memory,
    so the second figure is the store's own cost, free of the disk and the page cache.
    """
    runs: dict[str, list[ReadResult]] = {}
    for urls in url_sets:
        for name, get in gets.items():
            runs.setdefault(name, []).append(time_reads(get, urls))
            runs.setdefault(f"{name} hot", []).append(time_reads(get, urls))
    return {
        name: Passes(min(rs, key=lambda r: r.total_s), [r.total_s for r in rs])
        for name, rs in runs.items()
    }


def check_bodies(
    corpus: Corpus, store: PageStore, sql: SqliteStore | None, ids: Iterable[int]
) -> None:
    """Read back a few pages outside the timed loop: a fast wrong answer is no answer."""
    for i in ids:
        url, _, body = corpus.page(i)
        cap = store.get(url)
        assert cap is not None and cap.body == body and cap.status == 200, url
        if sql is not None:
            assert sql.get(url) == body, url


def dir_bytes(path: Path, suffix: str | None = None) -> int:
    return sum(
        p.stat().st_size
        for p in path.rglob("*")
        if p.is_file() and (suffix is None or p.name.endswith(suffix))
    )


def evict(paths: Iterable[Path]) -> None:
    """Drop our own files from the OS page cache (fsync first: dirty pages stay cached)."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def mb(n: float) -> str:
    return f"{n / 1e6:,.0f} MB"


# --------------------------------------------------------------------------- the run


@dataclass
class WriteStats:
    """What the write phase measured: seconds in each store, and the read checkpoints."""

    pages: int
    body_bytes: int
    t_ours: float
    t_sql: float
    t_gen: float
    checkpoints: list[tuple[int, dict[str, Passes]]]


def write_phase(args: argparse.Namespace, work: Path, rng: random.Random) -> WriteStats:
    """Write --pages pages to both stores in batches; read passes at each checkpoint."""
    n = args.pages
    checkpoints = sorted({c for c in CHECKPOINTS if c <= n} | {n})
    print(
        f"page store bench: {n:,} pages, batches of {args.batch}, {args.reads:,} reads at "
        f"{', '.join(f'{c:,}' for c in checkpoints)} pages; data in {work}; "
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores",
        flush=True,
    )
    t_corpus = time.perf_counter()
    corpus = Corpus()
    sample = [corpus.page(i)[2] for i in range(0, 2000)]
    raw = sum(map(len, sample))
    gz = sum(len(zlib.compress(b, 6)) for b in sample)
    print(
        f"corpus: mean body {raw / len(sample):,.0f} bytes, gzip -6 ratio {raw / gz:.2f}x "
        f"(built in {time.perf_counter() - t_corpus:.1f}s)",
        flush=True,
    )
    store = PageStore(work / "ps")
    sql = None if args.no_sqlite else SqliteStore(work / "pages.sqlite")
    stats = WriteStats(n, 0, 0.0, 0.0, 0.0, [])
    started = time.perf_counter()
    next_progress = PROGRESS_EVERY
    i = 0
    try:
        while i < n:
            stop = min(i + args.batch, checkpoints[bisect.bisect_right(checkpoints, i)])
            t0 = time.perf_counter()
            pages = [corpus.page(j) for j in range(i, stop)]
            items = [
                {
                    "url": url,
                    "status": 200,
                    "headers": headers,
                    "body": body,
                    "fetched_at": BASE_TIME + j / 1000,
                    "ip": f"192.0.2.{j % 250 + 1}",
                }
                for j, (url, headers, body) in zip(range(i, stop), pages, strict=True)
            ]
            rows = [(url, body) for url, _, body in pages]
            t1 = time.perf_counter()
            store.put_many(items)
            t2 = time.perf_counter()
            if sql is not None:
                sql.put_many(rows)
            t3 = time.perf_counter()
            stats.t_gen += t1 - t0
            stats.t_ours += t2 - t1
            stats.t_sql += t3 - t2
            stats.body_bytes += sum(len(r[1]) for r in rows)
            i = stop
            if i >= next_progress or i == n:
                next_progress += PROGRESS_EVERY
                elapsed = time.perf_counter() - started
                print(
                    f"  {i:>10,} pages  {elapsed:6.0f}s  ours {i / stats.t_ours:6,.0f} pages/s  "
                    + (f"sqlite {i / stats.t_sql:6,.0f} pages/s  " if sql else "")
                    + f"ETA {elapsed / i * (n - i):5.0f}s",
                    flush=True,
                )
            if i in checkpoints:
                check_bodies(corpus, store, sql, [rng.randrange(i) for _ in range(50)])
                url_sets = [
                    [Corpus.url(rng.randrange(i)) for _ in range(args.reads)]
                    for _ in range(args.passes)
                ]
                gets: dict[str, Callable[[str], Any]] = {"ours": store.get}
                if sql is not None:
                    gets["sqlite"] = sql.get
                passes = read_passes(gets, url_sets)
                stats.checkpoints.append((i, passes))
                for name, p in passes.items():
                    print(f"  reads at {i:,} pages: {name:10s} {p.line()}", flush=True)
    finally:
        store.close()
        if sql is not None:
            sql.close()
    (work / "bench.json").write_text(json.dumps({"pages": n, "sqlite": sql is not None}))
    return stats


def final_reads(
    args: argparse.Namespace, work: Path, n: int, with_sql: bool, rng: random.Random
) -> tuple[dict[str, Passes], dict[str, Passes]]:
    """Warm and cold read passes on freshly opened stores (``seine get`` opens read-only)."""

    def fresh_url_sets() -> list[list[str]]:
        return [
            [Corpus.url(rng.randrange(n)) for _ in range(args.reads)] for _ in range(args.passes)
        ]

    ro = PageStore(work / "ps", read_only=True)
    gets: dict[str, Callable[[str], Any]] = {"ours": ro.get}
    sql = SqliteStore(work / "pages.sqlite", create=False) if with_sql else None
    if sql is not None:
        gets["sqlite"] = sql.get
    warm = read_passes(gets, fresh_url_sets())
    ro.close()
    if sql is not None:
        sql.db.close()
    cold_runs: dict[str, list[ReadResult]] = {name: [] for name in gets}
    if args.warm_only:
        return warm, {}
    for urls in fresh_url_sets():
        # Reopen and evict before every pass: no in-process cache (RocksDB's block
        # cache, SQLite's page cache) nor OS page cache holds anything of the last one.
        ro = PageStore(work / "ps", read_only=True)
        evict(p for p in (work / "ps").rglob("*") if p.is_file())
        cold_runs["ours"].append(time_reads(ro.get, urls))
        ro.close()
        if sql is not None:
            sql = SqliteStore(work / "pages.sqlite", create=False)
            evict(sql.files())
            cold_runs["sqlite"].append(time_reads(sql.get, urls))
            sql.db.close()
    if args.threads > 1:
        for urls in fresh_url_sets():
            tag = f"x{args.threads}"
            stores = [PageStore(work / "ps", read_only=True) for _ in range(args.threads)]
            evict(p for p in (work / "ps").rglob("*") if p.is_file())
            cold_runs.setdefault(f"ours {tag}", []).append(
                time_threaded_reads([st.get for st in stores], urls)
            )
            for st in stores:
                st.close()
            if with_sql:
                conns = [
                    SqliteStore(work / "pages.sqlite", create=False) for _ in range(args.threads)
                ]
                evict(conns[0].files())
                cold_runs.setdefault(f"sqlite {tag}", []).append(
                    time_threaded_reads([c.get for c in conns], urls)
                )
                for c in conns:
                    c.db.close()
    cold = {
        name: Passes(min(rs, key=lambda r: r.total_s), [r.total_s for r in rs])
        for name, rs in cold_runs.items()
    }
    return warm, cold


def run(args: argparse.Namespace) -> None:
    rng = random.Random(1234)
    if args.reuse is None:
        work = Path(tempfile.mkdtemp(prefix="seine-bench-pagestore-", dir=args.dir))
        stats: WriteStats | None = write_phase(args, work, rng)
        n, with_sql = args.pages, not args.no_sqlite
    else:
        work = Path(args.reuse)
        meta = json.loads((work / "bench.json").read_text())
        n, with_sql, stats = meta["pages"], meta["sqlite"] and not args.no_sqlite, None
        print(
            f"page store bench: reads only, on the {n:,}-page stores kept in {work}; "
            f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores",
            flush=True,
        )
    warm, cold = final_reads(args, work, n, with_sql, rng)

    # ---- sizes: index bytes per entry, before and after a full compaction
    seg_bytes = dir_bytes(work / "ps" / "segments")
    idx_before = dir_bytes(work / "ps" / "index")
    if stats is not None:
        w = PageStore(work / "ps")
        w._db.compact_range(None, None)  # bench-only: reach into the store for its index
        w.close()
    idx_after = dir_bytes(work / "ps" / "index")
    idx_sst = dir_bytes(work / "ps" / "index", ".sst")
    sql_bytes = dir_bytes(work, ".sqlite") if with_sql else 0

    # ---- report
    print()
    if stats is not None:
        bb = stats.body_bytes
        print(f"== {n:,} pages of mean {bb / n:,.0f} bytes ({mb(bb)} of bodies)")
        print(
            f"write   ours   {n / stats.t_ours:8,.0f} pages/s  {bb / stats.t_ours / 1e6:6.1f} "
            f"MB/s (body bytes)  on disk {mb(seg_bytes)} WARC + {mb(idx_after)} index"
        )
        if with_sql:
            print(
                f"write   sqlite {n / stats.t_sql:8,.0f} pages/s  {bb / stats.t_sql / 1e6:6.1f} "
                f"MB/s (body bytes)  on disk {mb(sql_bytes)}"
            )
        print(f"        (generating the pages took {stats.t_gen:.0f}s, not counted)")
    else:
        print(f"== {n:,} pages: on disk {mb(seg_bytes)} WARC + {mb(idx_after)} index")
    print(f"reads of {args.reads:,} random URLs (one get() each), best of {args.passes} passes:")
    checkpoints = stats.checkpoints if stats is not None else []
    for at, passes in checkpoints:
        for name, p in passes.items():
            print(f"  at {at:>10,} pages      {name:10s} {p.line()}")
    for name, p in warm.items():
        print(f"  read-only store, warm  {name:10s} {p.line()}")
    for name, p in cold.items():
        print(f"  read-only store, cold  {name:10s} {p.line()}")
    if len(checkpoints) > 1:
        for name in ("ours", "ours hot"):
            first, last = checkpoints[0][1][name].best, checkpoints[-1][1][name].best
            print(
                f"flatness: {name:8s} {checkpoints[0][0]:,} -> {checkpoints[-1][0]:,} pages: "
                f"total {first.total_s:.3f}s -> {last.total_s:.3f}s, CPU {first.cpu_s:.3f}s -> "
                f"{last.cpu_s:.3f}s, p50 {first.p50_ms:.3f} -> {last.p50_ms:.3f} ms, "
                f"p99 {first.p99_ms:.3f} -> {last.p99_ms:.3f} ms"
            )
    print(
        f"index: {mb(idx_before)} before compaction, {mb(idx_after)} after "
        f"({idx_sst / n:.1f} bytes/entry in SST files, {idx_after / n:.1f} bytes/entry all files)"
    )
    print(f"load average at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    budget = args.reads * 100e-6
    print(f"goal: 10,000 reads in <= 1 s (<= 100 us a read) and p99 <= 1 ms; {n:,} pages:")
    for name in ("ours", "ours hot"):
        goal = warm[name].best
        wall = goal.total_s <= budget and goal.p99_ms <= 1.0
        print(
            f"  {name:8s} wall time {'met' if wall else 'MISSED'}; CPU time (the store's own "
            f"cost, without waiting for a core or the disk) {goal.cpu_s / args.reads * 1e6:.0f} "
            f"us a read: {'met' if goal.cpu_s <= budget else 'MISSED'}"
        )
    if args.keep or args.reuse is not None:
        print(f"kept {work} (rerun the reads: --reuse {work})")
    else:
        shutil.rmtree(work)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=1_000_000, help="pages to write")
    parser.add_argument("--reads", type=int, default=10_000, help="random reads per checkpoint")
    parser.add_argument("--batch", type=int, default=500, help="pages per put_many / transaction")
    parser.add_argument(
        "--passes", type=int, default=3, help="read passes per measurement (best is reported)"
    )
    parser.add_argument(
        "--threads", type=int, default=8, help="reader threads for the threaded cold passes"
    )
    parser.add_argument("--dir", default=None, help="parent of the temporary data directory")
    parser.add_argument("--no-sqlite", action="store_true", help="skip the SQLite baseline")
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    parser.add_argument(
        "--reuse", metavar="DIR", help="skip writing: read passes on stores kept by --keep"
    )
    parser.add_argument(
        "--warm-only",
        action="store_true",
        help="skip the cold read passes (evicting the OS cache): a quick re-measurement",
    )
    args = parser.parse_args(argv)
    if min(args.pages, args.reads, args.batch, args.passes) < 1:
        parser.error("--pages, --reads, --batch and --passes must be positive")
    run(args)


if __name__ == "__main__":
    main()
