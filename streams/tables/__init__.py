"""Faust tables as Seine keeps them: `produced.ProducedTable` (a Faust table whose
changelog goes out through the stages' librdkafka producer, and the RocksDB options
of the frontier's tables), `registry.RegistryTable` (url-seen's exact URL store: the
URL registry's layout inside a Faust table, one changelog record per handled message)
and `budget` (one block cache and one write-buffer budget shared by every RocksDB
database of a worker).

May import faust, rocksdict, orjson, streams.core and streams.store.url_registry;
never a stage, streams.runtime, streams.app or streams.cli (the stages are handed
their tables).
"""
