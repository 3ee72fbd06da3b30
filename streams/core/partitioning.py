"""Consistent hashing of hosts onto partitions.

Every host-scoped topic is partitioned by the host's *site key* through jump
consistent hash over a 64-bit murmur hash. Jump hash moves only ~1/n of the keys
when the partition count grows from n to n+1, so adding partitions to a running
cluster re-homes few hosts (and with them their queues, robots rules and
politeness clocks). The producer always chooses the partition explicitly; Kafka's
default partitioner is never relied upon.
"""

from __future__ import annotations

import mmh3

_MASK64 = 0xFFFFFFFFFFFFFFFF


def jump_hash(key: int, buckets: int) -> int:
    """Lamping & Veach's jump consistent hash: key (uint64) → bucket in [0, buckets)."""
    if buckets <= 0:
        raise ValueError(f"buckets must be positive, got {buckets}")
    key &= _MASK64
    bucket, jump = -1, 0
    while jump < buckets:
        bucket = jump
        key = (key * 2862933555777941757 + 1) & _MASK64
        jump = int((bucket + 1) * (float(1 << 31) / float((key >> 33) + 1)))
    return bucket


def key_hash(key: str | bytes) -> int:
    """Unsigned 64-bit murmur3 hash of a key (the first half of mmh3's x64 128-bit hash)."""
    data = key.encode("utf-8", "surrogatepass") if isinstance(key, str) else key
    return mmh3.hash64(data, signed=False)[0]


def partition_for(key: str | bytes, partitions: int) -> int:
    """The partition that owns `key` (a site key or a content fingerprint)."""
    return jump_hash(key_hash(key), partitions)
