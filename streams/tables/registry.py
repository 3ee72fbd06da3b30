"""url-seen's exact store: the URL registry layout inside a Faust table.

Why a custom Faust store
------------------------
url-seen must answer "was this URL ever accepted?" exactly, for every URL the crawl
meets, and keep the answer across crashes, restarts and rebalances. A plain Faust
table keyed by the URL string did that at a cost per URL: a JSON key, a RocksDB put
and a changelog message each. This module keeps what Faust does well — one RocksDB
database per partition, assigned with the partition, recovered from a compacted
changelog topic before the partition's stream resumes, standbys fed from it — and
changes what is stored and what goes to the changelog:

* **Layout = the URL registry** (:mod:`streams.core.registry`): key = 8-byte site id
  + 8-byte hash of the rest of the URL, so a site's URLs are one contiguous, sorted
  key range; value = 8-byte URL id + the URL, so membership stays exact through any
  hash collision.
* **One WriteBatch per handled message.** :meth:`RegistryTable.add_keyed` writes all
  new URLs of a url-seen message in one RocksDB write, after one multi-get for the
  URLs the Bloom filter could not rule out.
* **One changelog record per handled message**, not per URL: key = the first new
  URL of the message, value = the new URLs joined by ``\\n`` (a canonical URL has
  no newline: WHATWG strips them) and a last line ``\\x00`` + url-seen's
  registration stamp (:func:`~streams.core.urlstate.registration_stamp`), split so
  a record stays under
  :data:`CHANGELOG_RECORD_MAX_BYTES`. The key is unique — a URL is new once — so
  compaction never drops a record.
* **Crawl states** (the frontier's writes, :meth:`RegistryTable.set_states`): one
  WriteBatch and one changelog record per handled frontier message, value =
  ``\\x00`` then lines of ``URL \\x00 state-JSON`` (:func:`state_records`), key =
  ``\\x00`` + 16 random bytes. Its own key, because a state record keyed by a URL
  would, under compaction, replace the registration record keyed by that URL
  (and lose the other URLs it registered); a random key is never reused, so
  compaction keeps every state record, and replay in changelog order leaves each
  URL with its latest state. The cost: a URL's superseded states stay in the
  changelog (about three small lines per URL crawled). Recovery and standbys go through
  :meth:`RegistryStore.apply_changelog_batch`, which feeds each record's URLs
  through the same registry insert (a replayed URL is found, not duplicated, and a
  collision is probed exactly as the first time).

Reading through the Faust table API still works and speaks URLs (as UTF-8 bytes):
``url in table``, ``table.keys()`` (decoded from the values), ``table[url]`` (the
8-byte URL id).
Item assignment and deletion are refused: a write that bypassed the batched
changelog record would be lost on recovery.
"""

from __future__ import annotations

import json
import logging
import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from faust.stores import rocksdb as faust_rocksdb
from faust.streams import current_event
from faust.types import TP, EventT

from streams.core.registry import (
    VALUE_CACHE_MIN,
    VALUE_CACHE_SIZE,
    VALUE_CACHE_TOTAL,
    InlinkChange,
    ValueCache,
    key_of,
    url_of,
)
from streams.core.sites import url_id
from streams.store.url_registry import UrlRegistry
from streams.tables.produced import ProducedTable

__all__ = [
    "CHANGELOG_RECORD_MAX_BYTES",
    "RegistryStore",
    "RegistryTable",
    "changelog_records",
    "state_records",
]

log = logging.getLogger("seine.url-seen")

#: Largest changelog record value: well under Kafka's default 1 MB message limit.
CHANGELOG_RECORD_MAX_BYTES = 256 * 1024

_OFFSET_KEY = faust_rocksdb.Store.offset_key
#: Starts the last line of a registration record when it carries url-seen's stamp.
STAMP_MARK = b"\x00"


def changelog_records(urls: Sequence[str], stamp: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
    """``(key, value)`` changelog records for newly registered URLs: the first URL of
    each record as its key, the URLs joined by ``\\n`` as its value, then, if there is
    a registration `stamp`, a last line ``\\x00`` + stamp (a URL never starts with a
    NUL), each value at most :data:`CHANGELOG_RECORD_MAX_BYTES` (a single longer URL
    gets a record alone)."""
    tail = b"\n" + STAMP_MARK + stamp if stamp else b""
    chunk: list[bytes] = []
    size = len(tail)
    for url in urls:
        raw = url.encode("utf-8")
        if chunk and size + 1 + len(raw) > CHANGELOG_RECORD_MAX_BYTES:
            yield chunk[0], b"\n".join(chunk) + tail
            chunk, size = [], len(tail)
        size += len(raw) + (1 if chunk else 0)
        chunk.append(raw)
    if chunk:
        yield chunk[0], b"\n".join(chunk) + tail


def registration_lines(value: bytes) -> tuple[list[str], bytes]:
    """The URLs and the registration stamp (b"" if none) of a registration record."""
    body, sep, stamp = value.rpartition(b"\n" + STAMP_MARK)
    if not sep:
        body, stamp = value, b""
    return body.decode("utf-8").split("\n"), stamp


def state_records(
    states: Mapping[str, Mapping[str, Any] | bytes],
) -> Iterator[tuple[bytes, bytes]]:
    """``(key, value)`` changelog records for crawl states: a random key (see the
    module docstring), value ``\\x00`` + ``URL \\x00 JSON`` lines, each value at most
    :data:`CHANGELOG_RECORD_MAX_BYTES` (one longer line gets a record alone)."""
    chunk: list[bytes] = []
    size = 1
    for url, state in states.items():
        raw = (
            state if isinstance(state, bytes) else json.dumps(state, separators=(",", ":")).encode()
        )
        line = url.encode("utf-8") + b"\x00" + raw
        if chunk and size + 1 + len(line) > CHANGELOG_RECORD_MAX_BYTES:
            yield b"\x00" + os.urandom(16), b"\x00" + b"\n".join(chunk)
            chunk, size = [], 1
        size += len(line) + (1 if chunk else 0)
        chunk.append(line)
    if chunk:
        yield b"\x00" + os.urandom(16), b"\x00" + b"\n".join(chunk)


def _parse_state_lines(value: bytes) -> dict[str, dict[str, Any]]:
    """The states of one state record (a malformed line is logged and skipped)."""
    states: dict[str, dict[str, Any]] = {}
    for line in value[1:].split(b"\n"):
        url, sep, raw = line.partition(b"\x00")
        try:
            state = json.loads(raw) if sep else None
        except ValueError:
            state = None
        if not isinstance(state, dict):
            log.warning("seen changelog: skipped a state line %r", line[:200])
            continue
        states[url.decode("utf-8", "replace")] = state
    return states


class RegistryStore(faust_rocksdb.Store):
    """Faust's rocksdb store with the URL registry layout in each partition database.

    ``on_partition_change`` callbacks are told of every partition revoked or newly
    assigned, so url-seen drops that partition's Bloom filter: a filter built
    while this worker owned the partition misses what another owner added since.

    Each partition database has a value cache (:meth:`UrlRegistry.over`), kept while
    the same database serves the partition: dropped, like the Bloom filter, when
    the partition is revoked or newly assigned, and whenever Faust opens the
    partition's database afresh or resets the table. Every write to a partition
    database goes through :meth:`registry` (url-seen, the frontier's states,
    changelog recovery and standbys in :meth:`apply_changelog_batch`; Faust's own
    item writes are refused), so the cache never holds a stale record. The cache
    holds no reference to the database: Faust closes a revoked partition's
    database by dropping the last one.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.on_partition_change: list[Callable[[int], None]] = []
        self._value_caches: dict[int, ValueCache] = {}

    def registry(self, partition: int) -> UrlRegistry:
        """The registry over this partition's database (opened on first use), with
        the partition's value cache."""
        db = self._db_for_partition(partition)  # first: opening it drops the cache
        caches = self._value_caches
        cache = caches.get(partition)
        if cache is None:
            cache = caches[partition] = {}
        size = max(VALUE_CACHE_MIN, min(VALUE_CACHE_SIZE, VALUE_CACHE_TOTAL // len(caches)))
        return UrlRegistry.over(db, cache, size)

    def _open_for_partition(self, partition: int) -> Any:
        self._value_caches.pop(partition, None)
        return super()._open_for_partition(partition)

    def reset_state(self) -> None:
        self._value_caches.clear()
        super().reset_state()

    def add_keyed(
        self,
        partition: int,
        urls: Sequence[str],
        keys: Sequence[bytes],
        maybe_present: Sequence[bool] | None = None,
        found: dict[str, tuple[bytes, bytes]] | None = None,
        stamp: bytes = b"",
    ) -> list[bytes | None]:
        """:meth:`UrlRegistry.add_keyed` on the partition's database (one WriteBatch)."""
        return self.registry(partition).add_keyed(urls, keys, maybe_present, found, stamp)

    def set_states(
        self, partition: int, states: Mapping[str, Mapping[str, Any]], *, register: bool = False
    ) -> list[str]:
        """:meth:`UrlRegistry.set_states` on the partition's database (one WriteBatch)."""
        return self.registry(partition).set_states(states, register=register)

    def write_states(
        self, partition: int, states: Mapping[str, Mapping[str, Any]]
    ) -> dict[str, bytes]:
        """:meth:`UrlRegistry.write_states` on the partition's database (one WriteBatch)."""
        return self.registry(partition).write_states(states)

    def add_inlinks(
        self,
        partition: int,
        counts: Mapping[str, int],
        found: Mapping[str, tuple[bytes, bytes]] | None = None,
    ) -> list[InlinkChange]:
        """:meth:`UrlRegistry.add_inlinks` on the partition's database (one WriteBatch)."""
        return self.registry(partition).add_inlinks(counts, found)

    def url_states(self, partition: int) -> Iterator[tuple[str, dict[str, Any] | None]]:
        """Every URL of one partition with its crawl state."""
        return self.registry(partition).url_states()

    def partition_keys(self, partition: int) -> Iterator[bytes]:
        """Every registry key of one partition, in order: what url-seen's Bloom filter
        is rebuilt from (keys only: RocksDB hands no values to Python)."""
        for key in self._db_for_partition(partition).keys():  # noqa: SIM118
            if key != _OFFSET_KEY:
                yield key

    def partition_urls(self, partition: int) -> Iterator[str]:
        """Every URL of one partition, grouped by site."""
        for key, value in self._db_for_partition(partition).items():
            if key != _OFFSET_KEY:
                yield url_of(value)

    def apply_changelog_batch(
        self,
        batch: Iterable[EventT],
        to_key: Callable[[Any], Any],
        to_value: Callable[[Any], Any],
    ) -> None:
        """Recovery and standbys: register each record's URLs and apply its crawl
        states in changelog order, one WriteBatch per partition for each run of
        registrations (and one per state record), then remember the offsets as
        Faust does."""
        # per partition, runs of (stamp, URLs) in changelog order
        urls: defaultdict[int, list[tuple[bytes, list[str]]]] = defaultdict(list)
        offsets: dict[TP, int] = {}
        for event in batch:
            message = event.message
            offsets[message.tp] = max(message.offset, offsets.get(message.tp, -1))
            if message.value is None:
                continue  # never written by url-seen (URLs are not forgotten)
            value = bytes(message.value)
            if value[:1] == b"\x00":
                self._register(message.partition, urls.pop(message.partition, []))
                states = _parse_state_lines(value)
                good = {url: state for url, state in states.items() if _has_host(url)}
                self.set_states(message.partition, good, register=True)
                continue
            lines, stamp = registration_lines(value)
            runs = urls[message.partition]
            if runs and runs[-1][0] == stamp:
                runs[-1][1].extend(lines)
            else:
                runs.append((stamp, lines))
        for partition, items in urls.items():
            self._register(partition, items)
        for tp, offset in offsets.items():
            self.set_persisted_offset(tp, offset)

    def _register(self, partition: int, runs: Sequence[tuple[bytes, Sequence[str]]]) -> None:
        for stamp, items in runs:
            keys: list[bytes] = []
            good: list[str] = []
            for url in items:
                try:
                    keys.append(key_of(url))
                except ValueError:
                    log.warning("seen changelog: skipped a record entry %r (no host)", url[:200])
                    continue
                good.append(url)
            if good:
                self.registry(partition).add_keyed(good, keys, stamp=stamp)

    async def on_rebalance(
        self,
        assigned: set[TP],
        revoked: set[TP],
        newly_assigned: set[TP],
        generation_id: int = 0,
    ) -> None:
        await super().on_rebalance(assigned, revoked, newly_assigned, generation_id)
        topics = self.table.changelog_topic.topics
        for tp in revoked | newly_assigned:
            if tp.topic in topics:
                self._value_caches.pop(tp.partition, None)
                for callback in self.on_partition_change:
                    callback(tp.partition)

    # -- the Faust key/value view: URL -> 8-byte URL id --------------------------

    def _partitions_to_read(self) -> Iterable[int]:
        event = current_event()
        if event is not None:
            return (event.message.partition,)
        return tuple(self._dbs)

    def _get(self, key: bytes) -> bytes | None:
        url = bytes(key).decode("utf-8", "replace")
        if self._contains(key):
            return url_id(url).to_bytes(8, "big")  # what the record stores: a pure hash
        return None

    def _contains(self, key: bytes) -> bool:
        url = bytes(key).decode("utf-8", "replace")
        return any(url in self.registry(p) for p in self._partitions_to_read())

    def _set(self, key: bytes, value: bytes | None) -> None:
        raise TypeError("the seen registry is written with RegistryTable.add_keyed")

    def _del(self, key: bytes) -> None:
        raise TypeError("URLs are never removed from the seen registry")

    def _visible_keys(self, db: Any) -> Iterator[bytes]:
        for key, _value in self._visible_items(db):
            yield key

    def _visible_items(self, db: Any) -> Iterator[tuple[bytes, bytes]]:
        for key, value in db.items():
            if key != _OFFSET_KEY:
                yield url_of(value).encode("utf-8"), bytes(value[:8])


def _has_host(url: str) -> bool:
    try:
        key_of(url)
    except ValueError:
        log.warning("seen changelog: skipped a state of %r (no host)", url[:200])
        return False
    return True


class RegistryTable(ProducedTable):
    """The `seen` table: a Faust table whose store is :class:`RegistryStore`.

    Declare with ``key_type=bytes, value_type=bytes``: raw serializers, since the
    changelog records are raw bytes (and the Faust view's keys are URLs as bytes).
    """

    def _new_store_by_url(self, url: Any) -> RegistryStore:
        return RegistryStore(
            url,
            self.app,
            self,
            table_name=self.name,
            key_type=self.key_type,
            key_serializer=self.key_serializer,
            value_serializer=self.value_serializer,
            value_type=self.value_type,
            loop=self.loop,
            options=self.options,
        )

    def __setitem__(self, key: Any, value: Any) -> None:
        # Refused before Faust's on_key_set sends a changelog record the store
        # could not apply.
        raise TypeError("the seen registry is written with RegistryTable.add_keyed")

    def __delitem__(self, key: Any) -> None:
        raise TypeError("URLs are never removed from the seen registry")

    @property
    def store(self) -> RegistryStore:
        data = self.data
        assert isinstance(data, RegistryStore)
        return data

    def add_keyed(
        self,
        urls: Sequence[str],
        keys: Sequence[bytes],
        maybe_present: Sequence[bool] | None = None,
        found: dict[str, tuple[bytes, bytes]] | None = None,
        stamp: bytes = b"",
    ) -> list[bytes | None]:
        """Register URLs in the current event's partition; for each, the key it was
        stored under if new, else None (see :meth:`UrlRegistry.add_keyed`). The
        `stamp` (url-seen's registration stamp) goes in the changelog record too, so
        a registration recovered by another worker says when and by which message
        it was made.

        One WriteBatch, then one changelog record (per 256 KB) for all new URLs, to
        the changelog partition of the event being handled, as Faust would.
        """
        event = current_event()
        if event is None:
            raise RuntimeError("the seen registry is written only while handling an event")
        partition = event.message.partition
        written = self.store.add_keyed(partition, urls, keys, maybe_present, found, stamp)
        new = [url for url, key in zip(urls, written, strict=True) if key is not None]
        for key, value in changelog_records(new, stamp):
            self.send_changelog(partition, key, value, "raw", "raw")
        return written

    def set_states(self, states: Mapping[str, Mapping[str, Any]]) -> list[str]:
        """Record crawl states of registered URLs in the current event's partition
        (the frontier's writes): one WriteBatch, then one changelog record (per
        256 KB) for the states written. Returns the URLs written; an unregistered
        URL is skipped (see :meth:`UrlRegistry.set_states`)."""
        if not states:
            return []
        event = current_event()
        if event is None:
            raise RuntimeError("the seen registry is written only while handling an event")
        partition = event.message.partition
        written = self.store.write_states(partition, states)
        for key, value in state_records(written):  # the states as stored, encoded once
            self.send_changelog(partition, key, value, "raw", "raw")
        return list(written)

    def add_inlinks(
        self,
        counts: Mapping[str, int],
        found: Mapping[str, tuple[bytes, bytes]] | None = None,
    ) -> list[InlinkChange]:
        """Grow registered URLs' in-link counts in the current event's partition (url-seen,
        for links to URLs it has seen): one WriteBatch, and the new states in one
        changelog record (per 256 KB), as :meth:`set_states` writes them."""
        if not counts:
            return []
        partition = self._partition()
        changed = self.store.add_inlinks(partition, counts, found)
        for key, value in state_records({url: raw for url, _old, _new, raw in changed}):
            self.send_changelog(partition, key, value, "raw", "raw")
        return changed

    def states(self, urls: Sequence[str]) -> dict[str, dict[str, Any] | None]:
        """The crawl states of registered URLs in the current event's partition."""
        return self.store.registry(self._partition()).states(urls)

    def _partition(self) -> int:
        event = current_event()
        if event is None:
            raise RuntimeError("the seen registry is used only while handling an event")
        return int(event.message.partition)
