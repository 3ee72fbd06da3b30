"""Seine: a web crawler for search indexing, built as Faust stages on Kafka.

Where things live (topology/ beside this package declares the topics and stages):

- `app` builds one worker from topology/ and `settings` (one frozen `Settings`).
- `core`: the crawl's logic, pure and unit-tested on its own (URLs, robots.txt,
  filters, the frontier's model, dedup, freshness, the records stages exchange).
- `stages`: one module per stage, a `handle` over core plus the `Stage` object its
  agent runs; `runtime`: the Faust glue (agents, the frontier ⇄ fetch loop, timers).
- `fetch`: the fetcher (SSRF guard, DNS, decoding, handlers); `store`: the page store
  (WARC segments, index, SURT, CDXJ); `codec`: the wire format of every topic.
- `kafka`: brokers (embedded Tansu, local Apache Kafka), admin, the producer, client
  patches; `ops`: running a crawl as a whole (workers, resume, crawl log, progress).
- `tables`: Faust tables as Seine keeps them (written through Seine's producer,
  url-seen's registry, their shared RocksDB memory).
- `web`: dashboard, API, short links; `demo`: the bundled demo web; `cli`: `seine`.
"""
