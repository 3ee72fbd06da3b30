"""glibc malloc tuned for a crawl worker: big temporaries reuse heap pages.

Why: parse's numpy work (the simhash of a batch of ~50 pages) allocates and frees a
dozen arrays of 100-500 KB per batch. glibc's defaults give such blocks their own
mmap, or trim the top of the heap once ~2x the largest freed block is free, so every
batch faulted its arrays' pages in afresh: ~1,250 page faults per batch, more than
half of the simhash's CPU (measured with a batch of 50 bench pages: 99 -> 38 µs a
page for the word hashes). A fixed mmap threshold above those sizes, and a trim
threshold above the heap's churn, keep the pages mapped; the price is at most the trim
threshold of freed heap kept by the process.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

#: mallopt parameters (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: Blocks below this come from the heap (glibc's default starts at 128 KiB).
MMAP_THRESHOLD = 4 << 20
#: Free memory at the top of the heap kept before it is given back to the OS.
TRIM_THRESHOLD = 32 << 20


def tune_malloc(mmap_threshold: int = MMAP_THRESHOLD, trim_threshold: int = TRIM_THRESHOLD) -> bool:
    """Set glibc's mmap and trim thresholds for this process; False where there is no
    glibc (then nothing changes)."""
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) and bool(
        mallopt(_M_TRIM_THRESHOLD, trim_threshold)
    )
