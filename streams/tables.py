"""Faust tables whose changelog goes out through the stages' confluent-kafka producer.

A Faust table write costs a RocksDB put plus a changelog message; the message
goes through Faust's ProducerBuffer and aiokafka's accumulator in Python on the
event loop, which profiling showed to be the largest single cost of the crawl
(~8 changelog messages a page). `ProducedTable` keeps everything else of a Faust
table — the RocksDB store, the changelog topic, recovery and standbys, the
partition of the current event — and hands only the send to librdkafka, which
batches it in C threads. The key and value are serialized exactly as Faust would,
so Faust's own recovery reads these changelogs unchanged.

The persisted offset (where Faust's recovery would resume reading a changelog)
is deliberately not advanced from delivery reports: with the embedded broker,
delivery-report offsets were seen running ahead of the topic's highwater (a
persisted 94 against a highwater of 90), and Faust then refuses to start
("persisted offset higher than highwater"). Without it, recovery replays a
partition's changelog from the start onto the local RocksDB — idempotent, since
each record is the key's whole value — which is correct, and on Kafka with
compacted changelogs costs one pass over the live keys.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from faust.tables.table import Table

#: RocksDB options of the frontier's tables (`hosts`, `queue`), handed to Faust's
#: rocksdb store. Faust's defaults are sized for few large tables: 64 MB write
#: buffers (3 per database) and a 2 GB block cache *per partition database*. The
#: queue is written once and read once per URL, in key order, so small write
#: buffers and a small cache cost little speed and keep a worker's memory bounded
#: however many URLs are queued (bench/frontier.py measures both).
FRONTIER_STORE_OPTIONS: dict[str, int] = {
    "write_buffer_size": 8 * 1024 * 1024,
    "max_write_buffer_number": 2,
    "block_cache_size": 16 * 1024 * 1024,
}


class ProducedTable(Table):
    """A faust.Table whose changelog messages are produced by `app.seine_producer`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._delivered: dict[int, int] = {}

    def send_changelog(
        self,
        partition: int | None,
        key: Any,
        value: Any,
        key_serializer: Any = None,
        value_serializer: Any = None,
    ) -> Any:
        producer = getattr(self.app, "seine_producer", None)
        if producer is None or partition is None:
            return super().send_changelog(partition, key, value, key_serializer, value_serializer)
        serializers = self.app.serializers
        key_bytes = serializers.dumps_key(
            self.key_type, key, serializer=key_serializer or self.key_serializer
        )
        value_bytes = (
            None
            if value is None
            else serializers.dumps_value(
                self.value_type, value, serializer=value_serializer or self.value_serializer
            )
        )
        producer.produce_changelog(
            self.changelog_topic.get_topic_name(),
            key_bytes,
            value_bytes,
            partition,
            self._record_delivery,
        )
        # Table.on_key_set/on_key_del read only `.message.partition` of the result.
        return SimpleNamespace(message=SimpleNamespace(partition=partition))

    def _record_delivery(self, partition: int, offset: int) -> None:
        # May run on a flush thread: only record. Kept for diagnostics (see the
        # module docstring for why it is not written as Faust's persisted offset).
        if offset > self._delivered.get(partition, -1):
            self._delivered[partition] = offset

    def apply_persisted_offsets(self) -> None:
        """Forget delivered offsets; recovery replays changelogs from their start."""
        self._delivered.clear()
