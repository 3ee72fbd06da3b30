"""ProducedTable's write path: a real (unstarted) Faust app and RocksDB partition
databases over tmp_path, the changelog captured from the producer hook the crawl uses
and replayed through Faust's own `apply_changelog_batch`, as recovery does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import faust
from faust.utils import json as faust_json

from streams.tables.produced import ProducedTable
from tests.unit.test_registry_table import CapturingProducer, changelog_event
from tests.unit.test_registry_table import Handling as PartitionOnly


class Handling(PartitionOnly):
    """An event of `partition` of a source topic, as the agent loop has current."""

    def __init__(self, partition: int) -> None:
        super().__init__(partition)
        self.event.message.topic = "frontier"  # type: ignore[attr-defined]


def make_table(directory: Path) -> tuple[ProducedTable, CapturingProducer]:
    app = faust.App("produced-test", store="rocksdb://", datadir=str(directory))
    producer = CapturingProducer()
    app.seine_producer = producer  # type: ignore[attr-defined]
    table = ProducedTable(app, name="hosts", default=None, partitions=4, key_type=str)
    app.tables.add(table)
    return table, producer


def test_a_write_is_one_changelog_record_with_the_bytes_the_store_keeps(tmp_path: Path) -> None:
    """The key and value are serialized once and the same bytes go to the changelog and
    to RocksDB: what Faust's two serializations gave, so recovery rebuilds the table."""
    source, producer = make_table(tmp_path / "source")
    states: dict[str, Any] = {
        "a.test": {"heads": [0, 1, 0, 0], "robots": "ready", "next": 1.5, "inflight": None},
        "b.test:8080": {"heads": [2, 0, 0, 0], "robots_body": "User-agent: *\nDisallow: /x"},
    }
    with Handling(3):
        for key, value in states.items():
            source[key] = value
        source["a.test"] = {**states["a.test"], "next": 2.5}  # a later write wins
        states["a.test"]["next"] = 2.5
        assert {key: source[key] for key in states} == states
        del source["b.test:8080"]  # deletions still go through Faust's own path
        assert "b.test:8080" not in source
    serializers = source.app.serializers
    assert [(key, value, p) for _, key, value, p in producer.records] == [
        (
            serializers.dumps_key(str, key, serializer="json"),
            serializers.dumps_value(None, value, serializer="json"),
            3,
        )
        for key, value in [
            ("a.test", {**states["a.test"], "next": 1.5}),
            ("b.test:8080", states["b.test:8080"]),
            ("a.test", states["a.test"]),
        ]
    ] + [(serializers.dumps_key(str, "b.test:8080", serializer="json"), None, 3)]
    db = source.data._db_for_partition(3)  # type: ignore[attr-defined]
    assert db[producer.records[2][1]] == producer.records[2][2]
    target, _ = make_table(tmp_path / "target")
    events = [
        changelog_event(p, offset, k, v) for offset, (_, k, v, p) in enumerate(producer.records)
    ]
    target.data.apply_changelog_batch(events, lambda k: k, lambda v: v)
    with Handling(3):
        assert target["a.test"] == states["a.test"]
        assert target.get("b.test:8080") is None


def test_tables_serialize_with_orjson() -> None:
    """A dependency, not an accident of the environment: Faust's json codec takes orjson
    when it can import it (a host state encodes ~17x faster), and ASCII keys encode to the
    same bytes either way, so existing data dirs and changelogs still match."""
    assert faust_json.orjson is not None
    for key in ["a.test\x000\x00000000000001", "127.0.0.1:8080", "http://a.test/p?q=1%20"]:
        assert faust_json.dumps(key) == faust_json.json.dumps(key, separators=(",", ":")).encode()


def test_outside_an_event_faust_s_own_path_is_taken(tmp_path: Path) -> None:
    """No current event: Faust's write, which refuses (a write must name its partition)."""
    table, producer = make_table(tmp_path / "t")
    try:
        table["a.test"] = {"x": 1}
    except TypeError:
        pass
    else:  # pragma: no cover - Faust changed
        raise AssertionError("a write outside an event should be refused")
    assert producer.records == []


def test_reads_are_one_lookup_and_keep_faust_s_answers(tmp_path: Path) -> None:
    """`table[key]`, `.get` and `.pop` answer as Faust's mapping does (a miss raises
    KeyError or gives the default; a table with a default factory still gives its value)."""
    table, producer = make_table(tmp_path / "t")
    with Handling(1):
        table["q\x000\x00000000000001"] = {"url": "http://a.test/1", "depth": 1}
        assert table.get("q\x000\x00000000000001") == {"url": "http://a.test/1", "depth": 1}
        assert table.get("missing") is None
        assert table.get("missing", 7) == 7
        try:
            table["missing"]
        except KeyError:
            pass
        else:  # pragma: no cover
            raise AssertionError("a missing key should raise KeyError")
        assert table.pop("q\x000\x00000000000001") == {"url": "http://a.test/1", "depth": 1}
        assert table.pop("q\x000\x00000000000001", None) is None
        assert "q\x000\x00000000000001" not in table
    with Handling(2):  # another partition's database does not hold it
        table["x"] = 1
    with Handling(1):
        assert table.get("x") is None
    assert [(value is None, p) for _, _, value, p in producer.records] == [
        (False, 1),
        (True, 1),
        (False, 2),
    ]
    counted = ProducedTable(table.app, name="counts", default=int, partitions=4, key_type=str)
    table.app.tables.add(counted)
    with Handling(1):
        assert counted["nothing"] == 0 and counted.get("nothing") == 0


def test_the_direct_path_writes_and_reads_what_faust_s_own_path_does(tmp_path: Path) -> None:
    """Keys and values the direct path encodes (str keys, dict/list values, with orjson
    straight to the partition database) and the ones it leaves to Faust (other types)
    give Faust's bytes, read back as Faust reads them, also outside an event (where
    Faust searches every partition database: the direct path keeps no key index)."""
    table, producer = make_table(tmp_path / "t")
    rows: dict[str, Any] = {
        "a.test": {"heads": [0, 1], "name": "é€", "nested": {"x": None, "y": 1.25}},
        "ü.test\x001\x00000000000007": [1, "two", {"three": 3}],
        "int": 7,
        "str": "a string value",
        "none": None,
    }
    with Handling(2):
        for key, value in rows.items():
            table[key] = value
        assert {key: table[key] for key in rows} == rows
        assert {key: table.get(key, "miss") for key in rows} == rows
        assert all(key in table for key in rows)
    serializers = table.app.serializers
    assert [(k, v) for _, k, v, _ in producer.records] == [
        (
            serializers.dumps_key(str, key, serializer="json"),
            serializers.dumps_value(None, value, serializer="json"),
        )
        for key, value in rows.items()
    ]
    db = table.data._db_for_partition(2)  # type: ignore[attr-defined]
    assert all(db[k] == v for _, k, v, _ in producer.records)
    assert table.get("a.test") == rows["a.test"]  # no event: Faust's own lookup
    with Handling(2):
        assert table.pop("a.test", None) == rows["a.test"]
        assert table.pop("a.test", "gone") == "gone"
        try:
            table.pop("a.test")
        except KeyError:
            pass
        else:  # pragma: no cover
            raise AssertionError("pop of a missing key without a default should raise")
        del table["int"]
        assert "int" not in table and "a.test" not in table
    assert producer.records[-2:] == [
        (producer.records[0][0], serializers.dumps_key(str, "a.test", serializer="json"), None, 2),
        (producer.records[0][0], serializers.dumps_key(str, "int", serializer="json"), None, 2),
    ]
    assert table.get("int") is None and table.get("a.test") is None


def test_the_direct_json_encoders_give_faust_s_bytes(tmp_path: Path) -> None:
    """Differential: the tables' orjson calls against `faust.utils.json.dumps`, which
    they replace on the write path, over keys and values of many shapes."""
    import datetime
    import random

    table, _ = make_table(tmp_path)

    rng = random.Random(3)
    atoms: list[Any] = [0, -1, 2**63 - 1, 1.5, -0.0, 1e300, None, True, "", 'ü€\n"\\', "a" * 300]
    atoms.append(datetime.datetime(2026, 11, 22, 22, 0, tzinfo=datetime.UTC))
    atoms.append(datetime.date(2026, 11, 22))

    def value(depth: int) -> Any:
        roll = rng.random()
        if depth > 3 or roll < 0.4:
            return rng.choice(atoms)
        if roll < 0.7:
            return [value(depth + 1) for _ in range(rng.randrange(4))]
        keys = [rng.choice(["k", "ü", "", 1, 2.5, None, True]) for _ in range(rng.randrange(4))]
        return {k: value(depth + 1) for k in keys}

    for _ in range(2000):
        v = {"v": value(0)} if rng.random() < 0.5 else [value(0)]
        assert table._value_bytes(v, True) == faust_json.dumps(v)
    for key in ["", "a.test", "127.0.1.55:39365", "ü/€", "\x00\n", "0012ab" * 40]:
        assert table._key_bytes(key, True) == faust_json.dumps(key)
