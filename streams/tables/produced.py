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

import functools
from types import SimpleNamespace
from typing import Any, NamedTuple

import orjson
from faust.stores import rocksdb as faust_rocksdb
from faust.streams import current_event
from faust.tables.table import Table
from faust.utils import json as faust_json

from streams.tables.budget import budget

#: RocksDB options of the frontier's tables (`hosts`, `queue`), handed to Faust's
#: rocksdb store. Faust's defaults are sized for few large tables: 64 MB write
#: buffers (3 per database) and a 2 GB block cache *per partition database*. The
#: queue is written once and read once per URL, in key order, so small write
#: buffers and a small cache cost little speed and keep a worker's memory bounded
#: however many URLs are queued (bench/frontier.py measures both). In a worker every
#: table's store shares one cache and memtable budget instead (streams/tables/budget.py:
#: `block_cache_size` is then ignored and the write buffers are at most 4 MB).
FRONTIER_STORE_OPTIONS: dict[str, int] = {
    "write_buffer_size": 8 * 1024 * 1024,
    "max_write_buffer_number": 2,
    "block_cache_size": 16 * 1024 * 1024,
}


#: Values Faust's json codec encodes that the direct path encodes the same way.
_JSON_CONTAINERS = (dict, list)
#: What marks a JSON value Faust's autodetect would turn back into a model.
_MODEL_MARK = "__faust"
#: Faust's json codec ends in orjson (when it can import it): the write path then calls
#: orjson itself with the same options, so the same bytes, without the Python frame of
#: `faust.utils.json.dumps` (~0.3 µs a call, more than orjson's own work on a key). A
#: str key needs none of the options (they touch dict keys and dates).
_FAUST_ORJSON = faust_json.orjson is not None
_ON_DEFAULT = faust_json.on_default
_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_UTC_Z


class _Direct(NamedTuple):
    """What a table's fast paths may do (:meth:`ProducedTable._direct`).

    When keys (values) are JSON, a ``str`` key (a ``dict``/``list`` value) encodes
    with the very function Faust's json codec ends in (`faust.utils.json.dumps`) and
    decodes with orjson, giving Faust's bytes and values; anything else takes Faust's
    serializers. With Faust's RocksDB store, reads and writes go straight to the
    current event's partition database: what Faust's `_get`/`_set`/`_del` do there,
    less its key index (an LRU under a lock, ~2 µs a call, that only speeds up reads
    made outside an event, which then search every partition database). A write, a
    read and a pop cost 1/2 to 1/3 of Faust's path
    (docs/decisions/0014-produced-table-and-orjson.md).
    """

    #: Not windowed, global or partitioned by a partitioner: writes go to the event's partition.
    plain: bool
    rocksdb: bool
    json_keys: bool
    json_values: bool
    #: The changelog topic's name (Faust works it out on every send).
    topic: str


async def release_databases(store: faust_rocksdb.Store) -> None:
    """Faust's rocksdb `Store.stop` without its `gc.collect()`: a full collection
    per table (a worker has 13) took ~25 ms each on a dense crawl's heap, 0.3 s of a
    worker's stop. Dropping the databases closes them (nothing else holds them);
    `streams.app.run_worker` collects once when the worker has stopped."""
    store._dbs.clear()


class ProducedTable(Table):
    """A faust.Table whose changelog messages are produced by `app.seine_producer`."""

    def _new_store(self) -> Any:
        # Every RocksDB store of the worker shares one cache and memtable budget
        # (streams/tables/budget.py): a worker's memory no longer grows with its tables.
        store = super()._new_store()
        if isinstance(store, faust_rocksdb.Store):
            budget(store)
            store.stop = functools.partial(release_databases, store)  # type: ignore[method-assign]
        return store

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
            or not self._direct().plain
        ):
            return None
        topic = event.message.topic
        if topic not in self._verified_source_topics_for_partitions:
            self._verify_source_topic_partitions(topic)  # as partition_for_key does
        return event

    def _direct(self) -> _Direct:
        """What this table's fast paths may do, worked out once per table (Faust's
        serializer registry resolves the codecs again on every call)."""
        direct: _Direct | None = self.__dict__.get("_seine_direct")
        if direct is None:
            serializers: Any = self.app.serializers
            key_codec = serializers._serializer(
                self.key_type, self.key_serializer, serializers.key_serializer
            )
            value_codec = serializers._serializer(
                self.value_type, self.value_serializer, serializers.value_serializer
            )
            direct = _Direct(
                plain=not (self.use_partitioner or self.is_global or self._should_expire_keys()),
                rocksdb=type(self.data) is faust_rocksdb.Store,
                json_keys=key_codec == "json" and self.key_type in (None, str),
                json_values=value_codec == "json" and self.value_type is None,
                topic=self.changelog_topic.get_topic_name(),
            )
            self.__dict__["_seine_direct"] = direct
        return direct

    def _key_bytes(self, key: Any, json_keys: bool) -> bytes:
        if json_keys and type(key) is str:
            if _FAUST_ORJSON:
                return orjson.dumps(key)
            return faust_json.dumps(key)  # type: ignore[return-value]
        return self.data._encode_key(key)  # type: ignore[attr-defined,no-any-return]

    def _value_bytes(self, value: Any, json_values: bool) -> bytes | None:
        if json_values and type(value) in _JSON_CONTAINERS:
            if _FAUST_ORJSON:
                return orjson.dumps(value, default=_ON_DEFAULT, option=_OPTIONS)
            return faust_json.dumps(value)  # type: ignore[return-value]
        return self.data._encode_value(value)  # type: ignore[attr-defined,no-any-return]

    def _decode(self, raw: bytes) -> Any:
        if self._direct().json_values:
            try:
                value = orjson.loads(raw)
            except ValueError:
                pass  # Faust's path raises its own error
            else:
                # Faust's autodetect turns a dict naming a model back into the model
                if type(value) is not dict or _MODEL_MARK not in value:
                    return value
        return self.data._decode_value(raw)  # type: ignore[attr-defined]

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
        direct = self._direct()
        store: Any = self.data  # a faust SerializedStore (StoreT declares no _set)
        key_bytes = self._key_bytes(key, direct.json_keys)
        value_bytes = self._value_bytes(value, direct.json_values)
        partition = event.message.partition
        self.app.seine_producer.produce_changelog(  # type: ignore[attr-defined]
            direct.topic, key_bytes, value_bytes, partition
        )
        self._sensor_on_set(self, key, value)
        if direct.rocksdb:
            store._db_for_partition(partition).put(key_bytes, value_bytes)
        else:
            store._set(key_bytes, value_bytes)

    def __delitem__(self, key: Any) -> None:
        """Faust's delete (a tombstone, then the store) with the key serialized once."""
        event = self._fast()
        if event is None:
            super().__delitem__(key)
            return
        self._delete(event, key, self._key_bytes(key, self._direct().json_keys))

    def _delete(self, event: Any, key: Any, key_bytes: bytes) -> None:
        store: Any = self.data
        partition = event.message.partition
        direct = self._direct()
        self.app.seine_producer.produce_changelog(  # type: ignore[attr-defined]
            direct.topic, key_bytes, None, partition
        )
        self._sensor_on_del(self, key)
        if direct.rocksdb:
            # the key lives in the event's partition (every table write happens in
            # the partition of its key); Faust's _del looks it up in its key index
            store._db_for_partition(partition).delete(key_bytes)
        else:
            store._del(key_bytes)

    def __getitem__(self, key: Any) -> Any:
        """One RocksDB read: Faust's path asks the store whether it holds the key, then
        reads it (two reads and two key encodes for a hit, and an exception for a miss
        when the table has no default)."""
        raw = self._read(key)
        if raw is None:
            return self.__missing__(key)
        return self._decode(raw)

    def get(self, key: Any, default: Any = None) -> Any:
        if self.default is not None:  # a miss is the default factory's value, not `default`
            return super().get(key, default)
        raw = self._read(key)
        return default if raw is None else self._decode(raw)

    def pop(self, key: Any, *default: Any) -> Any:
        """One read and one delete, the key encoded once (MutableMapping's pop reads
        through ``__getitem__`` and deletes through ``__delitem__``: two encodes, and a
        KeyError raised and caught for a miss)."""
        event = self._fast() if self.default is None and len(default) <= 1 else None
        if event is None:
            return super().pop(key, *default)
        key_bytes = self._key_bytes(key, self._direct().json_keys)
        self._sensor_on_get(self, key)
        raw = self._get_bytes(event, key_bytes)
        if raw is None:
            if default:
                return default[0]
            raise KeyError(key)
        value = self._decode(raw)
        self._delete(event, key, key_bytes)
        return value

    def _read(self, key: Any) -> bytes | None:
        self._sensor_on_get(self, key)
        event = self._fast()
        if event is None:
            store: Any = self.data
            return store._get(store._encode_key(key))  # type: ignore[no-any-return]
        return self._get_bytes(event, self._key_bytes(key, self._direct().json_keys))

    def _get_bytes(self, event: Any, key_bytes: bytes) -> bytes | None:
        store: Any = self.data
        if self._direct().rocksdb:
            # Faust's _get while an event is current: the event's partition database
            value = store._db_for_partition(event.message.partition).get(key_bytes)
            return None if value is None else bytes(value)
        return store._get(key_bytes)  # type: ignore[no-any-return]

    def apply_persisted_offsets(self) -> None:
        """Recovery replays changelogs from their start (see the module docstring)."""
