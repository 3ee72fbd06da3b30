"""HTTP fetching, one module per concern: `Fetcher` and its request loop (fetcher),
`FetchConfig` (config), the SSRF guard's address policy (guard), name resolution
through the guard with a TTL cache (resolver), reading a response capped and decoded
(response, with streams.core.decode's bounded decoders), and the content-type
handlers with `FetchResult` (handlers). This package is pure of the pipeline: it
may import the standard library, aiohttp, yarl, aiodns and the optional brotli /
zstd bindings, and pure helpers of streams.core (such as streams.core.urls); it
never imports Faust or a Kafka client, streams.stages or streams.app. Nothing is
re-exported here: import a name from the module that owns it.
"""
