"""`seine crawl` and `seine worker` with one worker in this process: seeds, the
worker app, and the summary line."""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

from streams.cli.brokers import broker_for
from streams.core.stats import ERROR_OUTCOMES, stage_breakdown, top_reasons
from streams.ops.exits import EXIT_NOTHING_FETCHED, nothing_fetched_failure
from streams.ops.progress import Progress, print_idle_from
from streams.settings import Settings, worker_count


def peak_rss_mb() -> float:
    """This process's peak resident set, from the kernel's high-water mark.

    `ru_maxrss` is inherited across fork+exec on Linux, so a worker started by a
    big parent (pytest, a benchmark) would report the parent's peak instead.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _read_seeds(args: argparse.Namespace) -> list[str]:
    """The seed URLs given as arguments and in --seeds-file (one a line, # comments);
    ValueError naming the file, and the line, when it cannot be read."""
    seeds = list(args.urls or [])
    path = getattr(args, "seeds_file", None)
    if not path:
        return seeds
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read the seeds file {path}: {exc.strerror or exc}") from None
    for number, line in enumerate(raw.splitlines(), 1):
        try:
            text = line.decode("utf-8").strip()
        except UnicodeDecodeError as exc:
            raise ValueError(
                f"{path}, line {number}: not UTF-8 (byte {line[exc.start]:#04x} at column "
                f"{exc.start + 1})"
            ) from None
        if text and not text.startswith("#"):
            seeds.append(text)
    return seeds


def crawl(settings: Settings, seeds: list[str], until_idle: bool) -> int:
    """`seine crawl` and `seine demo`: one worker in this process, or several worker
    processes (`worker_count`: one per core by default) sharing the partitions. Either
    way Ctrl-C drains what is in flight and exits 130."""
    workers = worker_count(settings)
    if workers == 1:
        return run_crawl(settings, seeds, until_idle, drain_on_sigint=True)
    from streams.ops.multiworker import run_workers

    with broker_for(settings, workers=workers) as effective:
        embedded = not settings.kafka.bootstrap  # broker_for started one for us
        return run_workers(effective, seeds, workers, until_idle, embedded=embedded)


def run_crawl(
    settings: Settings, seeds: list[str], until_idle: bool, *, drain_on_sigint: bool = False
) -> int:
    from streams.app import create_app, run_worker
    from streams.core.allocator import limit_arenas, tune_malloc

    # this process is a worker from here on (streams/core/allocator.py); the arena cap
    # before any thread allocates: broker_for's admin client starts librdkafka's
    tune_malloc()
    limit_arenas(settings.worker.malloc_arenas)
    with broker_for(settings) as effective:
        seine = create_app(effective)
        # --recrawl keeps the crawl going on the revisit schedule: never idle for good
        seine.until_idle = until_idle and not effective.crawl.recrawl
        seine.drain_on_sigint = drain_on_sigint
        seine.initial_seeds = seeds
        progress = Progress(total=effective.crawl.max_pages or None)
        seine.on_progress = progress
        started = time.time()
        try:
            code = run_worker(seine)
        finally:
            progress.close()
        elapsed = time.time() - started
        c = seine.ctx.counters
        fetched = c.outcomes.get("fetched", 0)
        if effective.log_level.lower() in ("info", "debug"):
            print(f"seine: messages handled per stage topic: {dict(c.done)}")
            latency = {k: round(v, 1) for k, v in c.latency_ms.items()}
            print(f"seine: smoothed produce-to-handle latency (ms): {latency}")
            print(f"seine: host cycle (dispatch to completion): {c.host_cycle.describe()}")
            filters = seine.ctx.seen_filters
            if filters is not None:
                print(
                    f"seine: url-seen Bloom filters: {filters.false_positives} false positives "
                    f"confirmed new by the exact table, {filters.confirmed_seen} confirmed seen; "
                    f"rebuilt per partition in {filters.rebuild_seconds} s"
                )
            usage = resource.getrusage(resource.RUSAGE_SELF)
            cpu = usage.ru_utime + usage.ru_stime
            print(
                f"seine: worker CPU {cpu:.1f}s = {1000 * cpu / max(fetched, 1):.2f} ms per "
                f"fetched page, peak RSS {peak_rss_mb():.0f} MB"
            )
            breakdown = stage_breakdown(c.stage_cpu, c.stage_items, c.done, cpu, elapsed)
            print(f"seine: CPU per stage (share of worker CPU): {breakdown}")
            print_idle_from(c.last_handled_at)
        print(
            f"seine: {c.pages_stored} pages stored, {fetched} fetched in {elapsed:.1f}s "
            f"({fetched / max(elapsed, 1e-6):.0f} pages/s) by 1 worker, "
            f"{c.outcomes.get('duplicate', 0)} duplicates, "
            f"{c.outcomes.get('near-duplicate', 0)} near-duplicates, "
            f"{c.outcomes.get('robots-disallowed', 0)} disallowed by robots, "
            f"{sum(c.outcomes.get(k, 0) for k in ERROR_OUTCOMES)} errors, "
            f"{c.dead_letters} dead letters, "
            f"{seine.ctx.handoff.stats.missed} hand-off misses (fetched again); "
            f"data in {effective.data_dir}",
            flush=True,
        )
        if c.tally.reasons:
            print(f"seine: why pages were not stored: {top_reasons(c.tally.reasons)}", flush=True)
        errors = sum(c.outcomes.get(k, 0) for k in ERROR_OUTCOMES)
        failure = nothing_fetched_failure(fetched, errors, c.dead_letters)
        if until_idle and code == 0 and failure:
            print(f"seine: crawl failed: {failure}", file=sys.stderr, flush=True)
            return EXIT_NOTHING_FETCHED
        return code
