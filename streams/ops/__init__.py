"""Running a crawl as a whole, around its workers: `multiworker` starts N worker
processes of one app and decides when the crawl is idle (`ending`: when an idle
crawl still waits for a partition held at a message never handled); `resume`
prepares a data dir whose tables outlived their broker's topics; `crawllog` reads
the crawl-log topic (for `seine status` and the end-of-crawl checks); `progress`
prints a crawl's progress on a terminal or as plain lines; `exits` holds the exit
statuses every command, the supervisor and the worker agree on; `hung_workers`
kills a worker that stopped reporting.

May import topology, streams.settings, streams.core, streams.kafka and streams.store
(resume also reuses the outbox's chunking of streams.stages); never streams.app or
streams.cli: the CLI starts workers as processes.
"""
