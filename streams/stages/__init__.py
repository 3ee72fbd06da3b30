"""The crawl's stages, one module each, thin over the pure logic of streams.core.

Each module holds its stage's `handle` function (the work on one decoded batch, its
tables and outbox passed in, so a unit test calls it directly) and a small class that
binds a worker's parts to it and meets `base.Stage`, the one protocol an agent runs
(`streams.runtime.agents.declare_agent`); the frontier stage is
`streams.runtime.crawl_loop.CrawlLoop`. `context` holds what every stage shares: the
outbox, the counters, the producer and the dead letters; `documents` what link-extract,
fetch and anchors send to the documents topic; the indexer is the sink at the end.

May import topology, streams.core, streams.fetch, streams.store, streams.index,
streams.codec, streams.settings, streams.kafka.producer (through context) and, for the
recrawl replay, confluent-kafka; never streams.runtime, streams.app or streams.cli.
"""
