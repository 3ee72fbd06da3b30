"""Count the record batches in an Apache Kafka node's log segments, per topic: plain,
transactional, and control (transaction markers).

Run (from the repo root) over a node's directory, e.g. one kept by bench/faults.py::

    .venv/bin/python bench/kafka_batches.py DIR/worker/kafka/node-1

It reads the segment files themselves (record batch format v2: the attributes'
bit 4 marks a transactional batch, bit 5 a control batch), so it needs neither a
running broker nor Kafka's own tools. docs/decisions/0028 uses it to show which
messages Faust's exactly-once transactions hold.
"""

from __future__ import annotations

import argparse
import collections
import struct
from collections.abc import Iterator
from pathlib import Path

#: record batch v2 header: base offset, length, leader epoch, magic, crc, attributes
_HEADER = struct.Struct(">qiibIh")
_TRANSACTIONAL, _CONTROL = 0x10, 0x20


def batches(segment: Path) -> Iterator[tuple[int, int]]:
    """(attributes, record count) of each v2 batch in one segment file."""
    data = segment.read_bytes()
    pos = 0
    while pos + 61 <= len(data):
        _, length, _, magic, _, attributes = _HEADER.unpack_from(data, pos)
        if length <= 0 or magic != 2:
            break
        (count,) = struct.unpack_from(">i", data, pos + 57)
        yield attributes, count
        pos += 12 + length


def count(node_dir: Path) -> dict[str, collections.Counter[str]]:
    """Per topic: batches and records of each kind."""
    stats: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for segment in sorted(node_dir.rglob("*.log")):
        topic, _, partition = segment.parent.name.rpartition("-")
        if not topic or not partition.isdigit():
            continue  # not a topic-partition directory (the node's own logs)
        for attributes, records in batches(segment):
            kind = (
                "control"
                if attributes & _CONTROL
                else "transactional"
                if attributes & _TRANSACTIONAL
                else "plain"
            )
            stats[topic][f"{kind} batches"] += 1
            stats[topic][f"{kind} records"] += records
    return stats


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("node_dir", type=Path, help="a Kafka node's directory (its log dirs)")
    args = parser.parse_args()
    stats = count(args.node_dir)
    if not stats:
        print(f"kafka_batches: no topic segments under {args.node_dir}")
        return 2
    for topic, counter in sorted(stats.items()):
        print(f"{topic}: " + ", ".join(f"{v} {k}" for k, v in sorted(counter.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
