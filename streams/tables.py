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
is deliberately not advanced from delivery reports (changelog records ask for none;
a failed delivery is logged and counted by the producer): with the embedded broker,
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

from faust.streams import current_event
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
        )
        # Table.on_key_set/on_key_del read only `.message.partition` of the result.
        return SimpleNamespace(message=SimpleNamespace(partition=partition))

    def _fast(self) -> Any:
        """The current event while the fast paths below apply (a plain, not windowed,
        not global table written through `seine_producer` while handling an event,
        keys partitioned by the event); None sends a call down Faust's own path."""
        event = current_event()
        if (
            event is None
            or getattr(self.app, "seine_producer", None) is None
            or self.use_partitioner
            or self.is_global
            or self._should_expire_keys()
        ):
            return None
        self._verify_source_topic_partitions(event.message.topic)  # as partition_for_key does
        return event

    def __setitem__(self, key: Any, value: Any) -> None:
        """Faust's write (changelog record to the current event's partition, then the
        store), with the key and value serialized once instead of twice: Faust's
        ``on_key_set`` serializes them for the changelog and the store again for
        RocksDB, with the same serializers, so the bytes are the same. Table writes
        and reads were the crawl's largest Python cost after the codec (BENCHMARKS.md)."""
        event = self._fast()
        if event is None:
            super().__setitem__(key, value)
            return
        store: Any = self.data  # a faust SerializedStore (StoreT declares no _set)
        key_bytes = store._encode_key(key)
        value_bytes = store._encode_value(value)
        self.app.seine_producer.produce_changelog(  # type: ignore[attr-defined]
            self.changelog_topic.get_topic_name(), key_bytes, value_bytes, event.message.partition
        )
        self._sensor_on_set(self, key, value)
        store._set(key_bytes, value_bytes)

    def __delitem__(self, key: Any) -> None:
        """Faust's delete (a tombstone, then the store) with the key serialized once."""
        event = self._fast()
        if event is None:
            super().__delitem__(key)
            return
        store: Any = self.data
        key_bytes = store._encode_key(key)
        self.app.seine_producer.produce_changelog(  # type: ignore[attr-defined]
            self.changelog_topic.get_topic_name(), key_bytes, None, event.message.partition
        )
        self._sensor_on_del(self, key)
        store._del(key_bytes)

    def __getitem__(self, key: Any) -> Any:
        """One RocksDB read: Faust's path asks the store whether it holds the key, then
        reads it (two reads and two key encodes for a hit, and an exception for a miss
        when the table has no default)."""
        raw = self._read(key)
        if raw is None:
            return self.__missing__(key)
        return self.data._decode_value(raw)  # type: ignore[attr-defined]

    def get(self, key: Any, default: Any = None) -> Any:
        if self.default is not None:  # a miss is the default factory's value, not `default`
            return super().get(key, default)
        raw = self._read(key)
        return default if raw is None else self.data._decode_value(raw)  # type: ignore[attr-defined]

    def _read(self, key: Any) -> bytes | None:
        self._sensor_on_get(self, key)
        store: Any = self.data
        return store._get(store._encode_key(key))  # type: ignore[no-any-return]

    def apply_persisted_offsets(self) -> None:
        """Recovery replays changelogs from their start (see the module docstring)."""
