"""bench/kafka_batches.py reads Kafka's record batch v2 headers off segment files."""

from __future__ import annotations

import struct
from pathlib import Path

from bench.kafka_batches import count


def _batch(attributes: int, records: int, body: bytes = b"x" * 10) -> bytes:
    # after the length field: leader epoch, magic, crc, attributes, last offset delta,
    # first and max timestamps, producer id and epoch, base sequence, record count
    rest = struct.pack(">ibIhiqqqhii", 0, 2, 0, attributes, records - 1, 0, 0, 7, 0, 0, records)
    rest += body
    return struct.pack(">qi", 0, len(rest)) + rest


def test_counts_each_kind_per_topic(tmp_path: Path) -> None:
    part = tmp_path / "app.frontier-3"
    part.mkdir()
    (part / "00000000000000000000.log").write_bytes(
        _batch(0, 3) + _batch(0x10, 2) + _batch(0x30, 1) + b"\0" * 20
    )
    (tmp_path / "server.log").write_text("not a segment")  # the node's own log: skipped
    stats = count(tmp_path)
    assert dict(stats["app.frontier"]) == {
        "plain batches": 1,
        "plain records": 3,
        "transactional batches": 1,
        "transactional records": 2,
        "control batches": 1,
        "control records": 1,
    }
    assert list(stats) == ["app.frontier"]
