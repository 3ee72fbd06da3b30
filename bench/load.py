"""Benchmark: a long crawl's memory and its throughput at the end against the start.

Run (from the repo root; the ``bench`` extra provides psutil)::

    .venv/bin/python bench/load.py                          # 1,000 hosts x 100 pages
    .venv/bin/python bench/load.py --hosts 100 --pages 50   # a short run of the same shape
    .venv/bin/python bench/load.py --broker kafka           # on Apache Kafka (disk)

One ``seine crawl --until-idle`` (the broker it starts: Tansu in memory, or
``--broker kafka``, a one-node Apache Kafka under the data dir) crawls the demo web
served by the Python demo server with pre-rendered responses. Recorded:

* **memory**: the seine process tree (worker + its broker: Tansu, or Kafka's JVM)
  polled with psutil every 0.5 s: the peak of the simultaneous sum, the sum of each
  process's kernel high-water mark (VmHWM), which no poll can miss, and the worker's
  RSS at each tenth of the run. Goals: the tree under 1.5 GB, and the worker flat: its
  peak over the second half of the run within 10% of its peak over the second quarter.
* **pages/s early vs late**, two ways:
  - *stored* (the pipeline's rate, what a user waits on): from the crawl's progress
    lines, the time it took to store the 2nd tenth of the pages against the 9th
    (the first and last tenths are start-up and the tail of the slowest hosts).
    Goal: the 9th within 20% of the 2nd.
  - *fetched*, from the server's request log (the referee): the page requests in
    order, the first and the last 10% of them. Fetching runs ahead of storing, so the
    last tenth of the requests waits on links the stages have not extracted yet.
* the load average before and after, since this machine is shared.

Bounded by ``--timeout`` (40 min by default); the crawl is stopped on exit.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from streams.demo.server import read_request_log, start_server_process  # noqa: E402
from streams.demo.webgen import WebSpec  # noqa: E402

try:
    import psutil
except ImportError:  # pragma: no cover
    sys.exit("bench/load.py needs psutil: .venv/bin/pip install -e '.[bench]'")


def high_water_mark(pid: int) -> int:
    """Linux VmHWM of a process in bytes (0 where unavailable)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_bytes().splitlines():
            if line.startswith(b"VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _role(cmdline: list[str]) -> str:
    """A short name for a process of the crawl's tree."""
    text = " ".join(cmdline)
    if "tansu" in text:
        return "tansu"
    if "kafka.Kafka" in text:
        return "kafka"
    if "streams.cli" in text or "seine" in text:
        return "seine"
    return cmdline[0].rsplit("/", 1)[-1] if cmdline else "?"


def _host_and_path(url: str) -> tuple[str, str]:
    """(host, path?query) of a URL, as the server's request log records a request."""
    parts = urlsplit(url)
    return (parts.hostname or "", (parts.path or "/") + (f"?{parts.query}" if parts.query else ""))


def tenths(requests: list[dict[str, Any]]) -> tuple[float, float]:
    """pages/s of the first and of the last tenth of the page requests."""
    starts = sorted(r["start"] for r in requests)
    n = max(2, len(starts) // 10)

    def rate(chunk: list[float]) -> float:
        return len(chunk) / max(chunk[-1] - chunk[0], 1e-6)

    return rate(starts[:n]), rate(starts[-n:])


@dataclass
class Memory:
    """What sampling the crawl's process tree (every 0.5 s) saw."""

    #: per pid, the kernel's high-water mark of its RSS (VmHWM)
    hwm: dict[int, int] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)
    peak_sum: int = 0
    #: (seconds since the start, RSS summed over the tree, the worker's RSS)
    samples: list[tuple[float, int, int]] = field(default_factory=list)
    #: (seconds since the start, pages stored), from the crawl's progress lines
    stored: list[tuple[float, int]] = field(default_factory=list)


_STORED = re.compile(rb"pages (\d+)  fetched")


def last_stored(out: Path) -> int | None:
    """Pages stored, as the crawl's last progress line in `out` says."""
    with contextlib.suppress(OSError), out.open("rb") as f:
        f.seek(max(0, out.stat().st_size - 4096))
        found = _STORED.findall(f.read())
        if found:
            return int(found[-1])
    return None


def watch(proc: subprocess.Popen[bytes], out: Path, started: float, timeout: float) -> Memory:
    """Sample the crawl's process tree until it exits (SIGINT after `timeout` s); the
    crawl is killed if it still runs when this returns."""
    seen: dict[int, psutil.Process] = {}
    memory = Memory()
    hwm, names = memory.hwm, memory.names
    try:
        while proc.poll() is None:
            now = time.monotonic() - started
            if now > timeout:
                print("load: timeout; stopping the crawl", flush=True)
                proc.send_signal(signal.SIGINT)
                proc.wait(120)
                break
            with contextlib.suppress(psutil.Error):
                root = psutil.Process(proc.pid)
                for p in [root, *root.children(recursive=True)]:
                    if p.pid not in seen:
                        seen[p.pid] = p
                        with contextlib.suppress(psutil.Error):
                            names[p.pid] = _role(p.cmdline())
            total = worker = 0
            for pid, p in list(seen.items()):
                with contextlib.suppress(psutil.Error):
                    rss = p.memory_info().rss
                    total += rss
                    worker = rss if pid == proc.pid else worker
                    hwm[pid] = max(hwm.get(pid, 0), high_water_mark(pid))
            memory.peak_sum = max(memory.peak_sum, total)
            memory.samples.append((now, total, worker))
            stored = last_stored(out)
            if stored is not None:
                memory.stored.append((now, stored))
            time.sleep(0.5)  # the sampling interval
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return memory


def by_tenth(samples: list[tuple[float, int, int]], column: int) -> list[int]:
    """MB of one column of the samples at the end of each tenth of the run."""
    if not samples:
        return []
    end = samples[-1][0]
    picks = []
    for k in range(1, 11):
        at = [s for s in samples if s[0] <= end * k / 10]
        picks.append(round((at[-1] if at else samples[0])[column] / 2**20))
    return picks


def worker_flat(memory: Memory) -> tuple[int, int]:
    """(peak MB of the worker over the 2nd quarter of the crawl, over its second half);
    the crawl runs from its first stored page (the broker's start-up excluded) to exit."""
    samples = memory.samples
    start = next((t for t, n in memory.stored if n > 0), 0.0)
    end = samples[-1][0] if samples else 0.0
    quarter = (end - start) / 4
    second_quarter = [s[2] for s in samples if start + quarter < s[0] <= start + 2 * quarter]
    second_half = [s[2] for s in samples if s[0] > start + 2 * quarter]
    return round(max(second_quarter, default=0) / 2**20), round(max(second_half, default=0) / 2**20)


def stored_tenths(stored: list[tuple[float, int]]) -> tuple[float, float]:
    """pages/s storing the 2nd tenth of the pages, and the 9th (progress lines come every
    few seconds: the time a count was reached is interpolated between two lines)."""
    if not stored or stored[-1][1] < 10:
        return 0.0, 0.0
    final = stored[-1][1]

    def reached(pages: float) -> float:
        before = (0.0, 0)
        for t, n in stored:
            if n >= pages:
                t0, n0 = before
                return t0 + (t - t0) * (pages - n0) / max(n - n0, 1)
            before = (t, n)
        return stored[-1][0]

    def rate(lo: float, hi: float) -> float:
        return (hi - lo) * final / max(reached(hi * final) - reached(lo * final), 1e-6)

    return rate(0.1, 0.2), rate(0.8, 0.9)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--pages", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=2400.0)
    parser.add_argument("--keep", help="keep the data dir here")
    parser.add_argument(
        "--broker",
        choices=("tansu", "kafka"),
        default="tansu",
        help="the broker seine crawl starts (seine crawl --broker)",
    )
    args = parser.parse_args()
    load_before = os.getloadavg()
    spec = WebSpec(hosts=args.hosts, pages_per_host=args.pages, seed=7)
    with tempfile.TemporaryDirectory(prefix="seine-load-") as tmp:
        work = Path(tmp)
        log = work / "requests.jsonl"
        data = Path(args.keep) if args.keep else work / "data"
        server = start_server_process(spec, log, work / "web", prerender=True, timeout=600)
        try:
            reachable = server.web.reachable_allowed()
            expected = len(reachable)
            seeds = work / "seeds.txt"
            seeds.write_text("\n".join(server.seeds) + "\n")
            cmd = [sys.executable, "-m", "streams.cli", "crawl", "--seeds-file", str(seeds)]
            cmd += ["--data-dir", str(data), "--partitions", str(args.partitions)]
            cmd += ["--allow-private", "--until-idle", "--broker", args.broker]
            for host, addr in server.resolve.items():
                cmd += ["--resolve", f"{host}={addr}"]
            print(
                f"load: {args.hosts} hosts x {args.pages} pages ({expected} reachable); "
                f"load average {load_before[0]:.1f}",
                flush=True,
            )
            started = time.monotonic()
            proc = subprocess.Popen(
                cmd,
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=open(work / "seine.out", "w"),  # noqa: SIM115
                stderr=subprocess.STDOUT,
            )
            memory = watch(proc, work / "seine.out", started, args.timeout)
            wall = time.monotonic() - started
        finally:
            server.stop()
        pages = [r for r in read_request_log(log) if r["path"] != "/robots.txt"]
        first, last = tenths(pages)
        early, late = stored_tenths(memory.stored)
        flat_before, flat_after = worker_flat(memory)
        requested = {(r["host"].split(":")[0].lower(), r["path"]) for r in pages}
        missing = sorted(u for u in reachable if _host_and_path(u) not in requested)
        report = {
            "hosts": args.hosts,
            "broker": args.broker,
            "pages_per_host": args.pages,
            "reachable": expected,
            "fetched": len(pages),
            "unique_fetched": len({(r["host"], r["path"]) for r in pages}),
            "reachable_never_requested": len(missing),
            "never_requested_sample": missing[:20],
            "wall_s": round(wall, 1),
            "exit_code": proc.returncode,
            "peak_rss_sum_sampled_mb": round(memory.peak_sum / 2**20),
            "peak_rss_sum_of_vmhwm_mb": round(sum(memory.hwm.values()) / 2**20),
            "vmhwm_mb_by_process": {
                f"{memory.names.get(pid, '?')}[{pid}]": round(v / 2**20)
                for pid, v in memory.hwm.items()
            },
            "rss_mb_by_tenth": by_tenth(memory.samples, 1),
            "worker_rss_mb_by_tenth": by_tenth(memory.samples, 2),
            "worker_peak_mb_2nd_quarter_vs_2nd_half": [flat_before, flat_after],
            "stored_per_s_2nd_vs_9th_tenth": [round(early, 1), round(late, 1)],
            "stored_late_vs_early": round(late / early, 3) if early else None,
            "fetched_per_s_first_tenth": round(first, 1),
            "fetched_per_s_last_tenth": round(last, 1),
            "load_average_before_after": [round(load_before[0], 1), round(os.getloadavg()[0], 1)],
        }
        print(json.dumps(report, indent=1))
        print((work / "seine.out").read_text()[-600:])
        goals = {
            "tree under 1.5 GB": report["peak_rss_sum_of_vmhwm_mb"] < 1536,
            "worker flat (2nd half within 10% of 2nd quarter)": flat_after <= 1.1 * flat_before,
            "stored pages/s late within 20% of early": late >= 0.8 * early > 0,
        }
        for goal, met in goals.items():
            print(f"load: {goal}: {'met' if met else 'NOT met'}")
        ok = all(goals.values())
        return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
