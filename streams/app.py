"""The app factory: one Faust app, built from one Settings object.

`create_app(settings)` declares the topics (from topology/), the tables and one
agent per stage; the agents are short loops that decode a message, hand it to the
stage's function, and flush that stage's outbox. Nothing here runs at import time.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import logging
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import faust
import faust.streams as faust_streams
import mode.loop

import topology
from streams import codec
from streams.admin import ensure_changelogs, ensure_topics, topic_configs
from streams.consumer_state import hold_gaps, lagging_partitions, refetch_skips, rewind
from streams.core.filters import FilterConfig
from streams.core.freshness import RevisitPolicy, RevisitSchedule
from streams.core.frontier import Frontier, Politeness
from streams.core.poison import oversized, screen
from streams.core.seeds import InvalidSeed
from streams.core.sitemaps import SitemapConfig
from streams.core.stall import StuckPartitions
from streams.exits import EXIT_BROKER_LOST
from streams.fetch.config import FetchConfig
from streams.fetch.fetcher import Fetcher
from streams.kafka_tuning import (
    guard_commits,
    set_fetch_max_wait,
    stop_verifying_highwaters,
    verify_highwaters,
)
from streams.multiworker import write_status
from streams.producer import Deliveries, hook_into_commits
from streams.quiet_monitor import QuietMonitor
from streams.registry_table import RegistryTable
from streams.resume import CLEAN_MARK, clear_marks
from streams.settings import Settings, gc_thresholds
from streams.stages import dedup, frontier, link_extract, parse, seeds, url_filter, url_seen
from streams.stages.context import BATCH_FIELD, Outbox, StageContext
from streams.stages.fetch import FetchStage
from streams.store.pagestore import PageStore
from streams.tables import FRONTIER_STORE_OPTIONS, ProducedTable
from streams.web.observe import register_observe
from streams.web.pages import register_pages
from streams.web.shortlinks import register_shortlinks
from topology import TopicSpec

log = logging.getLogger("seine")

#: The frontier event that only wakes a partition (timers, adoption after a restart).
TICK = codec.encode("frontier_event", {"new_urls": [], "completions": [], "tick": True})

#: Seconds a worker stopped with SIGTERM waits at most for its fetches in flight and
#: their results (`SeineApp.hand_over`); one still running then is done again by the
#: partition's next owner.
HAND_OVER_TIMEOUT = 10.0

#: A stage step: (partition, decoded record, outbox) → maybe awaitable.
Step = Callable[[int, Any, Outbox], object]


@dataclass
class SeineApp:
    """The Faust app plus the handles a CLI command or a test needs."""

    app: faust.App
    settings: Settings
    ctx: StageContext
    frontier: Frontier
    store: PageStore
    fetch: FetchStage
    until_idle: bool = False
    initial_seeds: list[str] = field(default_factory=list)
    exit_code: int = 0
    idle_since: float | None = None
    worker: Any = None
    on_progress: Callable[[SeineApp], None] | None = None
    finished: bool = False
    #: `seine crawl` (one process): the first Ctrl-C drains instead of stopping at once.
    drain_on_sigint: bool = False
    #: monotonic time the drain started; None while crawling normally.
    draining_since: float | None = None
    drained_since: float | None = None
    #: monotonic time a SIGTERM started the hand-over (`hand_over`); None until then.
    handing_over_since: float | None = None

    def status(self) -> dict[str, Any]:
        """This worker's counters, for a supervisor that sums them over workers."""
        c = self.ctx.counters
        return {
            "sent": dict(c.sent),
            "done": dict(c.done),
            "busy": self.ctx.locally_busy(),
            "rebalancing": bool(self.app.rebalancing),
            "assigned": len(self.app.assignor.assigned_actives()),
            # the host partitions this worker holds (bench/faults.py: whose were they?)
            "partitions": sorted(
                tp.partition
                for tp in self.app.assignor.assigned_actives()
                if tp.topic == topology.topic_name(self.settings.app_id, topology.FRONTIER)
            ),
            "stale_fetches_skipped": self.fetch.stale_skipped,
            "fetches_started_at_dispatch": self.fetch.started_at_dispatch,
            "completions_at_fetch_end": c.completions_at_fetch_end,
            "duplicate_fetch_requests": self.frontier.duplicate_requests,
            # fetches in flight at an adoption whose pages were stored already
            "adopted_stored": self.frontier.adopted_stored,
            # fetches in flight at an adoption whose completion came after it (in the
            # grace: Frontier.adopt), so not done again
            "adopted_completed": self.frontier.adopted_completed,
            "queued": self.frontier.queued,
            "fetched": c.outcomes.get("fetched", 0),
            "pages_stored": c.pages_stored,
            "in_flight": c.fetch_in_flight,
            "outcomes": dict(c.outcomes),
            "dead_letters": c.dead_letters,
            "rewinds": c.rewinds,
            # [topic, partition, offset] after the last message this worker delivered
            # to / handled from a consumed topic (multiworker.globally_idle)
            "delivered_upto": [[t, p, o] for (t, p), o in self.ctx.producer.delivered_upto.items()],
            "handled_upto": [[t, p, o] for (t, p), o in c.handled_upto.items()],
            # link-extract found no body in the hand-off cache: each page fetched again
            "handoff_misses": self.ctx.handoff.stats.missed,
            "handoff_evicted": self.ctx.handoff.stats.evicted,
            # offsets a fetch skipped that the refetch gave up on (consumer_state.
            # hold_gaps): each a message that would have been lost; the commit waits
            "skipped_offsets": getattr(self.app.consumer, "_seine_skipped", 0),
            # fetches re-done at once because they passed over offsets (refetch_skips)
            "refetches": getattr(self.app.consumer, "_seine_refetches", 0),
            # commits held because a message before them was not handled (guard_commits)
            "commits_held": getattr(self.app.consumer, "_seine_commits_held", 0),
            # partitions whose records are not all handed to their agent (a stalled
            # crawl's supervisor prints them: where did the unhandled message stop?)
            "lagging": lagging_partitions(self.app, self._consumed_topics),
            "at": time.time(),
        }

    @property
    def _consumed_topics(self) -> list[str]:
        unconsumed = (topology.CRAWL_LOG, topology.DEAD_LETTERS)
        return [
            topology.topic_name(self.settings.app_id, spec)
            for spec in topology.TOPICS
            if spec not in unconsumed
        ]

    def drain(self) -> None:
        """Stop dispatching fetches and let what is in flight run through every stage.

        What is queued stays in the frontier's tables; once nothing is in flight,
        unsent or unhandled, the worker writes the data dir's clean-stop mark and
        stops, so a resume over the same data dir needs no reconciliation
        (streams/resume.py). A second Ctrl-C, or `drain_timeout`, stops at once
        without the mark.
        """
        if self.draining_since is not None:
            log.warning("second interrupt: stopping without draining")
            self.stop(130)
            return
        print(
            "seine: draining (fetches in flight finish, nothing new starts); "
            "Ctrl-C again stops at once",
            file=sys.stderr,
            flush=True,
        )
        self.draining_since = time.monotonic()

    @property
    def dispatching(self) -> bool:
        """Whether the frontier may start fetches: not while draining or handing over."""
        return self.draining_since is None and self.handing_over_since is None

    def hand_over(self) -> None:
        """SIGTERM: leave the group once the fetches in flight are over and their pages
        and completions are on the broker, so the partitions' next owners find each
        fetch answered instead of doing it again (docs/OPERATIONS.md, "Scaling out and
        in"). Nothing new is dispatched meanwhile; what is queued stays in the tables
        for the next owner. Stopping at once, as mode does on SIGTERM, a worker kept
        dispatching while its services stopped one by one, and lost the completions
        of the fetches it started then: the next owner did them again (bench/faults.py,
        scenario rebalance). Bounded by `HAND_OVER_TIMEOUT`; a second SIGTERM stops
        at once."""
        if self.handing_over_since is not None:
            log.warning("second SIGTERM: stopping without handing over")
            self.stop(0)
            return
        log.info("SIGTERM: handing over (fetches in flight finish, nothing new starts)")
        self.handing_over_since = time.monotonic()

    def handed_over(self) -> bool:
        """No fetch in flight, and their results (pages, completions) all sent: once
        the producer has them acknowledged (`create_app`'s watch flushes it), the
        worker may leave. Not the producer's count of messages unacknowledged: the
        other stages keep producing, and a busy worker never saw it at 0."""
        return not (self.ctx.counters.fetch_in_flight or self.fetch.out.pending)

    def drained(self) -> bool:
        """Nothing in flight, unsent or unhandled: every link is in the frontier's tables."""
        ctx = self.ctx
        if ctx.counters.fetch_in_flight or self.frontier.in_flight or ctx.producer.pending():
            return False
        if any(box.pending for box in ctx.outboxes):
            return False
        return ctx.all_handled()

    def stop(self, code: int = 0) -> None:
        """Ask the worker to shut down (from inside the loop)."""
        self.exit_code = code
        self.finished = True
        if self.worker is not None:
            self.worker._schedule_shutdown(signal.SIGTERM)


def set_current_event(event: Any) -> contextvars.Token[Any]:
    """Point Faust's current-event context at `event` (tables read its partition);
    the token puts back what was current before (`reset_current_event`)."""
    return faust_streams._current_event.set(weakref.ref(event))


def reset_current_event(token: contextvars.Token[Any]) -> None:
    faust_streams._current_event.reset(token)


class LocalEvent:
    """Stands for a frontier message while this worker's frontier handles a completion
    at its fetch's end (`Settings.local_completion`): table writes go to the changelog
    partition of the current event, and only its topic and partition are read."""

    __slots__ = ("__weakref__", "message")

    def __init__(self, topic: str, partition: int) -> None:
        self.message = SimpleNamespace(topic=topic, partition=partition, offset=None)


def current_offset() -> int | None:
    """The offset of the message being handled (url-seen stamps registrations with it)."""
    event = faust_streams.current_event()
    return None if event is None else int(event.message.offset)


def faust_app(settings: Settings) -> faust.App:
    data = Path(settings.data_dir)
    set_fetch_max_wait(settings.fetch_max_wait_ms)
    guard_commits()
    hold_gaps()
    refetch_skips(enabled=settings.tansu_fixes)
    if settings.tansu_fixes:
        verify_highwaters(settings.bootstrap)
    else:
        stop_verifying_highwaters()
    return faust.App(
        settings.app_id,
        broker=f"kafka://{settings.bootstrap}",
        store="rocksdb://",
        datadir=str(data / "faust"),
        topic_partitions=settings.partitions,
        # Faust's own default is 1: a changelog on one broker is lost with that broker.
        topic_replication_factor=max(settings.replication_factor, 1),
        topic_allow_declare=True,
        topic_disable_leader=True,
        web_enabled=settings.web_enabled,
        web_bind=settings.web_bind,
        web_port=settings.web_port,
        broker_session_timeout=settings.session_timeout,
        broker_rebalance_timeout=settings.rebalance_timeout,
        broker_heartbeat_interval=settings.heartbeat_interval,
        consumer_auto_offset_reset="earliest",
        producer_max_request_size=16 * 1024 * 1024,
        consumer_max_fetch_size=16 * 1024 * 1024,
        producer_linger_ms=2,
        stream_buffer_maxsize=4096,
        table_cleanup_interval=60.0,
        Monitor=QuietMonitor,
        Table=ProducedTable,
        table_standby_replicas=settings.standby_replicas,
        recovery_consistency_check=settings.recovery_consistency_check,
        broker_commit_interval=settings.commit_interval,
    )


def create_app(settings: Settings) -> SeineApp:
    """Declare topics, tables and agents for one worker with these settings."""
    if not settings.bootstrap:
        raise ValueError("settings.bootstrap is empty: start a broker (or the embedded one) first")
    if settings.event_loop == "uvloop":
        # Before the app exists: building it (tables, agents, the producer hooks) takes
        # the thread's event loop, so choosing uvloop in run_worker, as Seine did, was
        # too late and every worker ran on asyncio's selector loop.
        mode.loop.use("uvloop")
    app = faust_app(settings)
    ctx = StageContext(app, settings)
    app.seine_producer = ctx.producer  # type: ignore[attr-defined]
    n = settings.partitions

    # min.insync.replicas of the changelogs on a replicated cluster (Faust sets compaction)
    changelog_configs = topic_configs(settings)

    def table(name: str, options: dict[str, Any] | None = None) -> Any:
        return app.Table(
            name,
            default=None,
            partitions=n,
            key_type=str,
            options=options,
            extra_topic_configs=changelog_configs,
        )

    # url-seen's exact store: the URL registry layout (site id + URL hash keys,
    # one WriteBatch and one changelog record per message), see registry_table.py.
    seen_table = RegistryTable(
        app,
        name="seen",
        default=None,
        beacon=app.tables.beacon,
        partitions=n,
        key_type=bytes,
        value_type=bytes,
        extra_topic_configs=changelog_configs,
    )
    app.tables.add(seen_table)
    scope_table = table("scope")
    hosts_table = table("hosts", FRONTIER_STORE_OPTIONS)
    queue_table = table("queue", FRONTIER_STORE_OPTIONS)
    fingerprint_table = table("fingerprints")
    band_table = table("simhash-bands")
    sites_table = table("sites")
    #: URLs whose crawl ended without a stored page (see streams/resume.py).
    done_table = table("done")
    #: URL → revisit record; written by link-extract and frontier, both in the host's partition
    revisits_table = table("revisits")
    tables = [
        seen_table,
        scope_table,
        hosts_table,
        queue_table,
        fingerprint_table,
        band_table,
        sites_table,
        done_table,
        revisits_table,
    ]

    policy = Politeness(
        delay=settings.delay,
        max_crawl_delay=settings.max_crawl_delay,
        response_time_factor=settings.response_time_factor,
        user_agent=settings.user_agent,
        fetch_lease=settings.fetch_lease,
        robots_retry=settings.robots_retry,
        robots_ttl=settings.robots_ttl,
        max_retry_wait=settings.max_retry_wait,
        max_pages=settings.max_pages,
        max_host_pages=settings.max_host_pages,
        max_host_queue=settings.max_host_queue,
    )
    the_frontier = Frontier(hosts_table, queue_table, policy, ctx.host_partition, write_back=True)
    ctx.busy_checks.append(
        lambda: (
            the_frontier.in_flight > 0
            or (the_frontier.queued > 0 and not the_frontier.budget_exhausted())
        )
    )
    revisits = RevisitSchedule(
        revisits_table,
        RevisitPolicy(settings.revisit_min, settings.revisit_max, settings.revisit_initial),
        ctx.url_partition,
        track_all=settings.recrawl,
    )
    store = PageStore(
        Path(settings.data_dir) / "pages",
        segment_max_bytes=settings.segment_max_bytes,
        writer_id=settings.worker_id or None,
    )
    fetcher = Fetcher(
        FetchConfig(
            user_agent=settings.user_agent,
            connect_timeout=settings.connect_timeout,
            read_timeout=settings.read_timeout,
            total_timeout=settings.total_timeout,
            max_body_bytes=settings.max_body_bytes,
            allow_private=settings.allow_private,
            resolve=dict(settings.resolve),
            max_sitemap_bytes=settings.max_sitemap_bytes,
        )
    )
    sitemap_config = SitemapConfig(
        enabled=settings.sitemaps,
        probe=settings.sitemap_probe,
        max_depth=settings.sitemap_max_depth,
        max_bytes=settings.max_sitemap_bytes,
    )
    fetch_stage = FetchStage(
        ctx,
        fetcher,
        settings.max_in_flight,
        sitemaps=sitemap_config,
        revisits=revisits,
        claim=the_frontier.claim,
    )
    seine = SeineApp(app, settings, ctx, the_frontier, store, fetch_stage)
    filter_config = FilterConfig(max_depth=settings.max_depth, same_host=settings.same_host)
    limits = ctx.limits
    ticks_pending: set[int] = set()

    def agent(
        spec: TopicSpec, stage: str, step: Step, *, decode: bool = True, count_items: bool = True
    ) -> None:
        """Declare the agent of one stage: decode, step, flush, count; errors → dead letters.

        `count_items` False: the stage counts its items itself (fetch: the requests it
        starts, most of them without a message)."""
        out = ctx.outbox()
        items_fields = (
            ()
            if not count_items
            else ("new_urls", "completions")
            if spec.schema == "frontier_event"
            else (BATCH_FIELD[spec.schema],)
            if spec.schema in BATCH_FIELD
            else ()
        )

        async def loop(stream: Any) -> None:
            # Take whatever has queued up (up to max_batch_events) and handle it as one
            # unit: the outbox then sends one message per (topic, partition) for all
            # of it, so under load the messages per page fall instead of rising.
            async for events in stream.take_events(
                settings.max_batch_events, within=settings.batch_linger
            ):
                now_ms = time.time() * 1000.0
                cpu_before = time.thread_time()
                for event in events:
                    ctx.counters.observe_latency(spec.name, now_ms - event.message.timestamp * 1000)
                    # Table writes go to the changelog partition of the *current event*;
                    # Faust sets it per stream item, so set it per taken event here.
                    set_current_event(event)
                    await handle_one(event)
                try:
                    await out.flush()
                finally:
                    ctx.counters.done[spec.name] += len(events)
                    for event in events:
                        message = event.message
                        ctx.counters.handled(message.topic, message.partition, message.offset)
                    # This thread runs every agent: its CPU time across one unit of work
                    # is that stage's (what other tasks run while it awaits is counted
                    # too; the stages' own awaits rarely yield).
                    ctx.counters.stage_cpu[stage] += time.thread_time() - cpu_before

        async def handle_one(event: Any) -> None:
            partition = event.message.partition
            try:
                value = event.value
                if decode:
                    too_big = oversized(len(value), limits) if value is not None else None
                    if too_big is not None:
                        await ctx.dead_letter(stage, event, too_big)
                        return
                    record: Any = codec.decode(spec.schema, value)
                    ctx.counters.stage_items[stage] += sum(
                        len(record.get(name) or ()) for name in items_fields
                    )
                    record, refusals = screen(spec.schema, record, limits)
                    for refusal in refusals:
                        await ctx.dead_letter(
                            stage,
                            event,
                            refusal.reason,
                            value=codec.encode(spec.schema, refusal.record),
                        )
                    if record is None:
                        return
                else:
                    record = value
                result = step(partition, record, out)
                if asyncio.iscoroutine(result):
                    await result
            except (codec.DecodeError, InvalidSeed) as exc:
                await ctx.dead_letter(stage, event, str(exc))
            except Exception as exc:  # a stage survives any message
                log.exception("%s failed on a message", stage)
                # a stage may say what the dead letter should keep instead of the
                # message as it came (link-extract: the batch with the bodies it took
                # from the hand-off cache)
                kept = getattr(exc, "dead_letter_value", None)
                await ctx.dead_letter(
                    stage,
                    event,
                    f"{type(exc).__name__}: {exc}",
                    value=kept if isinstance(kept, bytes) else None,
                )

        loop.__name__ = loop.__qualname__ = stage.replace("-", "_")
        app.agent(ctx.topic(spec), name=stage)(loop)

    agent(
        topology.SEEDS,
        "seeds",
        lambda p, payload, out: seeds.handle(ctx, payload, out),
        decode=False,
    )
    seen_filters = url_seen.SeenFilters(settings.bloom_capacity, settings.bloom_error_rate)
    ctx.seen_filters = seen_filters
    seen_table.store.on_partition_change.append(seen_filters.drop)
    agent(
        topology.URL_SEEN,
        "url-seen",
        lambda p, batch, out: url_seen.handle(
            p,
            batch,
            seen_table,
            scope_table,
            seen_filters,
            seen_table.store.partition_keys,
            out,
            sitemap_ttl=settings.robots_ttl if settings.sitemaps else 0.0,
            offset=current_offset(),
            resend_grace=settings.resend_grace,
        ),
    )

    frontier_topic = topology.topic_name(settings.app_id, topology.FRONTIER)

    async def apply_frontier_event(partition: int, event: dict[str, Any], out: Outbox) -> None:
        handled_at = time.time()
        for completion in event["completions"]:
            ctx.counters.host_cycle.observe(
                handled_at,
                completion.get("dispatched_at", 0.0),
                completion["finished_at"],
                completion["elapsed_ms"],
            )
        dispatched: list[dict[str, Any]] | None = [] if settings.local_dispatch else None
        written = Deliveries()
        with ctx.producer.track_changelogs(written):
            frontier.handle(
                partition,
                event,
                the_frontier,
                hosts_table.items(),
                out,
                done_table,
                revisits,
                revisits_table.items() if settings.recrawl else (),
                dispatch=seine.dispatching,
                registry=seen_table,
                stored_since=store.fetched_since,
                dispatched=dispatched,
            )
        if dispatched:
            # A request starts only once the table writes naming its dispatch are on
            # the broker: a kill then leaves a successor whose tables know of every
            # request the web saw, and it redoes at most the one in flight per host,
            # not the fetches whose record was still lingering in the producer.
            await ctx.producer.wait(written)
        for request in dispatched or ():
            # started here at once, or sent through the fetch topic
            if app.rebalancing or not await fetch_stage.start_dispatched(partition, request):
                out.add(topology.FETCH, partition, request)

    async def frontier_step(partition: int, event: dict[str, Any], out: Outbox) -> None:
        if event["tick"]:
            ticks_pending.discard(partition)
        await apply_frontier_event(partition, event, out)

    completion_outbox = ctx.outbox()

    async def complete_at_fetch_end(partition: int, event: dict[str, Any]) -> bool:
        """Apply a frontier event of the fetch stage (its completions; their pages are
        acknowledged) here at once instead of sending it, when this worker's frontier
        holds the partition (it does: the topics are co-partitioned): the hosts' next
        fetches are dispatched, and started (`FetchStage.start_dispatched`), without
        the completions' way through the broker, Faust's consumer and the frontier
        agent's turn. False (then the event is sent) during a rebalance or a drain,
        before the frontier has adopted the partition, or if applying failed.

        The table writes go to the partition's changelogs, as the agent's would, and
        they are the completions' record: the message would have been produced in the
        same instant, so a kill that loses those writes would mostly have lost it too,
        and its successor re-dispatches what the tables say was in flight."""
        if (
            app.rebalancing
            or not seine.dispatching
            or partition not in fetch_stage.local_partitions
            or not the_frontier.knows_partition(partition)
        ):
            return False
        cpu_before = time.thread_time()
        standin = LocalEvent(frontier_topic, partition)
        token = set_current_event(standin)
        try:
            local_event = {"new_urls": [], "completions": event["completions"], "tick": False}
            await apply_frontier_event(partition, local_event, completion_outbox)
            await completion_outbox.flush()
        except Exception:  # sent instead; the agent applies what is still to apply
            log.exception("frontier: completions at a fetch's end failed")
            return False
        finally:
            reset_current_event(token)
            ctx.counters.stage_cpu["frontier"] += time.thread_time() - cpu_before
        ctx.counters.completions_at_fetch_end += len(event["completions"])
        return True

    if settings.local_completion:
        fetch_stage.out.apply_frontier = complete_at_fetch_end

    agent(topology.FRONTIER, "frontier", frontier_step)
    agent(
        topology.FETCH,
        "fetch",
        lambda p, batch, out: fetch_stage.submit(p, batch),
        count_items=False,
    )
    agent(topology.PARSE, "parse", lambda p, batch, out: parse.handle(ctx, batch, out))
    agent(
        topology.CONTENT_DEDUP,
        "content-dedup",
        lambda p, batch, out: dedup.handle(ctx, batch, fingerprint_table, out, band_table),
    )
    agent(
        topology.LINK_EXTRACT,
        "link-extract",
        lambda p, batch, out: link_extract.handle(ctx, batch, store, out, revisits),
    )
    agent(
        topology.URL_FILTER,
        "url-filter",
        lambda p, batch, out: url_filter.handle(
            p, batch, filter_config, scope_table, sites_table, out
        ),
    )

    @app.task
    async def flush_fetch_results() -> None:
        """Fetches finish one by one; send their results in coalesced batches."""
        while not app.should_stop:
            await asyncio.sleep(settings.batch_linger)
            out = fetch_stage.out
            cpu_before, elsewhere_before = time.thread_time(), out.cpu_elsewhere
            await out.flush()
            ctx.counters.stage_cpu["fetch"] += (time.thread_time() - cpu_before) - (
                out.cpu_elsewhere - elsewhere_before
            )

    lease_ticks: dict[int, float] = {}

    def unadopted_partitions() -> list[int]:
        """Frontier partitions this worker was assigned but has not adopted yet.

        The frontier rebuilds a partition's schedule from its tables on the first event
        of that partition; after a restart or a rebalance, hosts with queued URLs get
        no event unless someone sends one, so a tick goes to each such partition.
        """
        if app.rebalancing:
            return []
        return [
            tp.partition
            for tp in app.assignor.assigned_actives()
            if tp.topic == frontier_topic and not the_frontier.knows_partition(tp.partition)
        ]

    ctx.busy_checks.append(lambda: bool(unadopted_partitions()))
    fetch_topic = topology.topic_name(settings.app_id, topology.FETCH)

    async def on_partitions_revoked(sender: Any, *args: Any, **_: Any) -> None:
        """Politeness through a rebalance: fetches of revoked partitions stop before
        the group moves them, and the frontier forgets what memory held of them, so
        whoever is assigned them next (this worker too) adopts them from the tables.
        Faust revokes every partition at each rebalance (eager protocol), so a fetch
        in flight then is done again: counted by bench/faults.py and its test."""
        revoked: set[Any] = args[0]
        fetches = {tp.partition for tp in revoked if tp.topic == fetch_topic}
        fetch_stage.forget_partitions(fetches)
        cancelled = await fetch_stage.cancel(fetches)
        for tp in revoked:
            if tp.topic == frontier_topic:
                the_frontier.forget(tp.partition)
                ticks_pending.discard(tp.partition)
        if cancelled:
            log.info("rebalance: %d fetches in flight cancelled, to be redone", cancelled)

    app.on_partitions_revoked.connect(on_partitions_revoked)  # type: ignore[arg-type]

    async def on_partitions_assigned(sender: Any, *args: Any, **_: Any) -> None:
        """The fetch partitions this worker now holds: their dispatches start here at
        once (`Settings.local_dispatch`)."""
        assigned: set[Any] = args[0]
        fetch_stage.local_partitions |= {tp.partition for tp in assigned if tp.topic == fetch_topic}

    app.on_partitions_assigned.connect(on_partitions_assigned)  # type: ignore[arg-type]

    @app.timer(interval=0.02)
    async def wake_sleeping_hosts() -> None:
        """Tick each partition whose earliest sleeping host is due (table writes need an
        event of the partition), and now and then one with fetches in flight, so that
        lost completions are noticed by lease expiry."""
        if not seine.dispatching:
            return  # nothing is dispatched while draining: no wake-ups needed
        now = time.time()
        for partition in unadopted_partitions():
            if partition not in ticks_pending:
                ticks_pending.add(partition)
                await ctx.send(topology.FRONTIER, partition, TICK)
        for partition in {*the_frontier.partitions(), *revisits.partitions()}:
            wake = the_frontier.next_wake(partition)
            revisit = revisits.next_wake(partition)
            due = (wake is not None and wake <= now) or (revisit is not None and revisit <= now)
            lease_check = bool(the_frontier.in_flight) and (
                now - lease_ticks.get(partition, 0.0) >= settings.fetch_lease / 4
            )
            if (due or lease_check) and partition not in ticks_pending:
                ticks_pending.add(partition)
                lease_ticks[partition] = now
                await ctx.send(topology.FRONTIER, partition, TICK)

    @app.timer(interval=0.1)
    async def serve_producer_deliveries() -> None:
        ctx.producer.poll()
        for table in tables:
            table.apply_persisted_offsets()

    @app.task
    async def push_initial_seeds() -> None:
        hook_into_commits(app, ctx.producer)
        loop = asyncio.get_running_loop()
        if seine.drain_on_sigint:
            # replaces mode's handler (installed before the app's tasks start)
            loop.add_signal_handler(signal.SIGINT, seine.drain)
        loop.add_signal_handler(signal.SIGTERM, seine.hand_over)  # mode's, likewise
        clear_marks(settings.data_dir)
        for url in seine.initial_seeds:
            await ctx.send(topology.SEEDS, 0, url.encode("utf-8"))

    status_path = Path(settings.status_file) if settings.status_file else None

    stuck = StuckPartitions(settings.stuck_rewind_after)

    @app.timer(interval=1.0)
    async def rewind_stuck_partitions() -> None:
        """Read again a partition whose consumer stopped short while nothing else
        happened here: a message dropped between the fetch and the agent otherwise
        waits for a rebalance, and the crawl for it (streams/core/stall.py)."""
        if not settings.stuck_rewind_after or app.rebalancing:
            return
        c = ctx.counters
        activity = (tuple(sorted(c.sent.items())), tuple(sorted(c.done.items())))
        entries = lagging_partitions(app, seine._consumed_topics)
        for topic, partition, offset in stuck.observe(time.monotonic(), entries, activity):
            here = (topic, partition)
            where = [e for e in entries if (e.get("topic"), e.get("partition")) == here]
            log.warning(
                "%s[%s] stood still for %ss short of what it should have handed on "
                "(%s): reading it again from offset %s",
                topic,
                partition,
                settings.stuck_rewind_after,
                where,
                offset,
            )
            c.rewinds += 1
            await rewind(app, topic, partition, offset)

    @app.timer(interval=5.0)
    async def watch_brokers() -> None:
        """Stop with one line when the cluster has been gone for broker_lost_timeout:
        librdkafka would retry for ever, flooding the log, while nothing moves."""
        if seine.finished or ctx.producer.brokers_down_since is None:
            return
        loop = asyncio.get_running_loop()
        down = await loop.run_in_executor(None, ctx.producer.brokers_down_for)
        if down >= settings.broker_lost_timeout:
            lost_broker(seine, down)

    @app.timer(interval=0.25)
    async def watch() -> None:
        if seine.on_progress is not None:
            seine.on_progress(seine)
        if status_path is not None:
            write_status(status_path, seine.status())
        if seine.handing_over_since is not None and not seine.finished:
            if seine.handed_over():
                try:
                    await ctx.producer.flush()
                except Exception:  # stopping anyway: the next owner redoes what is lost
                    log.exception("SIGTERM: results of the last fetches not acknowledged")
                log.info("SIGTERM: handed over, stopping")
                seine.stop(0)
            elif time.monotonic() - seine.handing_over_since > HAND_OVER_TIMEOUT:
                log.warning("hand-over did not finish in %ss: stopping", HAND_OVER_TIMEOUT)
                seine.stop(0)
            return
        if seine.draining_since is not None and not seine.finished:
            now = time.monotonic()
            if not seine.drained():
                seine.drained_since = None
                if now - seine.draining_since > settings.drain_timeout:
                    log.warning("drain did not finish in %ss: stopping", settings.drain_timeout)
                    seine.stop(130)
            elif seine.drained_since is None:
                seine.drained_since = now
            elif now - seine.drained_since >= 0.5:
                await ctx.producer.flush()
                (Path(settings.data_dir) / CLEAN_MARK).write_text(f"{time.time()}\n")
                seine.stop(130)
            return
        if not seine.until_idle or seine.finished:
            return
        if not ctx.idle():
            seine.idle_since = None
            return
        now = time.monotonic()
        if seine.idle_since is None:
            seine.idle_since = now
        elif now - seine.idle_since >= 1.0:
            seine.stop(0)

    register_shortlinks(app, settings, table, click_count_window=settings.link_click_window)
    register_pages(app, settings, store, ctx.url_partition)
    if settings.web_enabled:
        register_observe(seine)
    return seine


#: Seconds a worker that lost its cluster waits for its own stop before it exits.
LOST_BROKER_EXIT_AFTER = 15.0


def lost_broker(seine: SeineApp, down: float) -> None:
    """The cluster is gone: say so in one line and stop. The page store is closed on
    the way out; what was between stages is on the brokers (Kafka) or rebuilt by the
    resume (Tansu), so a rerun continues. A stop can itself wait on the missing
    brokers (commits, flushes), so the process exits after LOST_BROKER_EXIT_AFTER."""
    print(
        f"seine: lost the Kafka cluster at {seine.settings.bootstrap}: no broker has "
        f"answered for {down:.0f} s; stopping (run the same command again to continue)",
        file=sys.stderr,
        flush=True,
    )
    seine.stop(EXIT_BROKER_LOST)

    def exit_now() -> None:
        with contextlib.suppress(Exception):
            seine.store.close()
        os._exit(EXIT_BROKER_LOST)

    timer = threading.Timer(LOST_BROKER_EXIT_AFTER, exit_now)
    timer.daemon = True
    timer.start()


def tune_gc(settings: Settings) -> None:
    """Freeze what start-up built and set the cyclic GC's thresholds for the run.

    Everything built so far (modules, the app, its tables and agents) lives as long
    as the worker: freezing it keeps the cyclic GC's full collections from walking
    it again and again, which showed as 40-130 ms pauses of the event loop (p99 of
    redirects, and every stage's latency) on a busy worker. With Python's gen0
    threshold of 700 a busy worker then still spent ~2% of its CPU in young
    collections (~75 a second, each ~0.17 ms, finding next to nothing: its garbage
    is freed by reference counting), hence `Settings.gc_threshold`.
    """
    gc.collect()
    gc.freeze()
    thresholds = gc_thresholds(settings.gc_threshold)
    if thresholds:
        gc.set_threshold(*thresholds)


def create_topics(seine: SeineApp) -> list[str]:
    """Every topic the worker will consume, created before its consumer subscribes:
    the stage and service topics of topology/, and the tables' changelogs (a topic
    created after the subscription is not assigned until a metadata refresh).
    Returns the names created."""
    settings = seine.settings
    changelogs = {
        table.changelog_topic.get_topic_name(): table.partitions or settings.partitions
        for table in seine.app.tables.values()
    }
    return ensure_topics(settings) + ensure_changelogs(settings, changelogs)


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
    except SystemExit:
        pass
    except Exception as exc:  # mode re-raises the reason a service crashed
        log.error("worker crashed: %r", exc)
        seine.exit_code = 1
    finally:
        if worker.crash_reason is not None:
            log.error("worker crashed: %r", worker.crash_reason)
            seine.exit_code = 1
        seine.store.close()
        seine.ctx.producer.close()
        with contextlib.suppress(Exception):
            asyncio.run(seine.fetch.close())
    return seine.exit_code
