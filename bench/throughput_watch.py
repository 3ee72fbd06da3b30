"""Running a crawler for bench/crawl_throughput.py: its process tree watched (RSS, CPU),
stopped on exit, and the rest of the machine's CPU use measured meanwhile."""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import psutil

from bench.threads import thread_cpu, thread_kind

ROOT = Path(__file__).resolve().parents[1]
POLL_S = 0.2  # RSS sampling period
CHILD_SCAN_S = 1.0  # how often the process tree is re-listed (cheaper than every poll)
THREAD_SCAN_S = 1.0  # how often the workers' threads' CPU is read
STOP_GRACE_S = 20.0  # SIGTERM first (Seine stops its broker), SIGKILL after this


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
    #: the workers' CPU seconds by kind of thread (`thread_kind`), at their last sample
    cpu_by_thread: dict[str, float] = field(default_factory=dict)


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
    threads_seen: dict[tuple[int, int], tuple[str, float]] = {}
    members: list[psutil.Process] = []
    next_scan = next_threads = 0.0
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
            if now >= next_threads:
                for proc in members:
                    if names.get(proc.pid, "").endswith(" worker"):
                        for tid, seen in thread_cpu(proc.pid).items():
                            threads_seen[(proc.pid, tid)] = seen
                next_threads = now + THREAD_SCAN_S
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
    cpu_by_thread: dict[str, float] = defaultdict(float)
    for (pid, tid), (name, seconds) in threads_seen.items():
        cpu_by_thread[thread_kind(pid, tid, name)] += seconds
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
        cpu_by_thread=dict(cpu_by_thread),
    )
