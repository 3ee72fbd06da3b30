"""glibc malloc tuned for a crawl worker: big temporaries reuse heap pages.

Why: parse's numpy work (the simhash of a batch of ~50 pages) allocates and frees a
dozen arrays of 100-500 KB per batch. glibc's defaults give such blocks their own
mmap, or trim the top of the heap once ~2x the largest freed block is free, so every
batch faulted its arrays' pages in afresh: ~1,250 page faults per batch, more than
half of the simhash's CPU (measured with a batch of 50 bench pages: 99 -> 38 µs a
page for the word hashes). A fixed mmap threshold above those sizes, and a trim
threshold above the heap's churn, keep the pages mapped; the price is at most the trim
threshold of freed heap kept by the process.

A long crawl frees much more than that, and not at the top of the heap: RocksDB's
memtables and librdkafka's buffers, allocated by their own threads, each of which
glibc gives an arena of its own (up to 8 per core). On `bench/load.py --broker kafka
--hosts 300 --pages 100` glibc held 150-330 MB free beside 50-250 MB in use, and the
worker's RSS kept it. So a worker also caps the arenas (`limit_arenas`) and hands
free pages back to the kernel on a timer (`trim`, malloc_trim(0)).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
import time
from typing import Any

#: mallopt parameters (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
#: Blocks below this come from the heap (glibc's default starts at 128 KiB).
MMAP_THRESHOLD = 4 << 20
#: Free memory at the top of the heap kept before it is given back to the OS.
TRIM_THRESHOLD = 32 << 20


_libc: Any = None
_loaded = False


def _glibc() -> Any:
    """glibc with mallopt and malloc_trim typed, or None where malloc is not glibc's."""
    global _libc, _loaded
    if not _loaded:
        _loaded = True
        if platform.libc_ver()[0] == "glibc":
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
                libc.mallopt.restype = ctypes.c_int
                libc.malloc_trim.argtypes = [ctypes.c_size_t]
                _libc = libc
            except (OSError, AttributeError):
                _libc = None
    return _libc


def tune_malloc(mmap_threshold: int = MMAP_THRESHOLD, trim_threshold: int = TRIM_THRESHOLD) -> bool:
    """Set glibc's mmap and trim thresholds for this process; False where there is no
    glibc (then nothing changes)."""
    libc = _glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) and bool(
        libc.mallopt(_M_TRIM_THRESHOLD, trim_threshold)
    )


def limit_arenas(arenas: int) -> bool:
    """Cap malloc's arenas at `arenas` (0 leaves glibc's default). It holds for the
    threads that first allocate after it: call it before the worker starts threads.
    True when it was set."""
    libc = _glibc()
    if arenas <= 0 or libc is None:
        return False
    return bool(libc.mallopt(_M_ARENA_MAX, arenas))


def trim() -> float:
    """Hand malloc's free pages back to the kernel; the seconds it took (0 without
    glibc). It walks every arena: ~30 ms at a few hundred MB, so run it off the
    event loop (ctypes lets go of the GIL)."""
    libc = _glibc()
    if libc is None:
        return 0.0
    started = time.perf_counter()
    libc.malloc_trim(0)
    return time.perf_counter() - started
