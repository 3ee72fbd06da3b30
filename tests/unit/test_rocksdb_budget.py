"""The worker-wide RocksDB budget: every table's partition databases share one block
cache and one write buffer manager, so their memtables are flushed once together they
pass the budget, however many databases there are (streams/tables/budget.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import faust
import pytest

from streams.tables import budget as rocksdb_budget
from streams.tables.produced import FRONTIER_STORE_OPTIONS, ProducedTable


@pytest.fixture
def small_budget(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A 1 MB memtable budget (and a fresh shared cache and manager)."""
    monkeypatch.setattr(rocksdb_budget, "WRITE_BUFFER_BYTES", 1 << 20)
    monkeypatch.setattr(rocksdb_budget, "_shared", None)
    yield
    rocksdb_budget._shared = None


def make_table(directory: Path, options: dict[str, int] | None = None) -> ProducedTable:
    app = faust.App("budget-test", store="rocksdb://", datadir=str(directory))
    table = ProducedTable(
        app, name="hosts", default=None, partitions=4, key_type=str, options=options
    )
    app.tables.add(table)
    return table


def test_every_partition_database_shares_one_cache_and_small_write_buffers(
    tmp_path: Path, small_budget: None
) -> None:
    table = make_table(tmp_path, FRONTIER_STORE_OPTIONS)
    store = table.data
    options = store.rocksdb_options  # type: ignore[attr-defined]
    assert isinstance(options, rocksdb_budget.BudgetOptions)
    assert options.write_buffer_size == rocksdb_budget.DB_WRITE_BUFFER_SIZE
    assert options.max_write_buffer_number == rocksdb_budget.DB_MAX_WRITE_BUFFERS
    dbs = [store._db_for_partition(p) for p in range(4)]  # type: ignore[attr-defined]
    capacity = {db.property_int_value("rocksdb.block-cache-capacity") for db in dbs}
    assert capacity == {rocksdb_budget.CACHE_BYTES}
    # one cache: a block read through one database is counted in every one's usage
    dbs[0][b"k"] = b"v" * 100
    dbs[0].flush()
    assert dbs[0][b"k"] == b"v" * 100
    usage = {db.property_int_value("rocksdb.block-cache-usage") for db in dbs}
    assert len(usage) == 1 and usage.pop() > 0


def test_memtables_past_the_budget_are_flushed(
    tmp_path: Path, small_budget: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """8 MB written over two databases whose own write buffers are 64 MB, with a 1 MB
    budget: a memtable is switched and flushed (only the budget can ask for that
    here), and every value reads back. How much the memtables hold at the end depends
    on how fast the flushes are, so it is not asserted."""
    monkeypatch.setattr(rocksdb_budget, "DB_WRITE_BUFFER_SIZE", 64 << 20)
    store = make_table(tmp_path).data
    dbs = [store._db_for_partition(p) for p in range(2)]  # type: ignore[attr-defined]
    value = os.urandom(1024)
    for i in range(8 * 1024):
        dbs[i % 2][b"key-%08d" % i] = value
    sst = sum(db.property_int_value("rocksdb.total-sst-files-size") for db in dbs)
    flushing = sum(db.property_int_value("rocksdb.num-immutable-mem-table") for db in dbs)
    assert sst > 0 or flushing > 0
    assert all(dbs[i % 2][b"key-%08d" % i] == value for i in range(0, 8 * 1024, 97))
