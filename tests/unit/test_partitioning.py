"""Unit tests for streams.core.partitioning: jump consistent hash over murmur3."""

from __future__ import annotations

from collections import Counter

import mmh3
import pytest

from streams.core.partitioning import jump_hash, key_hash, partition_for

HOSTS = [f"host{i}.example.{('com', 'org', 'net', 'de')[i % 4]}" for i in range(10_000)]


def reference_jump(key: int, buckets: int) -> int:
    """Lamping & Veach (2014), Figure 1, transcribed independently: a 64-bit LCG walk."""
    b, j = -1, 0
    while j < buckets:
        b = j
        key = (key * 2862933555777941757 + 1) % 2**64
        j = int((b + 1) * ((1 << 31) / ((key >> 33) + 1)))
    return b


# Published outputs of the paper's C++ code (ClickHouse's jumpConsistentHash test suite).
PUBLISHED = [
    (1, 1, 0),
    (42, 57, 43),
    (256, 1024, 520),
    (0xDEAD10CC, 1, 0),
    (0xDEAD10CC, 666, 361),
    (16045690984833335023, 255, 237),
]


@pytest.mark.parametrize(("key", "buckets", "expected"), PUBLISHED)
def test_jump_hash_published_values(key: int, buckets: int, expected: int) -> None:
    assert jump_hash(key, buckets) == expected


def test_jump_hash_matches_reference_implementation() -> None:
    keys = [*range(200), 2**63, 2**64 - 1, 0xDEADBEEFCAFEBABE]
    for key in keys:
        for buckets in (1, 2, 3, 7, 8, 9, 16, 100, 1000, 65536):
            assert jump_hash(key, buckets) == reference_jump(key, buckets), (key, buckets)


def test_jump_hash_treats_keys_as_uint64() -> None:
    assert jump_hash(-1, 1000) == jump_hash(2**64 - 1, 1000)
    assert jump_hash(2**64 + 5, 1000) == jump_hash(5, 1000)


def test_jump_hash_in_range() -> None:
    for key in range(0, 2**64, 2**64 // 997):
        for buckets in (1, 2, 5, 13, 64):
            assert 0 <= jump_hash(key, buckets) < buckets


@pytest.mark.parametrize("buckets", [0, -1, -100])
def test_non_positive_buckets_raise(buckets: int) -> None:
    with pytest.raises(ValueError, match="positive"):
        jump_hash(1, buckets)
    with pytest.raises(ValueError):
        partition_for("example.com", buckets)


def test_key_hash_is_murmur3_x64_first_half_unsigned() -> None:
    assert key_hash("example.com") == mmh3.hash64(b"example.com", signed=False)[0]
    assert key_hash("example.com") == key_hash(b"example.com")
    assert 0 <= key_hash("é.example") < 2**64
    assert key_hash("a.example") != key_hash("b.example")


def test_partition_for_is_stable_and_deterministic() -> None:
    first = [partition_for(h, 8) for h in HOSTS[:500]]
    assert first == [partition_for(h, 8) for h in HOSTS[:500]]
    assert first == [jump_hash(key_hash(h), 8) for h in HOSTS[:500]]
    # Pinned values: a change of hash, seed or algorithm would silently re-home every
    # host of a running crawl (its queue, robots rules and politeness clock).
    hosts = ("example.com", "wikipedia.org", "a", "b.example", "c.example", "d.example")
    assert [partition_for(h, 16) for h in hosts] == [1, 9, 15, 15, 9, 5]
    assert key_hash("example.com") == 5263683394119058897


def test_growing_from_8_to_9_partitions_moves_few_hosts_and_only_to_the_new_one() -> None:
    before = [partition_for(h, 8) for h in HOSTS]
    after = [partition_for(h, 9) for h in HOSTS]
    moved = [(b, a) for b, a in zip(before, after, strict=True) if b != a]
    assert len(moved) <= len(HOSTS) / 9 * 1.15
    assert len(moved) >= len(HOSTS) / 9 * 0.85  # and the new partition does get its share
    assert {a for _, a in moved} == {8}


def test_every_growth_step_only_moves_hosts_to_the_new_partition() -> None:
    previous = [partition_for(h, 1) for h in HOSTS[:2000]]
    for n in range(2, 33):
        current = [partition_for(h, n) for h in HOSTS[:2000]]
        assert all(c in (p, n - 1) for p, c in zip(previous, current, strict=True)), n
        previous = current


@pytest.mark.parametrize("buckets", [4, 8, 13])
def test_hosts_spread_evenly(buckets: int) -> None:
    counts = Counter(partition_for(h, buckets) for h in HOSTS)
    assert set(counts) == set(range(buckets))
    expected = len(HOSTS) / buckets
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    # 99.9th percentile of chi-square with ≤ 12 degrees of freedom is < 33.
    assert chi2 < 33, counts


def test_one_owner_per_host_whatever_form_it_comes_in() -> None:
    import topology

    forms = [
        "example.com",
        "Example.COM",
        "www.example.com",
        "example.com:8080",
        "WWW.Example.com:443",
    ]
    assert len({topology.host_partition(form, 16) for form in forms}) == 1
    urls = ["http://example.com/a", "https://www.example.com:8443/b?c", "HTTP://EXAMPLE.com"]
    assert {topology.url_partition(url, 16) for url in urls} == {
        topology.host_partition("example.com", 16)
    }


def test_an_ipv6_authority_keeps_its_address() -> None:
    import topology

    # the port goes, the colons of the address stay: "[::1]:8080" is the host "[::1]"
    assert topology.host_partition("[::1]:8080", 64) == topology.host_partition("[::1]", 64)
    assert topology.url_partition("http://[::1]:8080/x", 64) == topology.host_partition("[::1]", 64)
    differ = [
        h
        for h in ("[::2]", "[::3]", "[::4]", "[::5]")
        if topology.host_partition(h, 64) != topology.host_partition("[::1]", 64)
    ]
    assert differ  # not everything lands in one place
