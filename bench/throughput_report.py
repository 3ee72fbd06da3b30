"""The results of bench/crawl_throughput.py: one crawl's figures, the lines printed for
it, the medians and ratios of the summary, and what machine and code they belong to."""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import subprocess
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from bench.throughput_server import Check, Site
from bench.throughput_watch import Measured
from streams.demo.nginx import nginx_binary

ROOT = Path(__file__).resolve().parents[1]
MB = 1024 * 1024
NOISY_CORES = 0.25  # other processes using this much CPU on average make a run suspect


#: The crawler names of the runs: Seine on each broker it can start, and Scrapy.
SEINE_ON = {"seine": "tansu", "seine-kafka": "kafka", "seine-noindex": "tansu"}
#: Seine runs with extra flags: "seine-noindex" is the default command with --no-index.
SEINE_FLAGS = {"seine-noindex": ["--no-index"]}


# ---------------------------------------------------------------------------- one crawl


@dataclass
class Result:
    """One crawl of one crawler: timings, resources, the referee's check, the crawler's notes."""

    crawler: str
    run: int
    measured: Measured
    check: Check
    server_cpu_s: float
    notes: list[str]
    data_bytes: int = 0
    busy_before_cores: float = 0.0

    @property
    def peak_rss_hwm(self) -> int:
        """Sum of per-process peaks: an upper bound of the tree's peak, exact per process."""
        return sum(self.measured.peak_rss_by_process.values())

    @property
    def other_cpu_s(self) -> float:
        """CPU that processes other than the crawler, the server and the bench used meanwhile."""
        m = self.measured
        return max(0.0, m.system_busy_s - m.cpu_s - self.server_cpu_s - m.bench_cpu_s)

    @property
    def other_cores(self) -> float:
        return self.other_cpu_s / self.measured.wall_s if self.measured.wall_s else 0.0

    @property
    def ok(self) -> bool:
        """Exited 0 in time *and* fetched something: a crawler whose consumer crashed may
        still exit 0 as "idle" (seen with Seine), and its zeros must not enter a median."""
        m = self.measured
        return m.returncode == 0 and not m.timed_out and self.check.page_fetches > 0

    @property
    def pages_per_s_crawl(self) -> float:
        return self.check.page_fetches / self.check.crawl_s if self.check.crawl_s else 0.0

    @property
    def pages_per_s_wall(self) -> float:
        return self.check.page_fetches / self.measured.wall_s if self.measured.wall_s else 0.0

    @property
    def startup_s(self) -> float:
        """Process start to first request: broker start, topics, group join (Seine)."""
        if not self.check.first_request:
            return 0.0
        return max(0.0, self.check.first_request - self.measured.launched)

    @property
    def tail_s(self) -> float:
        """Last request to process exit: the work behind the last fetch, idle
        detection and shutdown."""
        if not self.check.last_request:
            return 0.0
        return max(0.0, self.measured.exited - self.check.last_request)

    @property
    def idle_to_exit_s(self) -> float | None:
        """Idle to process exit (Seine: from the last message any worker handled, its
        "idle from" line, to the exit): idle detection and shutdown alone."""
        for note in self.notes:
            if note.startswith("seine: idle from "):
                idle_from = float(note.split()[3])
                return max(0.0, self.measured.exited - idle_from)
        return None

    def summary(self) -> dict[str, Any]:
        return {
            "crawler": self.crawler,
            "run": self.run,
            "pages_per_s_crawl_phase": round(self.pages_per_s_crawl, 1),
            "pages_per_s_wall": round(self.pages_per_s_wall, 1),
            "crawl_phase_s": round(self.check.crawl_s, 2),
            "wall_s": round(self.measured.wall_s, 2),
            "startup_s": round(self.startup_s, 2),
            "tail_s": round(self.tail_s, 2),
            "idle_to_exit_s": round(idle_or_nan(self), 2),
            "cpu_s": round(self.measured.cpu_s, 1),
            "server_cpu_s": round(self.server_cpu_s, 2),
            "peak_rss_mb": round(self.peak_rss_hwm / MB, 1),
            "peak_rss_sampled_sum_mb": round(self.measured.peak_rss / MB, 1),
            "peak_rss_mb_by_process": {
                k: round(v / MB, 1) for k, v in self.measured.peak_rss_by_process.items()
            },
            "cpu_s_by_process": {k: round(v, 1) for k, v in self.measured.cpu_by_process.items()},
            "worker_cpu_s_by_thread": {
                k: round(v, 1) for k, v in self.measured.cpu_by_thread.items()
            },
            "returncode": self.measured.returncode,
            "timed_out": self.measured.timed_out,
            "data_mb": round(self.data_bytes / MB, 1),
            "bench_cpu_s": round(self.measured.bench_cpu_s, 2),
            "other_processes_cpu_s": round(self.other_cpu_s, 1),
            "other_processes_cores": round(self.other_cores, 2),
            "busy_cores_before": round(self.busy_before_cores, 2),
            "check": asdict(self.check),
            "notes": self.notes,
        }


# ---------------------------------------------------------------------------- reporting


def fmt_mb(n: float) -> str:
    return f"{n / MB:,.0f} MB"


def idle_or_nan(result: Result) -> float:
    idle = result.idle_to_exit_s
    return float("nan") if idle is None else idle


def idle_part(result: Result) -> str:
    idle = result.idle_to_exit_s
    return "" if idle is None else f", idle->exit {idle:.1f} s"


def print_result(result: Result, expected: int) -> None:
    m, c = result.measured, result.check
    if result.ok:
        status = "ok"
    elif m.timed_out:
        status = "TIMED OUT"
    elif m.returncode == 0:
        status = "FAILED: exit 0 but no page fetched (see the crawler's stderr, --keep)"
    else:
        status = f"FAILED: exit {m.returncode}"

    who = (
        "wall incl. broker start" if result.crawler in SEINE_ON else "wall incl. interpreter start"
    )
    parts = " + ".join(f"{k} {fmt_mb(v)}" for k, v in sorted(m.peak_rss_by_process.items()))
    print(
        f"[{result.crawler} run {result.run}] {status}\n"
        f"    {c.page_fetches:,} page fetches ({expected:,} expected), "
        f"{c.robots_fetches} robots.txt fetches\n"
        f"    crawl phase (first->last request, server log) {c.crawl_s:8.1f} s  "
        f"-> {result.pages_per_s_crawl:7.1f} pages/s\n"
        f"    {who:<45} {m.wall_s:8.1f} s  -> {result.pages_per_s_wall:7.1f} pages/s"
        f"   (start->first request {result.startup_s:.1f} s, last request->exit "
        f"{result.tail_s:.1f} s{idle_part(result)})\n"
        f"    peak RSS {fmt_mb(result.peak_rss_hwm)} ({parts}; sampled simultaneous peak "
        f"{fmt_mb(m.peak_rss)});  CPU {m.cpu_s:.1f} s "
        f"({1000 * m.cpu_s / max(c.page_fetches, 1):.1f} ms/page);  "
        f"server CPU {result.server_cpu_s:.1f} s "
        f"({100 * result.server_cpu_s / max(c.crawl_s, 1e-6):.0f}% of one core)"
        + (f";  pages stored {fmt_mb(result.data_bytes)}" if result.data_bytes else "")
    )
    if len(m.cpu_by_process) > 1:
        pages = max(c.page_fetches, 1)
        print(
            "    CPU by process (last sample): "
            + ", ".join(
                f"{name} {seconds:.1f} s ({1000 * seconds / pages:.2f} ms/page)"
                for name, seconds in sorted(m.cpu_by_process.items(), key=lambda kv: -kv[1])
            )
        )
    if m.cpu_by_thread:
        pages = max(c.page_fetches, 1)
        total = sum(m.cpu_by_thread.values()) or 1.0
        print(
            "    workers' CPU by thread (last sample): "
            + ", ".join(
                f"{kind} {1000 * seconds / pages:.2f} ms/page ({100 * seconds / total:.0f}%)"
                for kind, seconds in sorted(m.cpu_by_thread.items(), key=lambda kv: -kv[1])
            )
        )
    noisy = result.other_cores >= NOISY_CORES
    print(
        f"    other processes on the machine meanwhile: {result.other_cpu_s:.1f} CPU-s "
        f"({result.other_cores:.2f} cores on average){'  <- NOISY RUN' if noisy else ''}; "
        f"this bench: {m.bench_cpu_s:.1f} CPU-s"
    )
    print(
        f"    check: missing {c.missing}, extra {c.extra} (robots violations "
        f"{c.robots_violations}), duplicate fetches {c.duplicate_fetches} "
        f"({c.urls_fetched_twice_or_more} URLs), hosts without robots.txt fetch "
        f"{c.hosts_without_robots}, repeated robots.txt fetches {c.repeated_robots_fetches}, "
        f"non-200 {c.non_200 or 0}, overlapping requests to one host {c.overlapping_requests}"
        f", requests closer than the delay {c.too_close}"
        f"  => {'EXACT' if c.exact else 'NOT EXACT'}"
    )
    for kind, urls in c.examples.items():
        if urls:
            print(f"      e.g. {kind}: {', '.join(urls[:3])}")
    for line in result.notes:
        print(f"    {line}")
    print(flush=True)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def print_summary(results: list[Result], runs: int, delay: float = 0.0) -> dict[str, Any]:
    """Medians per crawler over successful runs, the Seine / Scrapy ratios, and each
    Seine as a share of the floor (the bare GET loop)."""
    by: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        if r.ok:
            by[r.crawler].append(r)
    rows: list[tuple[str, Callable[[Result], float], str]] = [
        ("pages/s, crawl phase", lambda r: r.pages_per_s_crawl, "{:,.1f}"),
        ("pages/s, wall (incl. startup)", lambda r: r.pages_per_s_wall, "{:,.1f}"),
        ("crawl phase, s", lambda r: r.check.crawl_s, "{:,.1f}"),
        ("wall, s (Seine: incl. broker start)", lambda r: r.measured.wall_s, "{:,.1f}"),
        ("start -> first request, s", lambda r: r.startup_s, "{:,.1f}"),
        ("last request -> exit, s", lambda r: r.tail_s, "{:,.1f}"),
        ("idle -> exit, s", idle_or_nan, "{:,.1f}"),
        ("peak RSS, MB (sum of process peaks)", lambda r: r.peak_rss_hwm / MB, "{:,.0f}"),
        ("CPU, s (user+sys, tree)", lambda r: r.measured.cpu_s, "{:,.1f}"),
        (
            "CPU per page, ms",
            lambda r: 1000 * r.measured.cpu_s / max(r.check.page_fetches, 1),
            "{:,.1f}",
        ),
        ("server CPU, s", lambda r: r.server_cpu_s, "{:,.1f}"),
        ("other processes, avg cores busy", lambda r: r.other_cores, "{:,.2f}"),
    ]
    crawlers = [c for c in (*SEINE_ON, "scrapy", "floor") if by.get(c)]
    seines = [c for c in crawlers if c in SEINE_ON]
    # one ratio column per Seine run beside Scrapy: Seine (Tansu) / Scrapy, Seine
    # (Kafka) / Scrapy
    ratios = [c for c in seines if "scrapy" in crawlers]
    label = f"median of {runs} runs each" if runs > 1 else "one run each"
    print(f"=== summary ({label}; failed runs excluded) ===")
    header = f"{'':38}" + "".join(f"{c:>14}" for c in crawlers)
    header += "".join(f"{c + '/scrapy':>20}" for c in ratios)
    print(header)
    summary: dict[str, Any] = {}
    for name, get, form in rows:
        values = {c: median([get(r) for r in by[c]]) for c in crawlers}
        line = f"{name:38}" + "".join(f"{form.format(values[c]):>14}" for c in crawlers)
        summary[name] = dict(values)
        for c in ratios:
            ratio = values[c] / values["scrapy"] if values["scrapy"] else float("nan")
            line += f"{ratio:>19.2f}x"
            summary[name]["ratio" if c == "seine" else f"ratio_{c}"] = ratio
        print(line)
    if "floor" in crawlers:
        walls = summary["pages/s, wall (incl. startup)"]
        crawl = summary["pages/s, crawl phase"]
        for c in seines:
            share_wall = walls[c] / walls["floor"] if walls["floor"] else float("nan")
            share_crawl = crawl[c] / crawl["floor"] if crawl["floor"] else float("nan")
            summary.setdefault("of_floor", {})[c] = {"wall": share_wall, "crawl": share_crawl}
            print(
                f"{c} as a share of the floor (a bare aiohttp GET loop, same politeness): "
                f"{share_wall:.0%} of its pages/s whole process, {share_crawl:.0%} in the "
                "crawl phase"
            )
    if "seine" in summary.get("pages/s, wall (incl. startup)", {}) and by.get("seine-noindex"):
        walls = summary["pages/s, wall (incl. startup)"]
        crawl = summary["pages/s, crawl phase"]
        on_off_wall = walls["seine"] / walls["seine-noindex"] if walls["seine-noindex"] else 0.0
        on_off_crawl = crawl["seine"] / crawl["seine-noindex"] if crawl["seine-noindex"] else 0.0
        summary["index_on_off"] = {"wall": on_off_wall, "crawl": on_off_crawl}
        print(
            f"indexing on / off (seine / seine-noindex): {on_off_wall:.1%} of the pages/s "
            f"whole process, {on_off_crawl:.1%} in the crawl phase"
        )
    for c in crawlers:
        exact = sum(1 for r in by[c] if r.check.exact)
        print(f"{c}: {exact}/{len(by[c])} successful runs fetched every expected page exactly once")
    noisy = [r for r in results if r.other_cores >= NOISY_CORES]
    if noisy:
        print(
            f"WARNING: {len(noisy)} run(s) shared the machine with other busy processes "
            f"(>= {NOISY_CORES} cores on average): treat their figures with care"
        )
    failed = [r for r in results if not r.ok]
    for r in failed:
        print(f"{r.crawler} run {r.run} FAILED (excluded above)")
    print(
        "Note: Seine also stores every page (WARC + RocksDB index) and runs a Kafka-protocol\n"
        "broker; Scrapy only counts pages; the floor knows every URL up front. All: one\n"
        f"request in flight per host, {delay:g} s between a host's requests, robots.txt\n"
        "fetched.",
        flush=True,
    )
    return summary


def machine_line() -> str:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return (
        f"{os.cpu_count()} cores ({model or platform.processor() or 'unknown CPU'}), "
        f"{psutil.virtual_memory().total / 2**30:.1f} GiB RAM, Python {platform.python_version()}"
    )


def code_line() -> str:
    """Which Seine code runs: the commit of this checkout and whether streams/ is modified.

    Seine is imported from this file's repo root (PYTHONPATH), so the line tells what the
    figures belong to; a ``git archive`` export of a commit says so instead.
    """
    try:
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "streams", "topology"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return f"{ROOT} (not a git checkout)"
    return f"{ROOT} at {head}" + (" with uncommitted changes in streams/" if dirty else "")


def versions(site: Site) -> str:
    parts = []
    for dist in ("seine", "scrapy", "twisted"):
        with contextlib.suppress(Exception):
            import importlib.metadata

            parts.append(f"{dist} {importlib.metadata.version(dist)}")
    if site.kind == "nginx":
        binary = nginx_binary()
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            out = subprocess.run(
                [binary or "nginx", "-v"], capture_output=True, text=True, timeout=10
            )
            parts.append(out.stderr.strip().replace("nginx version: ", ""))
    return ", ".join(parts)


# ---------------------------------------------------------------------------- main
