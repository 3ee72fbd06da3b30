"""streams/core/allocator.py: the worker's arena cap and malloc_trim (glibc only)."""

from __future__ import annotations

from streams.core import allocator


def test_zero_arenas_keeps_glibcs_default() -> None:
    assert allocator.limit_arenas(0) is False


def test_arenas_are_capped_where_malloc_is_glibcs() -> None:
    assert allocator.limit_arenas(8) is (allocator._glibc() is not None)


def test_trim_hands_free_pages_back_and_says_how_long_it_took() -> None:
    junk = [bytearray(1 << 16) for _ in range(256)]  # 16 MB from malloc, then freed
    del junk
    took = allocator.trim()
    assert took >= 0.0
    assert (took > 0.0) is (allocator._glibc() is not None)
