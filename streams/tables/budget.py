"""One memory budget for all of a worker's RocksDB databases.

Faust opens one RocksDB database per table and partition (12 tables x 8 partitions:
96 databases in a one-worker crawl), each with options sized for a few large
tables: a 2 GB block cache of its own and up to three 64 MB memtables. Nothing
bounds their sum, so a worker's memory grew with the data it had written: a
memtable is flushed only when it reaches 64 MB, which a partition of a 100,000-page
crawl never does, so the tables lived in memory (bench/load.py, BENCHMARKS.md).

Here every database of the process shares one block cache and one write buffer
manager: when the memtables of all the databases together pass the budget, the
database being written flushes its memtable to disk. The worker's RocksDB memory is
then bounded by the two budgets (plus table readers, small at these sizes) however
many tables, partitions and URLs there are. Per-database write buffers stay small so
that a quiet database does not sit on a large memtable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import rocksdict
from faust.stores import rocksdb as faust_rocksdb

#: Block cache shared by every database of the process (reads of data blocks).
CACHE_BYTES = 64 * 1024 * 1024
#: All the memtables of the process together (the write buffer manager's limit).
WRITE_BUFFER_BYTES = 96 * 1024 * 1024
#: One memtable's size before it is flushed (Faust's default is 64 MB).
DB_WRITE_BUFFER_SIZE = 4 * 1024 * 1024
#: Memtables a database keeps (the mutable one and one being flushed).
DB_MAX_WRITE_BUFFERS = 2

_shared: tuple[rocksdict.Cache, rocksdict.WriteBufferManager] | None = None


def shared() -> tuple[rocksdict.Cache, rocksdict.WriteBufferManager]:
    """The process's block cache and write buffer manager (made on first use)."""
    global _shared
    if _shared is None:
        cache = rocksdict.Cache(CACHE_BYTES)
        manager = rocksdict.WriteBufferManager(WRITE_BUFFER_BYTES, False)
        _shared = (cache, manager)
    return _shared


class BudgetOptions(faust_rocksdb.RocksDBOptions):
    """Faust's RocksDB options, with the process's shared cache and write budget.

    A table's own ``write_buffer_size``/``max_write_buffer_number`` still apply when
    they are smaller; ``block_cache_size`` is ignored (the cache is shared).
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.write_buffer_size = min(self.write_buffer_size, DB_WRITE_BUFFER_SIZE)
        self.max_write_buffer_number = min(self.max_write_buffer_number, DB_MAX_WRITE_BUFFERS)

    def open(self, path: Path, *, read_only: bool = False) -> Any:
        if not self.use_rocksdict:  # pragma: no cover - python-rocksdb is not installed
            return super().open(path, read_only=read_only)
        options = self.as_options()
        access = (
            rocksdict.AccessType.read_write()
            if self.ttl is None
            else rocksdict.AccessType.with_ttl(self.ttl)
        )
        db = rocksdict.Rdict(str(path), options=options, access_type=access)
        db.set_read_options(rocksdict.ReadOptions())
        return db

    def as_options(self) -> Any:
        if not self.use_rocksdict:  # pragma: no cover
            return super().as_options()
        cache, manager = shared()
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        if self.max_open_files is not None:
            options.set_max_open_files(self.max_open_files)
        options.set_write_buffer_size(self.write_buffer_size)
        options.set_target_file_size_base(self.target_file_size_base)
        options.set_max_write_buffer_number(self.max_write_buffer_number)
        options.set_write_buffer_manager(manager)
        table = rocksdict.BlockBasedOptions()
        table.set_bloom_filter(self.bloom_filter_size, True)
        table.set_block_cache(cache)
        table.set_index_type(rocksdict.BlockBasedIndexType.binary_search())
        options.set_block_based_table_factory(table)
        return options


def budget(store: faust_rocksdb.Store) -> None:
    """Give a Faust rocksdb store the process's shared budget (call in its __init__)."""
    old = store.rocksdb_options
    options = BudgetOptions(
        max_open_files=old.max_open_files,
        write_buffer_size=old.write_buffer_size,
        max_write_buffer_number=old.max_write_buffer_number,
        target_file_size_base=old.target_file_size_base,
        bloom_filter_size=old.bloom_filter_size,
        use_rocksdict=old.use_rocksdict,
        ttl=old.ttl,
        **old.extra_options,
    )
    store.rocksdb_options = options
