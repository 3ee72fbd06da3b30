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
- `web`: dashboard, API, short links; `demo`: the bundled demo web; `cli`: `seine`.
- Faust tables: `tables` (tables written through Seine's producer), `registry_table`
  (url-seen's registry), `rocksdb_budget` (their shared memory), `storeset` (the page
  stores of several workers read as one); `exits`: how a command ends.
"""
