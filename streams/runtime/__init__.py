"""The Faust glue of one worker: how its agents, timers and rebalance hooks are built.

`streams.app.create_app` wires a worker from topology/ and these parts:
`agents.declare_agent` turns a stage (`streams.stages.base.Stage`: a step over a
decoded batch) into a Faust agent (decode, screen, step, flush, count, dead-letter);
`crawl_loop.CrawlLoop` is the frontier and fetch stages of one worker as the one
loop they are (a dispatch starts its fetch here, a fetch's end applies its
completion here); `supervision` holds the worker's timers (idle, drain and hand-over,
stuck partitions, a lost cluster); `seine_app.SeineApp` is the handle a command or a
test holds; `events` points table writes at the right changelog partition.

May import faust, mode, topology, streams.stages, streams.core and the Kafka glue
(streams.kafka.producer, streams.kafka.consumer_state); never streams.app or streams.cli.
"""
