"""url-seen's Faust store: the registry layout in real RocksDB partition databases.

A real (unstarted) Faust app and table over tmp_path: Faust opens the partition
databases itself, so these tests see exactly the files a worker writes. Changelog
records are captured from the producer hook the crawl uses (ProducedTable's
`seine_producer`) and fed back through `apply_changelog_batch`, as recovery does.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import faust
import faust.streams as faust_streams
import pytest
from faust.types import TP

import streams.core.registry as registry_module
from streams.core.registry import key_of
from streams.core.sites import site_id, url_id
from streams.core.urls import site_key
from streams.core.urlstate import registration_stamp
from streams.tables.registry import (
    CHANGELOG_RECORD_MAX_BYTES,
    RegistryStore,
    RegistryTable,
    changelog_records,
    registration_lines,
)


class CapturingProducer:
    """Stands in for the crawl's confluent-kafka producer: records changelog sends."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes, bytes | None, int]] = []

    def produce_changelog(
        self, topic: str, key: bytes, value: bytes | None, partition: int, callback: Any = None
    ) -> None:
        self.records.append((topic, key, value, partition))


def make_table(directory: Path) -> tuple[RegistryTable, CapturingProducer]:
    app = faust.App("registry-test", store="rocksdb://", datadir=str(directory))
    producer = CapturingProducer()
    app.seine_producer = producer  # type: ignore[attr-defined]
    table = RegistryTable(
        app, name="seen", default=None, partitions=4, key_type=bytes, value_type=bytes
    )
    app.tables.add(table)
    return table, producer


@pytest.fixture
def table(tmp_path: Path) -> Iterator[RegistryTable]:
    seen, _ = make_table(tmp_path / "a")
    yield seen


class Event:
    """The part of a Faust event the store reads (weak-referenceable, as Faust needs)."""

    def __init__(self, partition: int) -> None:
        self.message = SimpleNamespace(partition=partition)


class Handling:
    """Makes `partition` the current event's partition, as the agent loop does."""

    def __init__(self, partition: int) -> None:
        self.event = Event(partition)

    def __enter__(self) -> None:
        self.token = faust_streams._current_event.set(weakref.ref(self.event))  # type: ignore[arg-type]

    def __exit__(self, *exc: object) -> None:
        faust_streams._current_event.reset(self.token)


def add(table: RegistryTable, partition: int, urls: list[str]) -> list[bytes | None]:
    with Handling(partition):
        return table.add_keyed(urls, [key_of(u) for u in urls])


def changelog_event(partition: int, offset: int, key: bytes, value: bytes | None) -> Any:
    return SimpleNamespace(
        message=SimpleNamespace(
            tp=TP("registry-test-seen-changelog", partition),
            partition=partition,
            offset=offset,
            key=key,
            value=value,
        )
    )


SITES = ["a.test", "www.b.test", "c.test", "d.test"]
URLS = [f"http://{SITES[i % 4]}/p/{i}?q={i * 7}" for i in range(400)]  # interleaved


def test_a_sites_keys_are_contiguous_and_sorted_in_the_partition_database(
    table: RegistryTable,
) -> None:
    assert add(table, 2, URLS) == [key_of(u) for u in URLS]  # all new, first-choice keys
    db = table.store._db_for_partition(2)
    keys = [k for k in db.keys() if k != RegistryStore.offset_key]  # noqa: SIM118
    assert keys == sorted(keys) and len(keys) == len(URLS)
    site_of_key = [int.from_bytes(k[:8], "big") for k in keys]
    runs = [s for i, s in enumerate(site_of_key) if i == 0 or s != site_of_key[i - 1]]
    assert len(runs) == len(set(runs)) == len(SITES)  # one run of keys per site
    assert set(runs) == {site_id(site_key(s)) for s in SITES}
    for key, value in db.items():
        url = value[8:].decode()
        assert key == key_of(url) and value[:8] == url_id(url).to_bytes(8, "big")
    # the Bloom filter's rebuild reads the keys, the URLs come grouped by site
    assert list(table.store.partition_keys(2)) == keys
    urls = list(table.store.partition_urls(2))
    assert sorted(urls) == sorted(URLS)
    assert [u.split("/")[2] for u in urls] == sorted(
        (u.split("/")[2] for u in URLS), key=lambda h: site_id(site_key(h))
    )


def test_one_write_batch_and_one_changelog_record_per_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table, producer = make_table(tmp_path)
    db = table.store._db_for_partition(1)
    writes: list[int] = []
    puts: list[bytes] = []

    class Spy:
        def __getattr__(self, name: str) -> Any:
            return getattr(db, name)

        def write(self, batch: Any) -> None:
            writes.append(len(batch))
            db.write(batch)

        def put(self, key: bytes, value: bytes) -> None:
            puts.append(key)
            db.put(key, value)

    monkeypatch.setitem(table.store._dbs, 1, Spy())
    first = [f"http://a.test/{i}" for i in range(300)]
    result = add(table, 1, first + first[:5])
    assert result == [key_of(u) for u in first] + [None] * 5  # a repeat is new once
    assert writes == [300] and puts == []  # one batch of the 300 new URLs, no single puts
    assert [(t, k, p) for t, k, _, p in producer.records] == [
        ("registry-test-seen-changelog", first[0].encode(), 1)
    ]
    assert producer.records[0][2] == "\n".join(first).encode()
    # nothing new: no write, no changelog record
    assert add(table, 1, first[::-1]) == [None] * 300
    assert writes == [300] and len(producer.records) == 1
    # a partly new batch: only the new URLs, in one batch and one record
    assert [k is not None for k in add(table, 1, [first[0], "http://a.test/new"])] == [
        False,
        True,
    ]
    assert writes == [300, 1]
    assert producer.records[-1][1:] == (b"http://a.test/new", b"http://a.test/new", 1)


def test_writing_outside_an_event_is_refused(table: RegistryTable) -> None:
    with pytest.raises(RuntimeError):
        table.add_keyed(["http://a.test/"], [key_of("http://a.test/")])
    with Handling(0), pytest.raises(TypeError):
        table[b"http://a.test/"] = b"1"
    with Handling(0), pytest.raises(TypeError):
        del table[b"http://a.test/"]


def test_colliding_keys_stay_exact(table: RegistryTable, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every site gets one id, so every site's "/" shares a key: probing keeps them apart,
    also when the caller promised (Bloom "definitely not") that the first key was free."""
    monkeypatch.setattr(registry_module, "site_id", lambda key: 7)
    # key_of memoises keys: bypass it while site ids are faked (and cache no fake key)
    monkeypatch.setattr(registry_module, "key_of", registry_module.key_of.__wrapped__)
    urls = ["http://a.test/", "http://b.test/", "http://c.test/"]
    keys = [registry_module.key_of(u) for u in urls]
    assert len(set(keys)) == 1
    with Handling(0):
        written = table.add_keyed(urls, keys, [False, False, False])
    assert len({k for k in written if k is not None}) == 3  # three slots of one site
    with Handling(0):
        assert table.add_keyed([*urls, "http://d.test/"], [*keys, keys[0]]) == [
            None,
            None,
            None,
            written[2][:8] + (int.from_bytes(written[2][8:], "big") + 1).to_bytes(8, "big"),  # type: ignore[index,operator]
        ]
    assert sorted(table.store.partition_urls(0)) == [*urls, "http://d.test/"]


def test_changelog_records_rebuild_the_same_registry(tmp_path: Path) -> None:
    """Recovery: records produced by one worker, applied by another's store (twice, as
    a replay from the start of the changelog would), give the same databases."""
    source, producer = make_table(tmp_path / "source")
    for start in range(0, len(URLS), 50):
        add(source, 0 if start < 200 else 3, URLS[start : start + 50])
    add(source, 0, URLS[:10])  # all seen: no record
    assert len(producer.records) == 8
    events = [
        changelog_event(p, offset, k, v) for offset, (_, k, v, p) in enumerate(producer.records)
    ]
    target, _ = make_table(tmp_path / "target")
    for _ in range(2):
        target.store.apply_changelog_batch(events, lambda k: k, lambda v: v)
    for partition in (0, 3):
        assert list(target.store._db_for_partition(partition).items()) == [
            (k, v)
            for k, v in source.store._db_for_partition(partition).items()
            if k != RegistryStore.offset_key
        ] + [(RegistryStore.offset_key, str(7 if partition == 3 else 3).encode())]
    tp = TP("registry-test-seen-changelog", 3)
    assert target.store.persisted_offset(tp) == 7
    # a tombstone (never produced by url-seen) removes nothing; a hostless entry
    # (never produced either) is skipped without losing its record's other URLs
    target.store.apply_changelog_batch(
        [
            changelog_event(3, 8, URLS[200].encode(), None),
            changelog_event(3, 9, b"junk", b"junk\nhttp://e.test/x"),
        ],
        lambda k: k,
        lambda v: v,
    )
    assert URLS[200] in set(target.store.partition_urls(3))
    assert "http://e.test/x" in set(target.store.partition_urls(3))


def test_changelog_records_are_chunked_under_the_limit() -> None:
    urls = [f"http://a.test/{i:04d}/" + "x" * 1000 for i in range(600)]  # ~610 KB
    records = list(changelog_records(urls))
    assert len(records) == 3
    assert all(len(v) <= CHANGELOG_RECORD_MAX_BYTES for _, v in records)
    assert [u for _, v in records for u in v.decode().split("\n")] == urls
    assert [k for k, _ in records] == [v.split(b"\n")[0] for _, v in records]
    lone = "http://a.test/" + "y" * (CHANGELOG_RECORD_MAX_BYTES + 10)
    assert list(changelog_records([lone])) == [(lone.encode(), lone.encode())]
    assert list(changelog_records([])) == []


def test_the_faust_view_speaks_urls(table: RegistryTable) -> None:
    add(table, 1, URLS[:3])
    with Handling(1):
        assert URLS[0].encode() in table
        assert b"http://a.test/never" not in table
        assert b"not a url" not in table
        assert table.store[URLS[1].encode()] == url_id(URLS[1]).to_bytes(8, "big")
    with Handling(2):
        assert URLS[0].encode() not in table  # another partition's URL


def test_a_rebalance_tells_url_seen_which_filters_to_drop(table: RegistryTable) -> None:
    dropped: list[int] = []
    table.store.on_partition_change.append(dropped.append)
    changelog = table.changelog_topic.get_topic_name()
    asyncio.run(
        table.store.on_rebalance(
            assigned={TP(changelog, 0)},
            revoked={TP(changelog, 2), TP("another-topic", 3)},
            newly_assigned={TP(changelog, 0)},
        )
    )
    assert sorted(dropped) == [0, 2]


def test_a_partitions_value_cache_lives_with_its_database(table: RegistryTable) -> None:
    """The records cached for a partition are dropped when it is revoked or newly
    assigned, and when its database is opened afresh; the cache never keeps a
    database open (Faust closes a revoked one by dropping the last reference)."""
    import gc

    urls = [f"http://c{i}.test/" for i in range(5)]
    with Handling(0):
        table.add_keyed(urls, [key_of(u) for u in urls])
    caches = table.store._value_caches
    assert set(caches) == {0} and len(caches[0]) == 5  # written records are cached
    first = caches[0]
    assert table.store.registry(0)._cache is first  # one cache while the database lives
    changelog = table.changelog_topic.get_topic_name()
    asyncio.run(
        table.store.on_rebalance(assigned=set(), revoked={TP(changelog, 0)}, newly_assigned=set())
    )
    assert 0 not in caches
    with Handling(0):
        assert table.add_keyed(urls, [key_of(u) for u in urls]) == [None] * 5  # read from disk
    assert caches[0] is not first and len(caches[0]) == 5
    cached = caches[0]
    del table.store._dbs[0]  # as Faust's revoke does, behind the store's back
    gc.collect()
    # Reopening succeeds only if nothing kept the old database open (RocksDB locks a
    # database per process), and starts a new cache.
    reopened = table.store.registry(0)
    assert reopened._cache is not cached and reopened._cache == {}


def test_the_value_caches_share_one_budget_per_worker(table: RegistryTable) -> None:
    """A worker holding many partitions gives each a smaller cache: the caches of
    one store hold VALUE_CACHE_TOTAL records together, not VALUE_CACHE_SIZE each."""
    from streams.core import registry as registry_module

    assert table.store.registry(0)._cache_size == registry_module.VALUE_CACHE_SIZE
    sizes = [table.store.registry(p)._cache_size for p in range(1, 4)]  # all 4 partitions
    assert sizes[-1] * 4 <= registry_module.VALUE_CACHE_TOTAL
    assert sizes[-1] < registry_module.VALUE_CACHE_SIZE
    assert sizes == sorted(sizes, reverse=True)  # shrinks as partitions are added
    assert table.store.registry(0)._cache_size == sizes[-1]  # re-read: the shared size


def test_crawl_states_one_batch_one_record_and_recovered_in_order(tmp_path: Path) -> None:
    """The frontier's writes: one WriteBatch and one changelog record per message, under
    their own random keys (a URL-keyed record would replace url-seen's under compaction);
    replaying the changelog gives every URL its latest state."""
    source, producer = make_table(tmp_path / "source")
    add(source, 2, URLS[:40])
    with Handling(2):
        assert source.set_states({u: {"s": "queued", "in": 2} for u in URLS[:40]}) == URLS[:40]
        written = source.set_states(
            {URLS[0]: {"s": "fetched", "status": 200}, "http://a.test/never": {"s": "queued"}}
        )
    assert written == [URLS[0]]  # an unregistered URL gets no state (nor a registration)
    assert "http://a.test/never" not in set(source.store.partition_urls(2))
    states = [(k, v) for _, k, v, p in producer.records if p == 2 and v and v[:1] == b"\x00"]
    assert len(states) == 2 and len({k for k, _ in states}) == 2
    assert all(k[:1] == b"\x00" and len(k) == 17 for k, _ in states)
    # the record carries the state as stored (sticky in-links kept): encoded once
    assert states[1][1] == b"\x00" + URLS[0].encode() + b'\x00{"s":"fetched","status":200,"in":2}'
    got = dict(source.store.url_states(2))
    assert got[URLS[0]] == {"s": "fetched", "status": 200, "in": 2}  # in-links are sticky
    assert got[URLS[1]] == {"s": "queued", "in": 2}
    # the Faust view and url-seen's lookups still speak plain URLs
    assert sorted(source.store.partition_urls(2)) == sorted(URLS[:40])
    with Handling(2):
        assert URLS[0].encode() in source
    assert add(source, 2, URLS[:40]) == [None] * 40
    events = [
        changelog_event(p, offset, k, v) for offset, (_, k, v, p) in enumerate(producer.records)
    ]
    target, _ = make_table(tmp_path / "target")
    for _ in range(2):  # a replay from the start is idempotent
        target.store.apply_changelog_batch(events, lambda k: k, lambda v: v)
    assert dict(target.store.url_states(2)) == got
    # a malformed state line is skipped, the rest of its record applied
    target.store.apply_changelog_batch(
        [
            changelog_event(
                2, 99, b"\x00k", b"\x00junk\n" + URLS[1].encode() + b'\x00{"s":"fetching"}'
            )
        ],
        lambda k: k,
        lambda v: v,
    )
    assert dict(target.store.url_states(2))[URLS[1]] == {"s": "fetching", "in": 2}


def test_the_registration_stamp_travels_in_the_changelog_record(tmp_path: Path) -> None:
    """A worker that recovers a partition sees when, and by which url-seen message, each
    URL was registered (url-seen re-sends a never-queued URL when that message comes
    again), and records without a stamp (written before stamps) still apply."""
    source, producer = make_table(tmp_path / "source")
    with Handling(2):
        source.add_keyed(URLS[:3], [key_of(u) for u in URLS[:3]], stamp=registration_stamp(5.0, 41))
        source.add_keyed(
            URLS[3:5], [key_of(u) for u in URLS[3:5]], stamp=registration_stamp(6.0, 42)
        )
    add(source, 2, URLS[5:6])  # no stamp
    records = [(k, v) for _, k, v, _ in producer.records]
    assert records[0][1] == "\n".join(URLS[:3]).encode() + b'\n\x00{"r":5.0,"o":41}'
    assert registration_lines(records[1][1] or b"") == (URLS[3:5], b'{"r":6.0,"o":42}')
    assert registration_lines(records[2][1] or b"") == (URLS[5:6], b"")
    events = [changelog_event(2, i, k, v) for i, (k, v) in enumerate(records)]
    target, _ = make_table(tmp_path / "target")
    target.store.apply_changelog_batch(events, lambda k: k, lambda v: v)
    got = dict(target.store.url_states(2))
    assert got == dict(source.store.url_states(2))
    assert got[URLS[0]] == {"r": 5.0, "o": 41} and got[URLS[4]] == {"r": 6.0, "o": 42}
    assert got[URLS[5]] is None
