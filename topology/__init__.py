"""The whole crawl topology, read top to bottom: every topic once, then the stage graph.

    seeds ──┐   url-seen ──► frontier ──► fetch ──► parse ──► content-dedup
            │      ▲            ▲  │                              │
            │      │            └──┘ completions, ticks           ▼
            └─► url-filter ◄─────────────────────────────── link-extract
    crawl-log   ◄── every fetch outcome and every decision not to fetch
    dead-letters ◄── every message a stage could not process, with the reason

Keying: "host" topics are partitioned by jump consistent hash of the URL's site
key (host without "www."), chosen by the producer with `host_partition` below,
so one partition (and so one worker) owns all of a host's URLs, queue, robots
rules and politeness clock. content-dedup is keyed by content fingerprint so
identical pages from any host meet in one partition. Nothing here reads settings:
the partition count of "scaled" topics comes from Settings.kafka.partitions when the app
is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from streams.core.partitioning import partition_for
from streams.core.urls import host_of, site_key

Keying = Literal["host", "fingerprint", "link", "none"]


@dataclass(frozen=True)
class TopicSpec:
    """One topic: its name suffix, how it is keyed, and its value schema."""

    name: str
    key: Keying
    schema: str
    #: True: the topic has Settings.kafka.partitions partitions. False: a single partition.
    scaled: bool = True
    doc: str = ""
    #: Kept compacted (the newest value per key; a null value deletes the key).
    compacted: bool = False


SEEDS = TopicSpec(
    "seeds",
    "host",
    "seed",
    doc="Seeds from producers: a plain URL line, JSON {url, priority} or the Avro record.",
)
URL_SEEN = TopicSpec(
    "url-seen", "host", "url_batch", doc="Candidate URLs to check against the seen set."
)
FRONTIER = TopicSpec(
    "frontier",
    "host",
    "frontier_event",
    doc="New URLs, fetch completions and ticks for the per-host scheduler.",
)
FETCH = TopicSpec("fetch", "host", "fetch_batch", doc="Due fetches, at most one per host.")
PARSE = TopicSpec(
    "parse", "host", "page_batch", doc="Fetched HTML pages (the only topic a body crosses)."
)
CONTENT_DEDUP = TopicSpec(
    "content-dedup",
    "fingerprint",
    "parsed_batch",
    doc="Parsed pages (without their bodies) keyed by content fingerprint (a simhash "
    "band, or the exact fingerprint of a page without words), so duplicates meet "
    "across hosts.",
)
LINK_EXTRACT = TopicSpec(
    "link-extract",
    "host",
    "parsed_batch",
    doc="First copies of pages: stored, and their links resolved.",
)
URL_FILTER = TopicSpec(
    "url-filter",
    "host",
    "url_batch",
    doc="Resolved links, grouped by the partition of their host.",
)
CRAWL_LOG = TopicSpec(
    "crawl-log", "host", "crawl_log", doc="One record per fetch outcome or decision."
)
ANCHORS = TopicSpec(
    "anchors",
    "host",
    "anchor_batch",
    doc="Anchor texts of links, grouped by the partition of their target's host.",
)
DOCUMENTS = TopicSpec(
    "documents",
    "host",
    "document",
    doc="Public: what a search index consumes, one record per page, keyed by its id "
    "(the canonical URL); a null value deletes the id. Plain Avro, "
    "schemas/document.avsc.",
    compacted=True,
)
DEAD_LETTERS = TopicSpec(
    "dead-letters",
    "none",
    "dead_letter",
    scaled=False,
    doc="Messages a stage could not process, with the reason.",
)

TOPICS: tuple[TopicSpec, ...] = (
    SEEDS,
    URL_SEEN,
    FRONTIER,
    FETCH,
    PARSE,
    CONTENT_DEDUP,
    LINK_EXTRACT,
    URL_FILTER,
    ANCHORS,
    DOCUMENTS,
    CRAWL_LOG,
    DEAD_LETTERS,
)

#: The short-link service's topics (streams.web.shortlinks), beside the crawl's.
#: "link" keying: a long URL's home partition, from its first short code's hash.
#: They are created up front with the crawl's: a consumer that subscribes before
#: a topic exists is not assigned its partitions until its next metadata refresh
#: (minutes on Apache Kafka, which does not auto-create topics).
LINKS_CREATE = TopicSpec(
    "links-create", "link", "json", doc="Short-link creations and expiry sweeps, per partition."
)
LINK_CLICKS = TopicSpec("link-clicks", "link", "json", doc="Redirect clicks, batched per second.")
SERVICE_TOPICS: tuple[TopicSpec, ...] = (LINKS_CREATE, LINK_CLICKS)


@dataclass(frozen=True)
class StageSpec:
    """A stage: the Faust agent that consumes `source` and may produce to `sinks`."""

    name: str
    source: TopicSpec
    sinks: tuple[TopicSpec, ...]
    tables: tuple[str, ...] = ()
    doc: str = ""


STAGES: tuple[StageSpec, ...] = (
    StageSpec(
        "seeds",
        SEEDS,
        (URL_FILTER, DEAD_LETTERS),
        doc="Validate and canonicalize seeds; send them through url-filter (site mapping).",
    ),
    StageSpec(
        "url-seen",
        URL_SEEN,
        (FRONTIER, CRAWL_LOG),
        ("seen",),
        doc="Pass each URL the first time only (one it cannot key is logged as filtered).",
    ),
    StageSpec(
        "frontier",
        FRONTIER,
        (FETCH, CRAWL_LOG),
        ("hosts", "queue", "done", "revisits"),
        doc="Per-host FIFO queues, robots.txt, one request in flight per host, delays; "
        "due revisits and re-fed URLs.",
    ),
    StageSpec(
        "fetch",
        FETCH,
        (PARSE, FRONTIER, URL_FILTER, DOCUMENTS, CRAWL_LOG),
        doc="HTTP GET with timeouts and caps (conditional on revisits); completions go back "
        "to the frontier; sitemaps and their entries go to url-filter; a page gone "
        "(404, 410) or redirected away deletes its document.",
    ),
    StageSpec(
        "parse",
        PARSE,
        (CONTENT_DEDUP,),
        doc="Title, text fingerprint, links, <base>, meta robots; the body stays in the "
        "worker's hand-off cache for link-extract (same host partition, same worker).",
    ),
    StageSpec(
        "content-dedup",
        CONTENT_DEDUP,
        (LINK_EXTRACT, CONTENT_DEDUP, CRAWL_LOG),
        ("fingerprints", "simhash-bands"),
        doc="The first page with a fingerprint goes on; later ones are duplicates; a "
        "first copy then visits its simhash bands' partitions, one hop each, to find "
        "near-duplicates.",
    ),
    StageSpec(
        "link-extract",
        LINK_EXTRACT,
        (URL_FILTER, FRONTIER, ANCHORS, DOCUMENTS, CRAWL_LOG),
        ("revisits", "anchors"),
        doc="Store the page (WARC + index; the body from the hand-off cache) and its "
        "revisit record; resolve and canonicalize its links; send its document (text, "
        "language, canonical, anchors of its inlinks) and its links' anchor texts, or "
        "delete it (noindex, a duplicate). A body not in the "
        "cache: the page is re-fed to the frontier and fetched again.",
    ),
    StageSpec(
        "url-filter",
        URL_FILTER,
        (URL_SEEN, CRAWL_LOG),
        ("scope",),
        doc="Scope, depth and trap rules: return the URL or drop it with a reason.",
    ),
    StageSpec(
        "anchors",
        ANCHORS,
        (DOCUMENTS, CRAWL_LOG),
        ("anchors",),
        doc="Keep a bounded set of anchor texts per target URL (distinct texts and "
        "source sites); a page whose document was sent before new anchors came is "
        "sent again, in batches, rebuilt from the page store.",
    ),
    StageSpec(
        "indexer",
        DOCUMENTS,
        (),
        doc="The sink: apply documents and deletions to this worker's full-text index "
        "(Tantivy under its data dir), committed in batches. Off with --no-index.",
    ),
)


@dataclass(frozen=True)
class LocalPath:
    """A hop between two stages that stays inside the worker holding both partitions
    (the topics are co-partitioned), in place of its topic: the topic carries only
    what the worker could not pass on itself (another worker holds the partition, a
    rebalance or a drain is under way). `setting` is the setting whose zero turns it
    off (None: always on)."""

    source: str
    target: str
    stands_for: TopicSpec | None
    setting: str | None
    doc: str = ""


LOCAL_PATHS: tuple[LocalPath, ...] = (
    LocalPath(
        "frontier",
        "fetch",
        FETCH,
        None,
        doc="A dispatched request starts in the frontier's own worker, once the table "
        "records naming it are acknowledged (one dispatched during a rebalance, once "
        "it is over).",
    ),
    LocalPath(
        "fetch",
        "frontier",
        FRONTIER,
        None,
        doc="A fetch's completion is applied by the worker's frontier at its end, once "
        "its page is acknowledged; the host's next fetch is dispatched there and then.",
    ),
    LocalPath(
        "parse",
        "link-extract",
        None,
        "handoff_cache_bytes",
        doc="The page body stays in the worker's hand-off cache; content-dedup and "
        "link-extract messages carry its digest (a miss fetches the page again).",
    ),
)


def topic_name(app_id: str, spec: TopicSpec) -> str:
    return f"{app_id}.{spec.name}"


def diagram() -> str:
    """The stages and topics above as a text block (docs/ARCHITECTURE.md holds a copy).

    Three tables: each stage with the topic it consumes, the topics it may produce to
    and its tables; each topic with its keying, partition count ("N":
    Settings.kafka.partitions), value schema and consuming stage; and the hops that stay
    inside a worker (LOCAL_PATHS) with the topic each stands in for.
    """
    from collections.abc import Sequence

    def table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
        widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
        return [
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in (header, *rows)
        ]

    def names(specs: tuple[TopicSpec, ...] | tuple[str, ...]) -> str:
        return ", ".join(s if isinstance(s, str) else s.name for s in specs) or "-"

    consumer = {stage.source.name: stage.name for stage in STAGES}
    stage_rows = [
        (stage.name, stage.source.name, names(stage.sinks), names(stage.tables)) for stage in STAGES
    ]
    topic_rows = [
        (
            spec.name,
            spec.key,
            "N" if spec.scaled else "1",
            spec.schema,
            consumer.get(spec.name, "(short links)" if spec in SERVICE_TOPICS else "-"),
        )
        for spec in (*TOPICS, *SERVICE_TOPICS)
    ]
    path_rows = [
        (
            f"{path.source} -> {path.target}",
            path.stands_for.name if path.stands_for else "-",
            path.setting or "(always on)",
        )
        for path in LOCAL_PATHS
    ]
    lines = [
        *table(("stage", "consumes", "produces", "tables"), stage_rows),
        "",
        *table(("topic", "key", "partitions", "schema", "consumed by"), topic_rows),
        "",
        *table(("local path", "in place of", "off when 0"), path_rows),
    ]
    return "\n".join(lines) + "\n"


def host_partition(host: str, partitions: int) -> int:
    """The partition that owns a host in every "host"-keyed topic and table: jump
    consistent hash of its site key (no port, no leading "www."). `host` is a host
    name or an authority ``host:port`` (IPv6 in brackets). Every producer of a
    host-keyed message asks here, so a host has one owner."""
    name = host.lower()
    if name.startswith("["):
        name = name[: name.find("]") + 1] or name
    elif name.count(":") == 1:
        name = name.split(":", 1)[0]
    return partition_for(site_key(name), partitions)


def url_partition(url: str, partitions: int) -> int:
    """The partition that owns an absolute URL's host (`host_partition`)."""
    return host_partition(host_of(url), partitions)
