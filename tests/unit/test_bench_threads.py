"""bench/threads.py: a worker's threads by kind, and their CPU read from /proc."""

from __future__ import annotations

import os
import time

from bench.threads import thread_cpu, thread_kind


def test_the_main_thread_is_the_event_loop() -> None:
    assert thread_kind(100, 100, "python3") == "event loop"
    assert thread_kind(100, 101, "python3") == "other threads"


def test_native_threads_are_told_by_their_names() -> None:
    assert thread_kind(100, 101, "rdk:broker111") == "librdkafka"
    assert thread_kind(100, 102, "rdk:main") == "librdkafka"
    assert thread_kind(100, 103, "rocksdb:high") == "RocksDB"
    assert thread_kind(100, 104, "merge_thread_0") == "tantivy"
    assert thread_kind(100, 105, "segment_updater") == "tantivy"
    assert thread_kind(100, 106, "libuv-worker") == "other threads"


def test_thread_cpu_reads_this_process_and_grows_with_work() -> None:
    pid = os.getpid()
    name, before = thread_cpu(pid)[pid]  # the main thread's id is the process id
    assert name
    deadline = time.monotonic() + 30.0
    total = 0
    # CPU is counted in clock ticks: work until the reading moves, within a deadline;
    # at least once, as a tick may land between the two readings before any work
    while True:
        total += sum(range(200_000))
        if thread_cpu(pid)[pid][1] > before or time.monotonic() >= deadline:
            break
    assert thread_cpu(pid)[pid][1] > before
    assert total > 0


def test_a_process_that_is_gone_has_no_threads() -> None:
    assert thread_cpu(2**22 + 1) == {}  # above Linux's pid_max limit
