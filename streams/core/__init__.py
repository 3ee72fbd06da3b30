"""The crawl's logic, each piece unit-testable on its own: URLs (WHATWG parsing,
canonical forms, SURT keys), robots.txt, filters and sites, the Bloom filter, the
frontier's model and its queues over a key-value store, politeness and leases,
simhash and dedup bands, freshness, sitemaps, seeds, poison screening, crawl
statistics, and `records`, the TypedDicts of what stages hand each other.

Imports no Kafka client, no aiohttp, no Faust and no RocksDB (the URL registry's
keys and values are here; its RocksDB table is streams.store.url_registry). Two
pieces reach into Seine's other pure parts: `seeds` decodes an Avro seed with
streams.codec, and `sitemaps` gunzips with streams.fetch.decode's bounded decoder.
"""
