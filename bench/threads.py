"""A process's threads and their CPU, for bench/crawl_throughput.py: which kind of
thread of a worker spends its CPU (the event loop, librdkafka, RocksDB, tantivy, the
rest). Linux /proc only; the standard library only, so the unit tests import it."""

from __future__ import annotations

import os
from pathlib import Path

#: Thread names (/proc/PID/task/TID/comm) of the native libraries a worker runs.
THREAD_KINDS = (
    ("rdk:", "librdkafka"),
    ("rocksdb:", "RocksDB"),
    ("merge_thread", "tantivy"),
    ("segment_updater", "tantivy"),
    ("thrd-tantivy", "tantivy"),
    ("thread-tantivy", "tantivy"),
)
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def thread_kind(pid: int, tid: int, name: str) -> str:
    """What runs on a worker's thread: the main thread runs the event loop (every
    stage); librdkafka, RocksDB and tantivy name their threads; the rest are Python's
    (Faust's consumer thread, the delivery waits' executor) and the event loop's
    helpers, all under the interpreter's name."""
    if tid == pid:
        return "event loop"
    for prefix, kind in THREAD_KINDS:
        if name.startswith(prefix):
            return kind
    return "other threads"


def thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """Each live thread of a process: its name and user+system CPU seconds so far."""
    found: dict[int, tuple[str, float]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_bytes()
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text(errors="replace").strip()
        except OSError:
            continue  # the thread ended meanwhile
        # after the ")" closing the name: state is field 3, utime 14, stime 15
        fields = stat[stat.rfind(b")") + 2 :].split()
        found[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / _CLK_TCK)
    return found
