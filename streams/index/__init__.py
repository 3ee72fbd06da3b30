"""The embedded full-text index: the documents of a crawl (schemas/document.avsc) in
Tantivy, one index per worker under its data dir, and the search over every index
of a crawl merged by score.

`fulltext` holds the index itself (fields, boosts, applying a document or a
tombstone, batched commits, searching with snippets); `search` finds a crawl's
indexes and merges their hits. No Kafka and no network: the indexer stage
(streams/stages/indexer.py) and the CLI and web front ends are thin over these.
May import tantivy, the standard library and streams.core.
"""
