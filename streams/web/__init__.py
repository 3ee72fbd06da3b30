"""HTTP endpoints served by a worker's Faust web server (aiohttp, localhost by
default): the dashboard and its metrics (`observe`, Prometheus text and /stats.json),
pages by URL (`pages`), full-text search over every worker's index (`search`), and
short links (`shortlinks*`: codes over stored URLs, their 301/302 redirects, click
counts; `redirect_process`/`redirect_server` serve the redirects from a process of
their own).

May import aiohttp, faust, topology, streams.settings, streams.core, streams.kafka
(the redirect process's producer), streams.index and each other; never streams.app,
streams.cli or a stage: the app registers these routes.
"""
