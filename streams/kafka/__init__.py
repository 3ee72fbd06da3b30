"""Seine's side of Kafka: the clients and brokers it runs, and the patches it needs.

`broker` starts the embedded Tansu; `local` fetches Apache Kafka's jars and runs a
local KRaft cluster; `admin` creates and checks topics (partition counts,
replication, min.insync.replicas) and reads offsets; `producer` is the one
librdkafka producer every stage and table changelog sends through, with delivery
tracking; `patches` holds the patches of faust-streaming and aiokafka, one per
module, each saying why, and on which broker and versions it is needed;
`consumer_state` reads where a worker's consumer stands on each partition (for a
stalled crawl's report); `quiet_monitor` keeps Faust's monitor from growing with
the crawl.

May import topology, streams.settings and streams.core; never streams.stages,
streams.runtime, streams.app or streams.cli.
"""
