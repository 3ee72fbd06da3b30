"""The worker's malloc tuning: big temporaries stop faulting their pages in afresh."""

from __future__ import annotations

import platform
import resource

import numpy as np
import pytest

from streams.core.allocator import tune_malloc


def _faults_per_round(rounds: int = 20) -> float:
    """Minor page faults of a simhash-like round: a dozen ~400 KB arrays made and freed."""

    def one() -> None:
        a = np.ones(50_000, dtype=np.uint64)
        for _ in range(12):
            a = (a * np.uint64(3)) ^ (a >> np.uint64(7))
        del a

    one()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(rounds):
        one()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / rounds


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_tuned_malloc_keeps_big_temporaries_mapped() -> None:
    assert tune_malloc()
    # Untuned, each round faults ~100 pages in (each array is ~100 pages, mmapped anew).
    assert _faults_per_round() < 5
