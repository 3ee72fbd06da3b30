"""The crawl's stores on disk: the page store (every fetched page kept as WARC 1.1
segments plus a RocksDB index, readable by URL, exportable as CDXJ), ``storeset``
(the stores of several workers read as one), ``linkgraph`` (the stored pages' links
as page and host edge lists), ``journal`` (the crawl log and dead letters kept as
JSON lines beside the pages) and
``url_registry``, url-seen's RocksDB table of URLs and their crawl state (its keys
and values are streams.core.registry's).  Modules here may import the standard library,
rocksdict, warcio and isal, streams.core, and each other; never Kafka, Faust or aiohttp, and never
``streams.stages`` or ``streams.app`` -- the store is unit-testable on plain files, and
the CLI and web readers open it without starting a worker.

``pagestore`` holds ``PageStore`` (what callers use) and ``Capture``; under it,
``segments`` (segment files: names, rotation, the writer, read descriptors), ``warc``
(record bytes, dates, digests, header hygiene, validation of a put), ``gzipmembers``
(one record a gzip member: the deflating stream and the hand-written readers),
``index`` (index keys and values), ``cdxj`` (the sorted CDXJ export) and ``surt`` (the
SURT keys pywb looks CDXJ lines up by).  Imports run one way: ``surt`` and ``index``
import nothing of ours, ``pagestore`` imports the rest.
"""
