"""Benchmark: a full crawl of the synthetic web by Seine and by Scrapy, judged by the server.

Run (from the repo root; the ``bench`` extra provides scrapy and psutil)::

    .venv/bin/python bench/crawl_throughput.py                      # 200 hosts x 100 pages, once
    .venv/bin/python bench/crawl_throughput.py --runs 3             # medians of 3 alternating runs
    .venv/bin/python bench/crawl_throughput.py --hosts 200 --pages 20 --only seine
    .venv/bin/python bench/crawl_throughput.py --server python      # no nginx on this machine

What it does, and why each part is there:

* **The web** is `streams.demo.webgen` (200 hosts x 100 pages of ~8 KB, 23 links a page,
  10% duplicate bodies, robots.txt per host forbidding ``/private/``), so the right answer
  is known exactly: `DemoWeb.reachable_allowed()` is the set of URLs a correct crawl
  fetches, each once. Hosts are named by their loopback IPs by default (``use_ip_hosts``)
  so that neither crawler needs name overrides; ``--named-hosts`` uses
  ``site-NNNN.demo.test`` names instead (Seine gets ``--resolve``, Scrapy a mapping
  resolver), to show name resolution does not change the picture.
* **The server** must not be the bottleneck on a 2-core machine, so it is nginx (C,
  sendfile, two workers) whenever it is installed, and the Python demo server with every
  response pre-rendered otherwise. Its request log is the referee: fetch counts, the crawl
  phase (first request to last), duplicates, robots.txt violations and overlapping
  requests to one host all come from what the *server* saw, not from either crawler's
  own account. The server's CPU use during each crawl is printed so that "not the
  bottleneck" can be checked rather than assumed.
* **Seine** runs as the README's ``seine crawl`` with its defaults (a worker process
  per core, at most one per partition, 4 partitions; ``--workers`` and ``--partitions``
  set them) with its embedded broker (Tansu), so the
  wall time includes starting the broker, creating topics, joining the consumer group and
  the idle detection at the end: that is why two durations are reported, "wall incl.
  broker start" (process start to exit) and "crawl phase" (first to last request, from
  the server log). Seine also writes every page to WARC files with a RocksDB index;
  Scrapy only counts pages, so Seine does strictly more work per page.
* **Scrapy** runs `bench/scrapy_peer.py` in a child process with CONCURRENT_REQUESTS=64,
  CONCURRENT_REQUESTS_PER_DOMAIN=1, DOWNLOAD_DELAY=0, ROBOTSTXT_OBEY, AUTOTHROTTLE off:
  the same politeness as Seine's defaults (one request in flight per host, no delay).
* **Memory and CPU**: the crawler's process tree (Seine: the seine process, its workers and
  its Tansu child; Scrapy: its one process) is polled with psutil every 0.2 s. Peak RSS is the sum
  of each process's peak, taken from the kernel's high-water mark (VmHWM) so that short
  spikes between polls are not missed; the highest sampled simultaneous sum is printed
  beside it. CPU seconds come from ``getrusage(RUSAGE_CHILDREN)`` around each crawl,
  which is exact for every descendant that was waited for (Tansu is waited for by seine).
  The CPU that *other* processes used meanwhile is printed too, and runs where it
  averaged a quarter of a core or more are flagged: on a shared machine those figures
  are not comparable.
  Seine's workers' CPU is also split by thread each second (bench/threads.py): the event
  loop, which runs every stage, against librdkafka, tantivy, RocksDB and the rest.
* **Fairness**: the crawlers never run at the same time; with ``--runs N`` they alternate
  and the order is swapped every round, and medians are reported. The benchmark itself
  only sleeps between polls.

Every crawl is bounded by ``--timeout`` (15 min by default); child processes are stopped on
exit, on Ctrl-C and on SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

try:
    import psutil  # noqa: F401  (the bench/ modules below need it: say so here, kindly)
except ImportError:  # pragma: no cover - bench extra not installed
    sys.exit("bench/crawl_throughput.py needs psutil: .venv/bin/pip install -e '.[bench]'")

from bench.stage_floor import print_stage_floors  # noqa: E402
from bench.throughput_report import (  # noqa: E402
    NOISY_CORES,
    SEINE_FLAGS,
    SEINE_ON,
    Result,
    code_line,
    machine_line,
    print_result,
    print_summary,
    versions,
)
from bench.throughput_server import Site, referee, start_site  # noqa: E402
from bench.throughput_watch import run_watched, stop_all_crawlers, wait_until_quiet  # noqa: E402
from streams.demo.webgen import DemoWeb, WebSpec  # noqa: E402

LOG_SETTLE_S = 2.5  # nginx and the Python server flush their request logs every second
SEINE_STAT_PREFIXES = (
    "seine: messages handled per stage topic",
    "seine: smoothed produce-to-handle latency",
)


@dataclass(frozen=True)
class Web:
    """A web the bench crawls: its size, the politeness delay, the server's latency."""

    hosts: int
    pages: int
    delay: float = 0.0
    #: (lowest, highest) seconds a host answers in, spread over the hosts; None: at once
    latency: tuple[float, float] | None = None
    #: Scrapy's CONCURRENT_REQUESTS: the value that served it best on this web
    concurrency: int = 64

    def describe(self) -> str:
        slow = f", answers in {self.latency[0]:g}-{self.latency[1]:g} s" if self.latency else ""
        return f"{self.hosts} hosts x {self.pages} pages, delay {self.delay:g} s{slow}"


WEBS = {
    "dense": Web(200, 100),
    "wide": Web(2000, 10, delay=0.5, concurrency=128),
    "slow": Web(200, 50, latency=(0.1, 0.3)),
}


def host_latencies(spec: WebSpec, latency: tuple[float, float] | None) -> dict[str, float]:
    """Each host's answer time, spread evenly over `latency` in a shuffled order."""
    if latency is None:
        return {}
    hosts = list(DemoWeb(spec).all_host_names())
    random.Random(spec.seed).shuffle(hosts)
    low, high = latency
    step = (high - low) / max(len(hosts) - 1, 1)
    return {host: round(low + i * step, 4) for i, host in enumerate(hosts)}


def dir_bytes(path: Path) -> int:
    total = 0
    for base, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(base, name)).st_size
    return total


def seine_command(args: argparse.Namespace, site: Site, seeds_file: Path, data: Path) -> list[str]:
    """`seine crawl` with the embedded broker, default politeness, stats printed at the end."""
    exe = Path(sys.executable).with_name("seine")
    base = (
        [str(exe)]
        if exe.exists()
        else [sys.executable, "-c", "import sys; from streams.cli import main; sys.exit(main())"]
    )
    cmd = [
        *base,
        "crawl",
        "--seeds-file",
        str(seeds_file),
        "--allow-private",
        "--until-idle",
        "--data-dir",
        str(data),
        "--log-level",
        "info",
    ]
    if args.delay:
        cmd += ["--delay", repr(args.delay)]
    # unset: the README's command with its defaults (a worker per core, 4 partitions)
    if args.partitions is not None:
        cmd += ["--partitions", str(args.partitions)]
    if args.workers is not None:
        cmd += ["--workers", str(args.workers)]
    if args.named_hosts:
        for host, address in sorted(site.web.resolve_map(site.port).items()):
            cmd += ["--resolve", f"{host}={address}"]
    return cmd


def scrapy_command(args: argparse.Namespace, files: dict[str, Path]) -> list[str]:
    cmd = [
        sys.executable,
        str(ROOT / "bench" / "scrapy_peer.py"),
        "--seeds-file",
        str(files["seeds"]),
        "--hosts-file",
        str(files["hosts"]),
        "--concurrency",
        str(args.concurrency),
        "--stats-out",
        str(files["scrapy_stats"]),
        "--delay",
        repr(args.delay),
    ]
    if args.named_hosts:
        cmd += ["--resolve-file", str(files["resolve"])]
    return cmd


def floor_command(args: argparse.Namespace, files: dict[str, Path]) -> list[str]:
    """The bare aiohttp GET loop over the expected URLs: the physical limit."""
    return [
        sys.executable,
        str(ROOT / "bench" / "aiohttp_floor.py"),
        "--urls-file",
        str(files["urls"]),
        "--delay",
        repr(args.delay),
    ]


def crawl_once(
    crawler: str,
    run: int,
    args: argparse.Namespace,
    site: Site,
    files: dict[str, Path],
    expected: set[str],
    disallowed: set[str],
    work: Path,
) -> Result:
    """Run one crawler once against the live site and judge it from the server log."""
    run_dir = work / f"{crawler}-{run}"
    run_dir.mkdir(parents=True, exist_ok=True)
    data = run_dir / "data"
    if crawler in SEINE_ON:
        cmd = [
            *seine_command(args, site, files["seeds"], data),
            "--broker",
            SEINE_ON[crawler],
            *SEINE_FLAGS.get(crawler, []),
        ]
    elif crawler == "floor":
        cmd = floor_command(args, files)
    else:
        cmd = scrapy_command(args, files)
    stdout, stderr = run_dir / "stdout.txt", run_dir / "stderr.txt"
    busy_before = (
        wait_until_quiet(args.quiet_wait, args.quiet_threshold) if args.quiet_wait else 0.0
    )
    server_cpu_before = site.cpu_seconds()
    measured = run_watched(cmd, stdout, stderr, args.timeout, crawler)
    time.sleep(LOG_SETTLE_S)  # let the server write out the last requests of this crawl
    server_cpu = site.cpu_seconds() - server_cpu_before
    window = [
        r
        for r in site.read_log()
        if r["end"] >= measured.launched - 0.01 and r["start"] <= measured.exited + 0.01
    ]
    check = referee(window, site.web, expected, disallowed, site.time_resolution, args.delay)

    out_lines = stdout.read_text(encoding="utf-8", errors="replace").splitlines()
    notes: list[str] = []
    if crawler in SEINE_ON:
        notes = [line for line in out_lines if line.startswith("seine:")]
        # With --workers N each worker prints its own counters and per-stage CPU in its log.
        for log in sorted(data.glob("worker-*/worker.log")):
            lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
            notes += [
                f"seine {log.parent.name}: {line.removeprefix('seine: ')}"
                for line in lines
                if line.startswith(
                    ("seine: worker CPU", "seine: CPU per stage", "seine: host cycle")
                )
            ]
    elif crawler == "floor":
        notes = [line for line in out_lines if line.startswith("floor:")]
    else:
        notes = [line for line in out_lines if line.startswith("scrapy:")]
        warnings = [
            line
            for line in stderr.read_text(encoding="utf-8", errors="replace").splitlines()
            if " ERROR: " in line or " WARNING: " in line
        ]
        if warnings:
            notes.append(f"scrapy: {len(warnings)} warning/error log lines, first: {warnings[0]}")
    if not measured.timed_out and measured.returncode != 0:
        tail = stderr.read_text(encoding="utf-8", errors="replace").splitlines()[-5:]
        notes += [f"exit code {measured.returncode}; stderr tail:", *tail]
    result = Result(crawler, run, measured, check, server_cpu, notes, 0, busy_before)
    if data.exists():
        result.data_bytes = dir_bytes(data)
    if not args.keep:
        shutil.rmtree(data, ignore_errors=True)
    return result


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bench/crawl_throughput.py",
        description="Crawl the synthetic web with Seine and with Scrapy; compare throughput, "
        "memory and correctness (judged from the server's request log).",
    )
    p.add_argument("--runs", type=int, default=1, help="runs per crawler (median reported)")
    p.add_argument(
        "--web",
        choices=sorted(WEBS),
        default="dense",
        help="the web crawled: " + "; ".join(f"{k}: {v.describe()}" for k, v in WEBS.items()),
    )
    p.add_argument("--hosts", type=int, help="hosts (default: the --web's)")
    p.add_argument("--pages", type=int, help="pages per host (default: the --web's)")
    p.add_argument(
        "--delay",
        type=float,
        help="seconds between two requests to a host, for every crawler: Seine --delay, "
        "Scrapy DOWNLOAD_DELAY (default: the --web's)",
    )
    p.add_argument("--seed", type=int, default=1, help="the web generator's seed")
    p.add_argument("--server", choices=("auto", "nginx", "python"), default="auto")
    p.add_argument("--only", choices=("seine", "scrapy", "floor"), help="run one crawler only")
    p.add_argument(
        "--broker",
        choices=("tansu", "kafka", "both"),
        default="tansu",
        help="the broker `seine crawl` starts (--broker): the embedded Tansu (default), a "
        "one-node Apache Kafka under the data dir, or both, one after the other",
    )
    p.add_argument(
        "--index",
        choices=("on", "off", "both"),
        default="on",
        help="Seine's full-text indexing: on (the default command), off (--no-index), or "
        "both, one after the other, with the ratio printed",
    )
    p.add_argument(
        "--partitions",
        type=int,
        default=None,
        help="seine --partitions (default: the command's own, 4)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="seine --workers: worker processes on one broker (default: the command's "
        "own, one per core up to the partitions)",
    )
    p.add_argument(
        "--concurrency", type=int, help="Scrapy CONCURRENT_REQUESTS (default: the --web's)"
    )
    p.add_argument(
        "--named-hosts",
        action="store_true",
        help="site-NNNN.demo.test host names (Seine --resolve, Scrapy resolver) "
        "instead of loopback IPs",
    )
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per crawl")
    p.add_argument(
        "--quiet-wait",
        type=float,
        default=120.0,
        help="before each crawl, wait up to this many seconds for other processes to go "
        "below --quiet-threshold (0: don't wait)",
    )
    p.add_argument(
        "--quiet-threshold",
        type=float,
        default=NOISY_CORES,
        help="cores other processes may keep busy when a crawl starts",
    )
    p.add_argument("--json", type=Path, help="also write every figure to this JSON file")
    p.add_argument("--keep", action="store_true", help="keep the work dir (logs, Seine data)")
    args = p.parse_args(argv)
    web = WEBS[args.web]
    for name in ("hosts", "pages", "delay", "concurrency"):
        if getattr(args, name) is None:
            setattr(args, name, getattr(web, name))
    args.latency = web.latency
    if args.runs < 1 or args.hosts < 1 or args.pages < 1:
        p.error("--runs, --hosts and --pages must be >= 1")
    return args


def write_inputs(work: Path, web: DemoWeb, expected: set[str]) -> dict[str, Path]:
    """The crawlers' input files (seeds, hosts, names, the floor's URLs) and where the
    Scrapy peer writes its stats."""
    files = {
        "seeds": work / "seeds.txt",
        "hosts": work / "hosts.txt",
        "resolve": work / "resolve.json",
        "scrapy_stats": work / "scrapy-stats.json",
        "urls": work / "urls.txt",
    }
    files["urls"].write_text("\n".join(sorted(expected)) + "\n", encoding="utf-8")
    files["seeds"].write_text("\n".join(web.seeds()) + "\n", encoding="utf-8")
    files["hosts"].write_text("\n".join(web.all_host_names()) + "\n", encoding="utf-8")
    resolve = {h: web.address_of(h) for h in web.all_host_names()}
    files["resolve"].write_text(json.dumps(resolve), encoding="utf-8")
    return files


@contextlib.contextmanager
def terminate_on_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP end the bench like Ctrl-C does, so cleanup always runs."""

    def handler(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    spec = WebSpec(
        hosts=args.hosts,
        pages_per_host=args.pages,
        page_bytes=8192,
        links_per_page=23,
        duplicate_fraction=0.1,
        seed=args.seed,
        use_ip_hosts=not args.named_hosts,
    )
    seines = {"tansu": ["seine"], "kafka": ["seine-kafka"], "both": ["seine", "seine-kafka"]}
    chosen = seines[args.broker]
    if args.index != "on":
        off = ["seine-noindex"] if "seine" in chosen else []
        chosen = off if args.index == "off" else [*chosen, *off]
    crawlers = [*chosen, "scrapy", "floor"]
    if args.only:
        crawlers = [c for c in crawlers if c.startswith(args.only)]
    work = Path(tempfile.mkdtemp(prefix="seine-crawl-bench-"))
    site: Site | None = None
    results: list[Result] = []
    try:
        with terminate_on_signals():
            site = start_site(spec, args.server, work, host_latencies(spec, args.latency))
            web = site.web
            expected = web.reachable_allowed()
            disallowed = web.disallowed_linked()
            files = write_inputs(work, web, expected)
            print(f"machine: {machine_line()}")
            print(f"software: {versions(site)}")
            print(f"seine code: {code_line()}")
            print(
                f"web: {spec.hosts} hosts x {spec.pages_per_host} pages, {spec.page_bytes} B "
                f"pages, {spec.links_per_page} links/page, {spec.duplicate_fraction:.0%} "
                f"duplicate bodies, robots.txt per host; "
                f"{'named hosts' if args.named_hosts else 'IP hosts'} on port {site.port}; "
                f"{len(expected):,} reachable allowed pages, {len(disallowed):,} linked "
                f"URLs robots.txt forbids"
            )
            print(f"server: {site.kind}; work dir {work}")
            slow = f"{args.latency[0]:g}-{args.latency[1]:g} s" if args.latency else "none"
            print(
                f"politeness: one request in flight per host, {args.delay:g} s between a "
                f"host's requests; server latency {slow}\n"
                f"seine: --partitions {args.partitions or 'default'}, --workers "
                f"{args.workers or 'default'}, broker "
                f"started by the command ({args.broker}) | "
                f"scrapy: CONCURRENT_REQUESTS={args.concurrency}, per domain 1, "
                f"DOWNLOAD_DELAY {args.delay:g}, robots.txt obeyed | floor: a bare aiohttp "
                "GET loop over the expected URLs (bench/aiohttp_floor.py)\n",
                flush=True,
            )
            for run in range(1, args.runs + 1):
                order = crawlers if run % 2 else list(reversed(crawlers))
                for crawler in order:
                    print(f"--- {crawler} run {run}/{args.runs} ...", flush=True)
                    result = crawl_once(crawler, run, args, site, files, expected, disallowed, work)
                    results.append(result)
                    print_result(result, len(expected))
            summary = print_summary(results, args.runs, args.delay)
            print_stage_floors(results, web, work)
            if args.json is not None:
                args.json.write_text(
                    json.dumps(
                        {
                            "machine": machine_line(),
                            "software": versions(site),
                            "seine_code": code_line(),
                            "server": site.kind,
                            "spec": asdict(spec),
                            "expected_pages": len(expected),
                            "runs": [r.summary() for r in results],
                            "medians": summary,
                        },
                        indent=1,
                    ),
                    encoding="utf-8",
                )
                print(f"figures written to {args.json}")
    except KeyboardInterrupt:
        print("\ninterrupted: stopping child processes", file=sys.stderr, flush=True)
        return 130
    finally:
        stop_all_crawlers()
        if site is not None:
            site.stop()
        if args.keep:
            print(f"work dir kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0 if results and all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
