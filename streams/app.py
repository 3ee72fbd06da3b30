"""The app factory: one worker's Faust app, wired from topology/ and one Settings.

`create_app(settings)` declares the tables, builds the crawl's parts (frontier,
fetcher, page store), gives each stage of `topology.STAGES` an agent over its step
(a pure function of streams.stages with this worker's tables bound in), and installs
the frontier-fetch loop and the worker's timers from streams.runtime. Nothing here
runs at import time; `run_worker` creates the topics and runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import gc
import logging
import traceback
from pathlib import Path
from typing import Any

import faust
import mode.loop

import topology
from streams.core.filters import FilterConfig
from streams.core.freshness import RevisitPolicy, RevisitSchedule
from streams.core.frontier import Frontier, Politeness
from streams.core.sitemaps import SitemapConfig
from streams.core.traps import TrapRules
from streams.fetch.config import FetchConfig
from streams.fetch.fetcher import Fetcher
from streams.index.fulltext import FullTextIndex
from streams.index.search import INDEX_DIR
from streams.kafka import patches
from streams.kafka.admin import ensure_changelogs, ensure_topics, topic_configs
from streams.kafka.quiet_monitor import QuietMonitor
from streams.runtime.agents import declare_agent
from streams.runtime.crawl_loop import CrawlLoop
from streams.runtime.events import (
    TICK,
    LocalEvent,
    current_offset,
    reset_current_event,
    set_current_event,
)
from streams.runtime.seine_app import SeineApp
from streams.runtime.supervision import HAND_OVER_TIMEOUT, Supervisor, lost_broker
from streams.settings import CrawlPolicy, Settings, gc_thresholds
from streams.stages import dedup, link_extract, parse, seeds, url_filter, url_seen
from streams.stages.anchors import AnchorsStage
from streams.stages.base import Stage
from streams.stages.context import StageContext
from streams.stages.fetch import FetchStage
from streams.stages.indexer import IndexerStage
from streams.store.pagestore import PageStore
from streams.store.storeset import SiblingStores
from streams.tables.produced import FRONTIER_STORE_OPTIONS, ProducedTable
from streams.tables.registry import RegistryTable
from streams.web.observe import register_observe
from streams.web.pages import register_pages
from streams.web.shortlinks import register_shortlinks

__all__ = [
    "HAND_OVER_TIMEOUT",
    "TICK",
    "LocalEvent",
    "SeineApp",
    "create_app",
    "create_topics",
    "current_offset",
    "faust_app",
    "lost_broker",
    "reset_current_event",
    "run_worker",
    "set_current_event",
    "tune_gc",
]

log = logging.getLogger("seine")


def faust_app(settings: Settings) -> faust.App:
    data = Path(settings.data_dir)
    patches.install(settings.kafka)
    return faust.App(
        settings.app_id,
        broker=f"kafka://{settings.kafka.bootstrap}",
        store="rocksdb://",
        datadir=str(data / "faust"),
        tabledir=settings.worker.table_dir or "tables",
        topic_partitions=settings.kafka.partitions,
        # Faust's own default is 1: a changelog on one broker is lost with that broker.
        topic_replication_factor=max(settings.kafka.replication_factor, 1),
        # create_topics made every topic first; Faust declares them again at start
        # through the controller its metadata names, so a worker started while that
        # node is down exits (status 1). Off, a worker's table recovery stalled for
        # good in 3 of 4 runs of the 3-node fault tests, on in 0 of 2; why is not known
        # (docs/OPERATIONS.md, "When a broker dies").
        topic_allow_declare=True,
        topic_disable_leader=True,
        web_enabled=settings.web.web_enabled,
        web_bind=settings.web.web_bind,
        web_port=settings.web.web_port,
        broker_session_timeout=settings.kafka.session_timeout,
        broker_rebalance_timeout=settings.kafka.rebalance_timeout,
        broker_heartbeat_interval=settings.kafka.heartbeat_interval,
        consumer_auto_offset_reset="earliest",
        producer_max_request_size=16 * 1024 * 1024,
        consumer_max_fetch_size=settings.kafka.consumer_fetch_bytes,
        broker_max_poll_records=settings.kafka.max_poll_records,
        producer_linger_ms=2,
        stream_buffer_maxsize=4096,
        table_cleanup_interval=60.0,
        Monitor=QuietMonitor,
        Table=ProducedTable,
        table_standby_replicas=settings.kafka.standby_replicas,
        recovery_consistency_check=settings.kafka.recovery_consistency_check,
        broker_commit_interval=settings.kafka.commit_interval,
    )


def create_app(settings: Settings) -> SeineApp:
    """Build one worker from topology/: its tables, the crawl's parts, one agent per
    stage of `topology.STAGES` (an object each, `_stages`), the frontier ⇄ fetch
    loop's local paths (`topology.LOCAL_PATHS`, `CrawlLoop`), the worker's timers
    (`Supervisor`) and the web services."""
    if not settings.kafka.bootstrap:
        raise ValueError(
            "settings.kafka.bootstrap is empty: start a broker (or the embedded one) first"
        )
    if settings.worker.event_loop == "uvloop":
        # Before the app exists: building it (tables, agents, the producer hooks) takes
        # the thread's event loop, so choosing uvloop in run_worker, as Seine did, was
        # too late and every worker ran on asyncio's selector loop.
        mode.loop.use("uvloop")
    app = faust_app(settings)
    ctx = StageContext(app, settings)
    app.seine_producer = ctx.producer  # type: ignore[attr-defined]
    table = _table_factory(app, settings)
    tables = _declare_tables(app, settings, table)
    the_frontier = Frontier(
        tables["hosts"], tables["queue"], _politeness(settings), ctx.host_partition, write_back=True
    )
    ctx.busy_checks.append(
        lambda: (
            the_frontier.in_flight > 0
            or (the_frontier.queued > 0 and not the_frontier.budget_exhausted())
        )
    )
    revisits = RevisitSchedule(
        tables["revisits"],
        RevisitPolicy(
            settings.crawl.revisit_min, settings.crawl.revisit_max, settings.crawl.revisit_initial
        ),
        ctx.url_partition,
        track_all=settings.crawl.recrawl,
    )
    store = PageStore(
        Path(settings.data_dir) / "pages",
        segment_max_bytes=settings.worker.segment_max_bytes,
        writer_id=settings.worker_id or None,
    )
    fetch_stage = FetchStage(
        ctx,
        Fetcher(_fetch_config(settings)),
        settings.fetch.max_in_flight,
        sitemaps=SitemapConfig(
            enabled=settings.crawl.sitemaps,
            probe=settings.crawl.sitemap_probe,
            max_depth=settings.crawl.sitemap_max_depth,
            max_bytes=settings.fetch.max_sitemap_bytes,
        ),
        revisits=revisits,
        claim=the_frontier.claim,
    )
    siblings = SiblingStores(store.path)
    seine = SeineApp(app, settings, ctx, the_frontier, store, fetch_stage, siblings)
    loop = CrawlLoop(seine, tables, revisits)
    stages = {stage.name: stage for stage in _stages(seine, tables, revisits, loop)}
    if settings.crawl.index:
        seine.indexer = _indexer(seine)
        stages[seine.indexer.name] = seine.indexer
    else:  # the documents topic is still written, for other consumers
        ctx.counters.unconsumed = ctx.counters.unconsumed | {topology.DOCUMENTS.name}
    for spec in topology.STAGES:
        if spec.name == "indexer" and not settings.crawl.index:
            continue
        declare_agent(app, ctx, spec.source, stages.pop(spec.name))
    if stages:
        raise ValueError(f"stages topology does not declare: {sorted(stages)}")
    loop.install()
    Supervisor(seine, tables.values()).install()
    register_shortlinks(app, settings, table, click_count_window=settings.web.link_click_window)
    register_pages(app, settings, store, ctx.url_partition)
    if settings.web.web_enabled:
        register_observe(seine)
    return seine


def _anchors(seine: SeineApp, table: Any, revisits: RevisitSchedule) -> AnchorsStage:
    """The anchors stage, and the timer that sends again the documents whose pages
    got new anchors (the crawl is busy while any wait)."""
    ctx, settings = seine.ctx, seine.settings
    frontier = seine.frontier
    stage = AnchorsStage(
        ctx,
        table,
        seine.store,
        revisits,
        settings.crawl.anchor_refresh_interval,
        # nothing left to fetch here: the inlinks still to come are in the pipeline
        ending=lambda: not (frontier.queued or frontier.in_flight or ctx.counters.fetch_in_flight),
    )
    out = ctx.outbox()
    ctx.busy_checks.append(lambda: bool(stage.dirty))

    # checked often (a cheap test): when anchors stop coming the crawl's end waits for
    # these resends, RESEND_BATCH a tick
    @seine.app.timer(max(0.02, min(0.1, settings.crawl.anchor_refresh_interval / 2)))
    async def resend_documents() -> None:
        if stage.due():
            stage.refresh(out)
            await out.flush()

    return stage


def _indexer(seine: SeineApp) -> IndexerStage:
    """The indexer stage over this worker's full-text index, and the timer that
    commits what waits when no document comes."""
    settings = seine.settings
    indexer = IndexerStage(
        FullTextIndex(Path(settings.data_dir) / INDEX_DIR, writable=True),
        settings.crawl.index_commit_interval,
        limits=seine.ctx.limits,
    )

    @seine.app.timer(max(settings.crawl.index_commit_interval / 2, 0.1))
    async def commit_index() -> None:
        indexer.commit_due()

    return indexer


def _table_factory(app: faust.App, settings: Settings) -> Any:
    """A plain table of this worker (str keys, values of any JSON shape, a changelog
    with the topic settings of the crawl's other topics: min.insync.replicas on a
    replicated cluster; Faust sets compaction)."""
    changelog_configs = topic_configs(settings)

    def table(name: str, options: dict[str, Any] | None = None) -> Any:
        return app.Table(
            name,
            default=None,
            partitions=settings.kafka.partitions,
            key_type=str,
            options=options,
            extra_topic_configs=changelog_configs,
        )

    return table


def _declare_tables(app: faust.App, settings: Settings, table: Any) -> dict[str, Any]:
    """The crawl's tables, by the names topology's stages list."""
    # url-seen's exact store: the URL registry layout (site id + URL hash keys,
    # one WriteBatch and one changelog record per message), see registry_table.py.
    seen_table = RegistryTable(
        app,
        name="seen",
        default=None,
        beacon=app.tables.beacon,
        partitions=settings.kafka.partitions,
        key_type=bytes,
        value_type=bytes,
        extra_topic_configs=topic_configs(settings),
    )
    app.tables.add(seen_table)
    return {
        "seen": seen_table,
        "scope": table("scope"),
        "hosts": table("hosts", FRONTIER_STORE_OPTIONS),
        "queue": table("queue", FRONTIER_STORE_OPTIONS),
        "fingerprints": table("fingerprints"),
        "simhash-bands": table("simhash-bands"),
        "sites": table("sites"),
        #: URLs whose crawl ended without a stored page (see streams/ops/resume.py).
        "done": table("done"),
        #: URL → revisit record; written by link-extract and frontier, both in the
        #: host's partition
        "revisits": table("revisits"),
        #: URL → anchor texts of its inlinks (streams/core/anchors.py)
        "anchors": table("anchors"),
    }


def _politeness(settings: Settings) -> Politeness:
    return Politeness(
        delay=settings.crawl.delay,
        max_crawl_delay=settings.crawl.max_crawl_delay,
        response_time_factor=settings.crawl.response_time_factor,
        user_agent=settings.fetch.user_agent,
        fetch_lease=settings.fetch.fetch_lease,
        robots_retry=settings.crawl.robots_retry,
        robots_ttl=settings.crawl.robots_ttl,
        max_retry_wait=settings.crawl.max_retry_wait,
        max_pages=settings.crawl.max_pages,
        max_host_pages=settings.crawl.max_host_pages,
        max_host_queue=settings.crawl.max_host_queue,
        refetch_hold=refetch_hold(settings),
    )


def refetch_hold(settings: Settings) -> float:
    """`Politeness.refetch_hold`: its 10 s where workers hold their partitions by index
    (the embedded broker); in a consumer group, a session timeout more, since the
    dead worker's partitions, and the fetch results to read again, move only once the
    group has noticed (a run on Apache Kafka with a 6 s session timeout read one
    again 10.0 s after its fetch, as the refetch went: two records of the page)."""
    if settings.kafka.members:
        return Politeness.refetch_hold
    return Politeness.refetch_hold + settings.kafka.session_timeout


def _fetch_config(settings: Settings) -> FetchConfig:
    return FetchConfig(
        user_agent=settings.fetch.user_agent,
        connect_timeout=settings.fetch.connect_timeout,
        read_timeout=settings.fetch.read_timeout,
        total_timeout=settings.fetch.total_timeout,
        max_body_bytes=settings.fetch.max_body_bytes,
        allow_private=settings.fetch.allow_private,
        resolve=dict(settings.fetch.resolve),
        max_sitemap_bytes=settings.fetch.max_sitemap_bytes,
    )


def trap_rules(crawl: CrawlPolicy) -> TrapRules:
    """url-filter's shape rules from the crawl's settings, the calendar window
    centred on this year."""
    return TrapRules(
        max_url_length=crawl.max_url_length,
        max_path_depth=crawl.max_path_depth,
        max_segment_repeats=crawl.max_segment_repeats,
        calendar_years_ahead=crawl.calendar_years_ahead,
        calendar_years_back=crawl.calendar_years_back,
        this_year=datetime.datetime.now(datetime.UTC).year,
        strip_session_ids=crawl.strip_session_ids,
    )


def _stages(
    seine: SeineApp, tables: dict[str, Any], revisits: RevisitSchedule, loop: CrawlLoop
) -> list[Stage]:
    """One object per stage of topology.STAGES (streams.stages.base.Stage), each built
    from this worker's tables and parts."""
    ctx, settings = seine.ctx, seine.settings
    seen_table = tables["seen"]
    seen_filters = url_seen.SeenFilters(
        settings.crawl.bloom_capacity, settings.crawl.bloom_error_rate
    )
    ctx.seen_filters = seen_filters
    seen_table.store.on_partition_change.append(seen_filters.drop)
    filter_config = FilterConfig(
        max_depth=settings.crawl.max_depth,
        same_host=settings.crawl.same_host,
        traps=trap_rules(settings.crawl),
    )
    return [
        seeds.SeedsStage(ctx),
        url_seen.UrlSeenStage(
            seen_table,
            seen_table.store.partition_keys,
            tables["scope"],
            seen_filters,
            current_offset,
            sitemap_ttl=settings.crawl.robots_ttl if settings.crawl.sitemaps else 0.0,
            resend_grace=settings.crawl.resend_grace,
        ),
        loop,
        seine.fetch,
        parse.ParseStage(ctx),
        dedup.DedupStage(ctx, tables["fingerprints"], tables["simhash-bands"]),
        link_extract.LinkExtractStage(
            ctx, seine.store, revisits, tables["anchors"], siblings=seine.siblings
        ),
        url_filter.UrlFilterStage(filter_config, tables["scope"], tables["sites"]),
        _anchors(seine, tables["anchors"], revisits),
    ]


def tune_gc(settings: Settings) -> None:
    """Freeze what start-up built and set the cyclic GC's thresholds for the run.

    Everything built so far (modules, the app, its tables and agents) lives as long
    as the worker: freezing it keeps the cyclic GC's full collections from walking
    it again and again, which showed as 40-130 ms pauses of the event loop (p99 of
    redirects, and every stage's latency) on a busy worker. With Python's gen0
    threshold of 700 a busy worker then still spent ~2% of its CPU in young
    collections (~75 a second, each ~0.17 ms, finding next to nothing: its garbage
    is freed by reference counting), hence `Settings.worker.gc_threshold`.
    """
    gc.collect()
    gc.freeze()
    thresholds = gc_thresholds(settings.worker.gc_threshold)
    if thresholds:
        gc.set_threshold(*thresholds)


def create_topics(seine: SeineApp) -> list[str]:
    """Every topic the worker will consume, created before its consumer subscribes:
    the stage and service topics of topology/, and the tables' changelogs (a topic
    created after the subscription is not assigned until a metadata refresh).
    Returns the names created."""
    settings = seine.settings
    changelogs = {
        table.changelog_topic.get_topic_name(): table.partitions or settings.kafka.partitions
        for table in seine.app.tables.values()
    }
    return ensure_topics(settings) + ensure_changelogs(settings, changelogs)


def report_crash(settings: Settings, exc: BaseException) -> None:
    """One line on the log; the traceback, which names the code that failed, in
    DATA_DIR/crash.log (appended: a crash is a bug to report)."""
    path = Path(settings.data_dir) / "crash.log"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as out:
            out.write("".join(traceback.format_exception(exc)) + "\n")
    except OSError:
        log.error("worker crashed: %r", exc)
        return
    log.error("worker crashed: %r (traceback in %s)", exc, path)


def run_worker(seine: SeineApp) -> int:
    """Run the worker until it is stopped (signal, or idle with --until-idle)."""
    create_topics(seine)
    worker = faust.Worker(
        seine.app,
        loglevel=seine.settings.log_level,
        quiet=True,
        redirect_stdouts=False,
    )
    # Faust's startup spinner sets the root logger to DEBUG, so every log.debug in
    # aiokafka and mode builds a record (~6% of a busy worker); and it writes
    # terminal escapes. Seine shows its own progress.
    worker.spinner = None
    seine.worker = worker
    tune_gc(seine.settings)
    try:
        worker.execute_from_commandline()
    except SystemExit as done:
        # mode exits 1 when the worker's start raised (it logged the traceback)
        if done.code and not seine.exit_code:
            seine.exit_code = done.code if isinstance(done.code, int) else 1
    except Exception as exc:  # mode re-raises the reason a service crashed
        report_crash(seine.settings, exc)
        seine.exit_code = 1
    finally:
        if worker.crash_reason is not None:
            report_crash(seine.settings, worker.crash_reason)
            seine.exit_code = 1
        gc.collect()  # closes any table database left in a cycle (`release_databases`)
        seine.store.close()
        seine.siblings.close()
        if seine.indexer is not None:
            seine.indexer.close()
        seine.ctx.producer.close()
        seine.ctx.journal.close()
        seine.ctx.dead_journal.close()
        with contextlib.suppress(Exception):
            asyncio.run(seine.fetch.close())
    return seine.exit_code
