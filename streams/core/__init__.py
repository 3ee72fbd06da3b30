"""The crawl's logic, each piece unit-testable on its own: URLs (WHATWG parsing,
canonical forms, SURT keys), trap guards on a URL's shape (`traps`: length,
depth, repeated segments, calendar dates, session ids), robots.txt, filters and
sites, the Bloom filter, the frontier's model and its queues over a key-value store,
politeness and leases,
simhash and dedup bands, freshness, sitemaps, bounded Content-Encoding decoding
(`decode`, which the fetcher and the sitemap reader share), poison screening, crawl
statistics, a page's main text and language (`text`), its header directives
(`directives`: X-Robots-Tag, the Link canonical), and `records`, the TypedDicts of
what stages hand each other.

Imports the standard library, parsing and hashing libraries (ada-url, selectolax,
lxml, resiliparse, mmh3, numpy, orjson) and itself only: no Kafka client, no aiohttp, no Faust,
no RocksDB, and nothing else of Seine (the URL registry's keys and values are here;
its RocksDB table is streams.store.url_registry).
"""
