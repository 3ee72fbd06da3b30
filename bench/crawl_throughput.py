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
* **Seine** runs as ``seine crawl --until-idle --workers N --partitions N`` (N: one
  worker process per core, and one partition per worker: Scrapy is one process and
  cannot use a second core; each partition more splits every stage's batches into more,
  smaller messages, which cost the workers and the broker per message) with its
  embedded broker (Tansu), so the
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
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

try:
    import psutil
except ImportError:  # pragma: no cover - bench extra not installed
    sys.exit("bench/crawl_throughput.py needs psutil: .venv/bin/pip install -e '.[bench]'")

from streams.demo.nginx import NginxServer, nginx_binary, start_nginx  # noqa: E402
from streams.demo.server import (  # noqa: E402
    ServerProcess,
    read_request_log,
    start_server_process,
)
from streams.demo.webgen import DemoWeb, WebSpec  # noqa: E402

POLL_S = 0.2  # RSS sampling period
CHILD_SCAN_S = 1.0  # how often the process tree is re-listed (cheaper than every poll)
LOG_SETTLE_S = 2.5  # nginx and the Python server flush their request logs every second
STOP_GRACE_S = 20.0  # SIGTERM first (Seine stops its broker), SIGKILL after this
MB = 1024 * 1024
NOISY_CORES = 0.25  # other processes using this much CPU on average make a run suspect
INSTALL_NGINX = "apt-get install nginx-light   (Debian/Ubuntu; any nginx on PATH works)"
SEINE_STAT_PREFIXES = (
    "seine: messages handled per stage topic",
    "seine: smoothed produce-to-handle latency",
)


# ---------------------------------------------------------------------------- the server


class Site:
    """The demo web being served, whichever server serves it, plus its request log."""

    def __init__(
        self,
        kind: str,
        web: DemoWeb,
        read_log: Callable[[], list[dict[str, Any]]],
        stop: Callable[[], object],
        pid: int,
        time_resolution: float,
    ) -> None:
        self.kind = kind
        self.web = web
        self.port = web.port
        self._read_log = read_log
        self._stop = stop
        self.pid = pid
        #: Clock resolution of the log's start/end times (nginx: milliseconds).
        self.time_resolution = time_resolution

    def read_log(self) -> list[dict[str, Any]]:
        return self._read_log()

    def stop(self) -> None:
        self._stop()

    def cpu_seconds(self) -> float:
        """User+system CPU of the server so far (nginx: master and workers)."""
        try:
            root = psutil.Process(self.pid)
            total = 0.0
            for proc in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    times = proc.cpu_times()
                    total += times.user + times.system
            return total
        except psutil.Error:
            return float("nan")


def start_site(spec: WebSpec, kind: str, workdir: Path) -> Site:
    """Serve spec with nginx ("nginx", or "auto" when installed) or the Python server."""
    if kind in ("auto", "nginx") and nginx_binary() is None:
        if kind == "nginx":
            raise SystemExit(
                f"--server nginx: nginx is not installed; install it with\n  {INSTALL_NGINX}"
            )
        print(
            "nginx not found: serving with the Python demo server instead (it shares the two\n"
            f"cores with the crawler). For the reference setup install nginx:\n  {INSTALL_NGINX}",
            flush=True,
        )
        kind = "python"
    elif kind == "auto":
        kind = "nginx"
    if kind == "nginx":
        nginx: NginxServer = start_nginx(spec, workdir / "nginx", workers=2)
        return Site("nginx", nginx.web, nginx.read_log, nginx.stop, nginx.process.pid, 0.0015)
    log = workdir / "requests.jsonl"
    server: ServerProcess = start_server_process(spec, log, workdir, prerender=True)
    return Site(
        "python (prerendered)",
        server.web,
        lambda: read_request_log(log),
        server.stop,
        server.process.pid,
        1e-4,
    )


# ---------------------------------------------------------------------------- running a crawler


@dataclass
class Measured:
    """What watching one crawler process yields (times are epoch seconds)."""

    returncode: int | None
    timed_out: bool
    launched: float
    exited: float
    wall_s: float
    cpu_s: float
    peak_rss: int  # highest sampled sum over the process tree (simultaneous)
    peak_rss_by_process: dict[str, int]  # per process: kernel high-water mark (VmHWM)
    system_busy_s: float  # CPU seconds every process on the machine used, launch to exit
    bench_cpu_s: float  # this benchmark's own share of that
    #: per process name: user+system CPU seconds at its last sample (a process's last
    #: 0.2 s may be missed; cpu_s above is the exact total)
    cpu_by_process: dict[str, float] = field(default_factory=dict)


def high_water_mark(pid: int) -> int:
    """The kernel's record of a process's peak RSS (Linux VmHWM), 0 where unavailable.

    Why besides sampling: a 0.2 s poll can miss a short spike; the high-water mark misses
    nothing before the last poll. (Not ``ru_maxrss`` either: across fork+exec Linux carries
    the *parent's* peak into the child's, so a child started by this bench would report
    the bench's own RSS if that were larger.)
    """
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def system_busy() -> float:
    """CPU seconds the whole machine has been busy (all cores; guest time is in user)."""
    t = psutil.cpu_times()
    return sum(
        getattr(t, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq", "steal")
    )


def own_cpu() -> float:
    times = os.times()
    return times.user + times.system


def wait_until_quiet(max_wait: float, threshold: float) -> float:
    """Wait (up to max_wait s) until the rest of the machine uses < threshold cores.

    Why: on a shared 2-core box, another process's burst changes a crawl's figures more
    than most code changes do. Returns the busy cores last seen (printed with the run).
    """
    deadline = time.monotonic() + max_wait
    announced = False
    while True:
        before, own_before = system_busy(), own_cpu()
        time.sleep(2.0)
        busy = (system_busy() - before - (own_cpu() - own_before)) / 2.0
        if busy < threshold or time.monotonic() >= deadline:
            if busy >= threshold:
                print(f"  machine still busy ({busy:.2f} cores in use): measuring anyway")
            return busy
        if not announced:
            print(
                f"  waiting up to {max_wait:.0f} s for other processes to quieten "
                f"({busy:.2f} cores in use)",
                flush=True,
            )
            announced = True


class Watched:
    """A crawler child process whose whole tree we can find again to stop it.

    The child gets its own session (so a Ctrl-C on the terminal reaches only us, and we
    decide the order of shutdown); every descendant ever seen is remembered, because Seine's
    broker runs in a session of its own and would survive a kill of Seine's group.
    """

    live: ClassVar[set[Watched]] = set()

    def __init__(self, cmd: Sequence[str], stdout: Path, stderr: Path, env: dict[str, str]):
        self.seen: dict[int, psutil.Process] = {}
        with open(stdout, "wb") as out, open(stderr, "wb") as err:
            self.proc = subprocess.Popen(
                list(cmd),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=env,
                cwd=ROOT,
                start_new_session=True,
            )
        self.launched = time.time()
        self.launched_mono = time.monotonic()
        self.exited_mono: float | None = None
        self.done = threading.Event()
        Watched.live.add(self)
        with contextlib.suppress(psutil.Error):
            self.seen[self.proc.pid] = psutil.Process(self.proc.pid)
        # A thread blocked in wait() notes the exit time exactly; the poll loop need not.
        threading.Thread(target=self._wait, daemon=True).start()

    def _wait(self) -> None:
        self.proc.wait()
        self.exited_mono = time.monotonic()
        self.done.set()

    def tree(self) -> list[psutil.Process]:
        """The live process tree, remembering every member for `stop`."""
        root = self.seen.get(self.proc.pid)
        if root is None:
            return []
        try:
            children = root.children(recursive=True)
        except psutil.Error:
            children = []
        for child in children:
            self.seen.setdefault(child.pid, child)
        return [root, *children]

    def stop(self) -> None:
        """SIGTERM to the crawler (a graceful stop), then SIGKILL to every process left."""
        self.tree()
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.terminate()
            self.done.wait(STOP_GRACE_S)
        for proc in self.seen.values():
            with contextlib.suppress(psutil.Error):
                if proc.is_running():  # psutil also guards against a reused pid
                    proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        Watched.live.discard(self)


def process_label(proc: psutil.Process, crawler: str, root_pid: int) -> str:
    """A stable name for the RSS breakdown: the crawler, "tansu" for the broker, else argv0."""
    if proc.pid == root_pid:
        return crawler
    name = proc.name()
    if name.startswith("tansu"):
        return "tansu"
    with contextlib.suppress(psutil.Error):
        if "worker" in proc.cmdline()[-1:]:  # `python -m streams.cli worker`
            return f"{crawler} worker"
    return name


def stop_all_crawlers() -> None:
    for watched in list(Watched.live):
        watched.stop()


def run_watched(
    cmd: Sequence[str], stdout: Path, stderr: Path, timeout: float, label: str
) -> Measured:
    """Run cmd to completion (or timeout), sampling the RSS of its process tree."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("SEINE_CONFIG", None)  # the bench's settings come from its command line only
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy_before, own_before = system_busy(), own_cpu()
    watched = Watched(cmd, stdout, stderr, env)
    deadline = watched.launched_mono + timeout
    peak = 0
    peaks: dict[int, int] = defaultdict(int)  # pid -> max(sampled RSS, kernel high-water mark)
    names: dict[int, str] = {}
    cpu_seen: dict[int, float] = {}
    members: list[psutil.Process] = []
    next_scan = 0.0
    next_note = watched.launched_mono + 60.0
    timed_out = False
    try:
        while not watched.done.is_set():
            now = time.monotonic()
            if now > deadline:
                timed_out = True
                print(f"  {label}: timed out after {timeout:.0f} s, stopping it", flush=True)
                break
            if now >= next_scan:
                members = watched.tree()
                next_scan = now + CHILD_SCAN_S
            if now >= next_note:
                print(f"  {label}: still running ({now - watched.launched_mono:.0f} s)", flush=True)
                next_note = now + 60.0
            total = 0
            for proc in members:
                try:
                    rss = proc.memory_info().rss
                    times = proc.cpu_times()
                    cpu_seen[proc.pid] = times.user + times.system
                    if proc.pid not in names:
                        names[proc.pid] = process_label(proc, label, watched.proc.pid)
                except psutil.Error:
                    continue
                total += rss
                peaks[proc.pid] = max(peaks[proc.pid], rss, high_water_mark(proc.pid))
            peak = max(peak, total)
            watched.done.wait(POLL_S)
        busy_after, own_after = system_busy(), own_cpu()
    finally:
        watched.stop()  # stops it if still running; kills stragglers (an orphaned broker)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    by_label: dict[str, int] = defaultdict(int)
    for pid, value in peaks.items():
        by_label[names[pid]] += value
    cpu_by_label: dict[str, float] = defaultdict(float)
    for pid, seconds in cpu_seen.items():
        cpu_by_label[names.get(pid, "?")] += seconds
    exited_mono = watched.exited_mono or time.monotonic()
    wall = exited_mono - watched.launched_mono
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Measured(
        returncode=watched.proc.returncode,
        timed_out=timed_out,
        launched=watched.launched,
        exited=watched.launched + wall,
        wall_s=wall,
        cpu_s=cpu,
        peak_rss=peak,
        peak_rss_by_process=by_label,
        system_busy_s=busy_after - busy_before,
        bench_cpu_s=own_after - own_before,
        cpu_by_process=dict(cpu_by_label),
    )


# ---------------------------------------------------------------------------- the referee


@dataclass
class Check:
    """The server log's verdict on one crawl."""

    page_fetches: int = 0
    robots_fetches: int = 0
    first_request: float = 0.0
    last_request: float = 0.0
    missing: int = 0
    extra: int = 0
    robots_violations: int = 0
    duplicate_fetches: int = 0
    urls_fetched_twice_or_more: int = 0
    hosts_without_robots: int = 0
    repeated_robots_fetches: int = 0
    non_200: dict[str, int] = field(default_factory=dict)
    overlapping_requests: int = 0
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def crawl_s(self) -> float:
        return max(0.0, self.last_request - self.first_request)

    @property
    def exact(self) -> bool:
        return not (self.missing or self.extra or self.duplicate_fetches)


def referee(
    records: list[dict[str, Any]],
    web: DemoWeb,
    expected: set[str],
    disallowed: set[str],
    tolerance: float,
) -> Check:
    """Judge a crawl by the server's requests: every expected page once, nothing else."""
    check = Check()
    if not records:
        check.missing = len(expected)
        return check
    check.first_request = min(r["start"] for r in records)
    check.last_request = max(r["end"] for r in records)
    port = web.port
    pages: Counter[str] = Counter()
    robots: Counter[str] = Counter()
    statuses: Counter[str] = Counter()
    by_host: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in records:
        host = str(r["host"]).lower()
        by_host[host].append((r["start"], r["end"]))
        if r["status"] != 200:
            statuses[str(r["status"])] += 1
        if r["path"] == "/robots.txt":
            robots[host] += 1
        else:
            pages[f"http://{host}:{port}{r['path']}"] += 1
    fetched = set(pages)
    missing = expected - fetched
    extra = fetched - expected
    violations = {u for u in extra if u in disallowed or "/private/" in u}
    check.page_fetches = sum(pages.values())
    check.robots_fetches = sum(robots.values())
    check.missing = len(missing)
    check.extra = len(extra)
    check.robots_violations = len(violations)
    check.duplicate_fetches = sum(n - 1 for n in pages.values() if n > 1)
    check.urls_fetched_twice_or_more = sum(1 for n in pages.values() if n > 1)
    check.hosts_without_robots = len(set(web.hosts) - set(robots))
    check.repeated_robots_fetches = sum(n - 1 for n in robots.values() if n > 1)
    check.non_200 = dict(statuses)
    for spans in by_host.values():
        spans.sort()
        busy_until = spans[0][1]
        for start, end in spans[1:]:
            if start < busy_until - tolerance:
                check.overlapping_requests += 1
            busy_until = max(busy_until, end)
    check.examples = {
        "missing": sorted(missing)[:5],
        "extra": sorted(extra)[:5],
        "duplicates": sorted(u for u, n in pages.items() if n > 1)[:5],
    }
    return check


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
        """Last request to process exit: idle detection and shutdown."""
        if not self.check.last_request:
            return 0.0
        return max(0.0, self.measured.exited - self.check.last_request)

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
            "cpu_s": round(self.measured.cpu_s, 1),
            "server_cpu_s": round(self.server_cpu_s, 2),
            "peak_rss_mb": round(self.peak_rss_hwm / MB, 1),
            "peak_rss_sampled_sum_mb": round(self.measured.peak_rss / MB, 1),
            "peak_rss_mb_by_process": {
                k: round(v / MB, 1) for k, v in self.measured.peak_rss_by_process.items()
            },
            "cpu_s_by_process": {k: round(v, 1) for k, v in self.measured.cpu_by_process.items()},
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
        "--partitions",
        str(args.partitions),
        "--workers",
        str(args.workers),
        "--data-dir",
        str(data),
        "--log-level",
        "info",
    ]
    if args.named_hosts:
        for host, address in sorted(site.web.resolve_map(site.port).items()):
            cmd += ["--resolve", f"{host}={address}"]
    return cmd


#: The crawler names of the runs: Seine on each broker it can start, and Scrapy.
SEINE_ON = {"seine": "tansu", "seine-kafka": "kafka"}


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
    ]
    if args.named_hosts:
        cmd += ["--resolve-file", str(files["resolve"])]
    return cmd


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
        cmd = [*seine_command(args, site, files["seeds"], data), "--broker", SEINE_ON[crawler]]
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
    check = referee(window, site.web, expected, disallowed, site.time_resolution)

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


# ---------------------------------------------------------------------------- reporting


def fmt_mb(n: float) -> str:
    return f"{n / MB:,.0f} MB"


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
        f"{result.tail_s:.1f} s)\n"
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


def print_summary(results: list[Result], runs: int) -> dict[str, Any]:
    """Medians per crawler over successful runs, and the Seine / Scrapy ratios."""
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
    crawlers = [c for c in (*SEINE_ON, "scrapy") if by.get(c)]
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
        "broker; Scrapy only counts pages. Both: one request in flight per host, no delay,\n"
        "robots.txt obeyed.",
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


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bench/crawl_throughput.py",
        description="Crawl the synthetic web with Seine and with Scrapy; compare throughput, "
        "memory and correctness (judged from the server's request log).",
    )
    p.add_argument("--runs", type=int, default=1, help="runs per crawler (median reported)")
    p.add_argument("--hosts", type=int, default=200)
    p.add_argument("--pages", type=int, default=100, help="pages per host")
    p.add_argument("--seed", type=int, default=1, help="the web generator's seed")
    p.add_argument("--server", choices=("auto", "nginx", "python"), default="auto")
    p.add_argument("--only", choices=("seine", "scrapy"), help="run one crawler only")
    p.add_argument(
        "--broker",
        choices=("tansu", "kafka", "both"),
        default="tansu",
        help="the broker `seine crawl` starts (--broker): the embedded Tansu (default), a "
        "one-node Apache Kafka under the data dir, or both, one after the other",
    )
    p.add_argument(
        "--partitions",
        type=int,
        default=None,
        help="seine --partitions (default: one per worker; every extra partition splits "
        "each stage's batches into more, smaller messages)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="seine --workers: worker processes on one broker (default: one per core, at "
        "most --partitions)",
    )
    p.add_argument("--concurrency", type=int, default=64, help="Scrapy CONCURRENT_REQUESTS")
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
    if args.runs < 1 or args.hosts < 1 or args.pages < 1:
        p.error("--runs, --hosts and --pages must be >= 1")
    return args


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
    if args.workers is None:
        args.workers = max(1, min(os.cpu_count() or 1, args.partitions or 1 << 16))
    if args.partitions is None:
        args.partitions = args.workers
    seines = {"tansu": ["seine"], "kafka": ["seine-kafka"], "both": list(SEINE_ON)}
    crawlers = [*seines[args.broker], "scrapy"]
    if args.only:
        crawlers = [c for c in crawlers if c.startswith(args.only)]
    work = Path(tempfile.mkdtemp(prefix="seine-crawl-bench-"))
    site: Site | None = None
    results: list[Result] = []
    try:
        with terminate_on_signals():
            site = start_site(spec, args.server, work)
            web = site.web
            expected = web.reachable_allowed()
            disallowed = web.disallowed_linked()
            files = {
                "seeds": work / "seeds.txt",
                "hosts": work / "hosts.txt",
                "resolve": work / "resolve.json",
                "scrapy_stats": work / "scrapy-stats.json",
            }
            files["seeds"].write_text("\n".join(web.seeds()) + "\n", encoding="utf-8")
            files["hosts"].write_text("\n".join(web.all_host_names()) + "\n", encoding="utf-8")
            resolve = {h: web.address_of(h) for h in web.all_host_names()}
            files["resolve"].write_text(json.dumps(resolve), encoding="utf-8")
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
            print(
                f"seine: --partitions {args.partitions}, --workers {args.workers}, broker "
                f"started by the command ({args.broker}), default politeness | "
                f"scrapy: CONCURRENT_REQUESTS={args.concurrency}, per domain 1, no delay, "
                "robots.txt obeyed\n",
                flush=True,
            )
            for run in range(1, args.runs + 1):
                order = crawlers if run % 2 else list(reversed(crawlers))
                for crawler in order:
                    print(f"--- {crawler} run {run}/{args.runs} ...", flush=True)
                    result = crawl_once(crawler, run, args, site, files, expected, disallowed, work)
                    results.append(result)
                    print_result(result, len(expected))
            summary = print_summary(results, args.runs)
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
