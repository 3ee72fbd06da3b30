"""The `seine` command: crawl, worker, seed, get, pages, demo.

Every command builds its Settings once (defaults < config file < SEINE_* env <
flags) and hands them on; nothing reads configuration at import time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from streams.core.stats import ERROR_OUTCOMES, REPLAY_OUTCOMES, stage_breakdown
from streams.exits import EXIT_NOTHING_FETCHED, nothing_fetched_failure
from streams.progress import Progress
from streams.settings import Settings, load_settings, parse_resolve


def peak_rss_mb() -> float:
    """This process's peak resident set, from the kernel's high-water mark.

    `ru_maxrss` is inherited across fork+exec on Linux, so a worker started by a
    big parent (pytest, a benchmark) would report the parent's peak instead.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


#: Consumer-group timeouts for the embedded broker: Tansu completes a join after
#: about half the session timeout, so small values start a crawl in ~2 s, not ~30 s.
EMBEDDED_GROUP_TIMEOUTS: dict[str, Any] = {
    "session_timeout": 4.0,
    "rebalance_timeout": 2.0,
    "heartbeat_interval": 1.0,
    # Tansu holds an empty fetch for the whole wait: keep hops short.
    "fetch_max_wait_ms": 20,
    # Tansu's highwaters lag offsets it has served (see Settings): local tables win.
    "recovery_consistency_check": False,
    # Every worker of an embedded broker shares one machine: a standby there would
    # double the table work (Settings.standby_replicas) and survive nothing more.
    "standby_replicas": 0,
}


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="TOML config file (section [seine] or top level)")
    parser.add_argument("--data-dir", dest="data_dir", help="where tables and pages live")
    parser.add_argument("--log-level", dest="log_level", help="warning (default), info, debug")


def _crawl_flags(parser: argparse.ArgumentParser, *, bootstrap_required: bool = False) -> None:
    _common(parser)
    parser.add_argument(
        "--bootstrap",
        required=bootstrap_required,
        help="Kafka bootstrap HOST:PORT (default: start an embedded broker)",
    )
    if not bootstrap_required:
        parser.add_argument(
            "--broker",
            choices=("tansu", "kafka"),
            help="the broker started when no --bootstrap is given: tansu (default; embedded, "
            "topics die with it) or kafka (Apache Kafka under DATA_DIR/kafka, needs Java 17+; "
            "topics kept on disk)",
        )
    parser.add_argument("--partitions", type=int, help="partitions per host-scoped topic")
    parser.add_argument(
        "--replication-factor",
        dest="replication_factor",
        type=int,
        help="replicas of every topic created (default: min(3, brokers))",
    )
    parser.add_argument(
        "--min-insync-replicas",
        dest="min_insync_replicas",
        type=int,
        help="replicas that must have a write before it counts (default: min(2, replicas))",
    )
    parser.add_argument("--delay", type=float, help="seconds between two requests to one host")
    parser.add_argument(
        "--max-crawl-delay",
        dest="max_crawl_delay",
        type=float,
        help="cap on a robots.txt Crawl-delay honoured, in seconds (default 30)",
    )
    parser.add_argument(
        "--response-time-factor",
        dest="response_time_factor",
        type=float,
        help="also wait K x the host's last response time between requests (default 0: off)",
    )
    parser.add_argument("--max-pages", dest="max_pages", type=int, help="stop after N pages")
    parser.add_argument("--max-depth", dest="max_depth", type=int, help="link depth limit")
    parser.add_argument(
        "--max-host-pages",
        dest="max_host_pages",
        type=int,
        help="pages one host may be asked for in all (default 0: no limit)",
    )
    parser.add_argument(
        "--max-host-queue",
        dest="max_host_queue",
        type=int,
        help="URLs one host may have queued at once (default 100000; 0: no limit)",
    )
    parser.add_argument(
        "--same-host",
        dest="same_host",
        action="store_const",
        const=True,
        help="follow links only within the seeds' sites",
    )
    parser.add_argument(
        "--allow-private",
        dest="allow_private",
        action="store_const",
        const=True,
        help="allow fetches to private and loopback addresses",
    )
    parser.add_argument(
        "--resolve",
        action="append",
        default=[],
        metavar="HOST=ADDR[:PORT]",
        help="resolve HOST to ADDR (and PORT), like curl --resolve",
    )
    parser.add_argument(
        "--recrawl",
        action="store_const",
        const=True,
        help="keep crawling: refetch pages on their revisit schedule (never stops when idle)",
    )
    parser.add_argument(
        "--revisit-min",
        dest="revisit_min",
        type=float,
        metavar="SECONDS",
        help="shortest revisit interval (default 3600)",
    )
    parser.add_argument(
        "--revisit-max",
        dest="revisit_max",
        type=float,
        metavar="SECONDS",
        help="longest revisit interval (default 30 days)",
    )
    parser.add_argument(
        "--revisit-initial",
        dest="revisit_initial",
        type=float,
        metavar="SECONDS",
        help="revisit interval after a page's first fetch (default 1 day)",
    )
    parser.add_argument(
        "--no-sitemaps",
        dest="sitemaps",
        action="store_const",
        const=False,
        help="do not follow the Sitemap: lines of robots.txt",
    )
    parser.add_argument(
        "--sitemap-probe",
        dest="sitemap_probe",
        action="store_const",
        const=True,
        help="also try /sitemap.xml on hosts whose robots.txt names no sitemap",
    )
    parser.add_argument("--user-agent", dest="user_agent")
    parser.add_argument(
        "--web-port", dest="web_port", type=int, help="serve the web API on this localhost port"
    )
    parser.add_argument(
        "--redirect-port",
        dest="redirect_port",
        type=int,
        help="also serve short-link redirects (GET /s/CODE) on this localhost port, "
        "from a process of their own beside the worker",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="seine", description="Seine: a web crawler built as a stream pipeline on Kafka."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    crawl = sub.add_parser("crawl", help="crawl from seed URLs (embedded broker by default)")
    crawl.add_argument("urls", nargs="*", help="seed URLs")
    crawl.add_argument("--seeds-file", dest="seeds_file", help="file with one seed URL per line")
    crawl.add_argument(
        "--until-idle",
        dest="until_idle",
        action="store_true",
        help="exit 0 once nothing is queued or in flight",
    )
    crawl.add_argument(
        "--workers",
        type=int,
        default=1,
        help="worker processes sharing the partitions (each with its own data dir)",
    )
    _crawl_flags(crawl)

    worker = sub.add_parser("worker", help="join a crawl on a Kafka cluster as one more worker")
    _crawl_flags(worker)

    seed = sub.add_parser("seed", help="push seed URLs to a running crawl")
    seed.add_argument("urls", nargs="+")
    seed.add_argument("--bootstrap", required=True)
    seed.add_argument("--priority", type=int, default=0)
    _common(seed)

    get = sub.add_parser("get", help="write the stored body of URL to stdout")
    get.add_argument("url")
    get.add_argument("--at", type=float, help="the capture closest to this unix time")
    _common(get)

    pages = sub.add_parser("pages", help="list stored URLs, one per line")
    _common(pages)

    export = sub.add_parser("export", help="write the page store's index for archive tools")
    export.add_argument(
        "--cdxj",
        action="store_true",
        required=True,
        help="sorted CDXJ with SURT keys, as pywb reads it (the only format so far)",
    )
    export.add_argument("--out", help="write to FILE (atomically) instead of stdout")
    _common(export)

    shorten = sub.add_parser("shorten", help="make a short link on a running worker's web server")
    shorten.add_argument("url")
    shorten.add_argument("--permanent", action="store_true", help="answer 301 instead of 302")
    shorten.add_argument("--expires-at", dest="expires_at", help="unix seconds or ISO-8601 time")
    shorten.add_argument("--web", default="http://127.0.0.1:6066", help="the worker's web URL")

    status = sub.add_parser("status", help="summarise a running crawl from its topics")
    status.add_argument("--bootstrap", required=True, help="Kafka bootstrap HOST:PORT")
    status.add_argument("--app-id", dest="app_id", help="the crawl's app id (default: seine)")
    status.add_argument(
        "--since", help="only crawl-log records from this time (unix, ISO-8601, or 15m ago)"
    )
    _common(status)

    replay = sub.add_parser(
        "replay", help="re-feed URLs from the crawl log into the frontier (a recrawl)"
    )
    replay.add_argument("--bootstrap", required=True, help="Kafka bootstrap HOST:PORT")
    replay.add_argument("--app-id", dest="app_id", help="the crawl's app id (default: seine)")
    start = replay.add_mutually_exclusive_group(required=True)
    start.add_argument("--since", help="records from this time (unix, ISO-8601, or 15m ago)")
    start.add_argument(
        "--from-offset",
        dest="from_offset",
        type=int,
        help="records from this offset of every crawl-log partition",
    )
    replay.add_argument("--until", help="records up to this time (same forms as --since)")
    replay.add_argument(
        "--outcomes",
        default=",".join(REPLAY_OUTCOMES),
        help="crawl-log outcomes whose URLs are re-fed (comma-separated; default fetched)",
    )
    replay.add_argument(
        "--min-age",
        dest="min_age",
        type=float,
        default=0.0,
        help="skip URLs whose latest fetch is younger than this many seconds",
    )
    replay.add_argument(
        "--dry-run", dest="dry_run", action="store_true", help="list the URLs, send nothing"
    )
    _common(replay)

    broker = sub.add_parser(
        "broker", help="run a local broker in the foreground until Ctrl-C or SIGTERM"
    )
    broker.add_argument("kind", choices=("kafka", "tansu"), help="Apache Kafka or Tansu")
    broker.add_argument(
        "--nodes", type=int, default=1, help="Kafka nodes (each broker and controller; default 1)"
    )
    broker.add_argument(
        "--data-dir",
        dest="data_dir",
        default="seine-kafka",
        help="where the nodes keep their logs (default seine-kafka); DIR/bootstrap lists them",
    )
    broker.add_argument(
        "--port",
        type=int,
        default=0,
        help="node I listens on PORT+2(I-1) and its controller on the next port "
        "(default: the ports of the last run, else free ones)",
    )
    broker.add_argument(
        "--fetch-only",
        dest="fetch_only",
        action="store_true",
        help="fetch Apache Kafka's jars into the cache dir and exit",
    )

    demo = sub.add_parser("demo", help="serve the bundled demo web on loopback and crawl it")
    demo.add_argument("--hosts", type=int, default=20)
    demo.add_argument("--pages", type=int, default=30)
    demo.add_argument("--seed", type=int, default=1)
    _crawl_flags(demo)
    return parser


def _settings_from(args: argparse.Namespace, **extra: Any) -> Settings:
    overrides: dict[str, Any] = {}
    for name in (
        "data_dir",
        "log_level",
        "bootstrap",
        "broker",
        "partitions",
        "replication_factor",
        "min_insync_replicas",
        "delay",
        "max_crawl_delay",
        "response_time_factor",
        "max_pages",
        "max_depth",
        "max_host_pages",
        "max_host_queue",
        "same_host",
        "allow_private",
        "user_agent",
        "web_port",
        "app_id",
        "redirect_port",
        "recrawl",
        "revisit_min",
        "revisit_max",
        "revisit_initial",
        "sitemaps",
        "sitemap_probe",
    ):
        value = getattr(args, name, None)
        if value is not None:
            overrides[name] = value
    if getattr(args, "web_port", None):
        overrides["web_enabled"] = True
    resolve = getattr(args, "resolve", None)
    if resolve:
        overrides["resolve"] = parse_resolve(resolve)
    overrides.update(extra)
    return load_settings(getattr(args, "config", None), overrides=overrides)


#: Consumer-group timeouts for `seine crawl --broker kafka` (a one-node Apache Kafka
#: on this machine): a clean stop leaves the group at once, so only a killed worker
#: waits out the session timeout; Faust's recovery checks stay on (Kafka's
#: highwaters are exact).
LOCAL_KAFKA_TUNING: dict[str, Any] = {
    "session_timeout": 10.0,
    "rebalance_timeout": 10.0,
    "heartbeat_interval": 1.0,
    "standby_replicas": 0,
}


def _tuned(settings: Settings, tuning: dict[str, Any]) -> dict[str, Any]:
    """The tuning values for settings the user left at their defaults."""
    defaults = Settings()
    return {
        name: value
        for name, value in tuning.items()
        if getattr(settings, name) == getattr(defaults, name)
    }


def _resume_from_tables(settings: Settings) -> Any:
    """Prepare a data dir whose tables outlived their broker's topics: make the local
    tables authoritative and work out what the lost stage messages carried."""
    from streams.admin import forget_changelog_offsets
    from streams.resume import plan_resume

    for worker_data in [Path(settings.data_dir), *Path(settings.data_dir).glob("worker-*")]:
        forget_changelog_offsets(worker_data)
    return plan_resume(settings.data_dir, settings.partitions)


def _push_plan(effective: Settings, plan: Any) -> None:
    from streams.admin import ensure_topics
    from streams.resume import push_resume

    ensure_topics(effective)
    push_resume(effective.bootstrap, effective.app_id, plan)
    print(
        f"seine: resuming an interrupted crawl: {plan.lost_count} of {plan.seen} seen "
        f"URLs re-queued, {plan.link_count} links of {plan.stored_pages} stored pages "
        f"re-sent to url-filter ({plan.seconds:.1f}s)",
        file=sys.stderr,
        flush=True,
    )


@contextlib.contextmanager
def broker_for(settings: Settings) -> Iterator[Settings]:
    """Yield settings pointing at a broker: the given one, or one started for the
    duration (Settings.broker), with the topics' replication resolved."""
    from streams.admin import resolve_replication

    if settings.bootstrap:
        from streams.admin import ensure_topics

        effective = resolve_replication(settings)
        ensure_topics(effective)  # a topic with another partition count: one line, exit 2
        yield effective
        return
    Path(settings.data_dir).mkdir(parents=True, exist_ok=True)
    if settings.broker == "kafka":
        with _local_kafka(settings) as effective:
            yield effective
        return
    from streams.broker import EmbeddedBroker

    # A fresh in-memory broker has empty changelogs and no stage messages.
    plan = _resume_from_tables(settings)
    with EmbeddedBroker(log_path=Path(settings.data_dir) / "broker.log") as broker:
        effective = resolve_replication(
            settings.with_overrides(
                bootstrap=broker.bootstrap, **_tuned(settings, EMBEDDED_GROUP_TIMEOUTS)
            )
        )
        if plan is not None:
            _push_plan(effective, plan)
        yield effective


@contextlib.contextmanager
def _local_kafka(settings: Settings) -> Iterator[Settings]:
    """A one-node Apache Kafka under DATA_DIR/kafka for the crawl. Its topics stay on
    disk, so a rerun resumes from Kafka itself: the changelogs restore the tables and
    the stage topics still hold what was between stages. Only a new node under old
    tables (the dir's first Kafka run) needs the reconciliation Tansu always needs."""
    from streams.admin import resolve_replication
    from streams.kafka_local import KafkaCluster, KafkaError

    cluster = KafkaCluster(Path(settings.data_dir) / "kafka", 1)
    try:
        cluster.start()
    except KafkaError as exc:
        raise ValueError(str(exc)) from None
    try:
        plan = _resume_from_tables(settings) if cluster.fresh else None
        effective = resolve_replication(
            settings.with_overrides(
                bootstrap=cluster.bootstrap, **_tuned(settings, LOCAL_KAFKA_TUNING)
            )
        )
        if plan is not None:
            _push_plan(effective, plan)
        yield effective
    finally:
        cluster.stop()


def _read_seeds(args: argparse.Namespace) -> list[str]:
    seeds = list(args.urls or [])
    if getattr(args, "seeds_file", None):
        for line in Path(args.seeds_file).read_text("utf-8").splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                seeds.append(line.strip())
    return seeds


def run_crawl(
    settings: Settings, seeds: list[str], until_idle: bool, *, drain_on_sigint: bool = False
) -> int:
    from streams.app import create_app, run_worker
    from streams.core.allocator import tune_malloc

    tune_malloc()  # this process is a worker from here on: see streams/core/allocator.py
    with broker_for(settings) as effective:
        seine = create_app(effective)
        # --recrawl keeps the crawl going on the revisit schedule: never idle for good
        seine.until_idle = until_idle and not effective.recrawl
        seine.drain_on_sigint = drain_on_sigint
        seine.initial_seeds = seeds
        progress = Progress(total=effective.max_pages or None)
        seine.on_progress = progress
        started = time.time()
        try:
            code = run_worker(seine)
        finally:
            progress.close()
        elapsed = time.time() - started
        c = seine.ctx.counters
        fetched = c.outcomes.get("fetched", 0)
        if effective.log_level.lower() in ("info", "debug"):
            print(f"seine: messages handled per stage topic: {dict(c.done)}")
            latency = {k: round(v, 1) for k, v in c.latency_ms.items()}
            print(f"seine: smoothed produce-to-handle latency (ms): {latency}")
            print(f"seine: host cycle (dispatch to completion): {c.host_cycle.describe()}")
            filters = seine.ctx.seen_filters
            if filters is not None:
                print(
                    f"seine: url-seen Bloom filters: {filters.false_positives} false positives "
                    f"confirmed new by the exact table, {filters.confirmed_seen} confirmed seen; "
                    f"rebuilt per partition in {filters.rebuild_seconds} s"
                )
            usage = resource.getrusage(resource.RUSAGE_SELF)
            cpu = usage.ru_utime + usage.ru_stime
            print(
                f"seine: worker CPU {cpu:.1f}s = {1000 * cpu / max(fetched, 1):.2f} ms per "
                f"fetched page, peak RSS {peak_rss_mb():.0f} MB"
            )
            breakdown = stage_breakdown(c.stage_cpu, c.stage_items, c.done, cpu, elapsed)
            print(f"seine: CPU per stage (share of worker CPU): {breakdown}")
        print(
            f"seine: {c.pages_stored} pages stored, {fetched} fetched in {elapsed:.1f}s "
            f"({fetched / max(elapsed, 1e-6):.0f} pages/s), "
            f"{c.outcomes.get('duplicate', 0)} duplicates, "
            f"{c.outcomes.get('near-duplicate', 0)} near-duplicates, "
            f"{c.outcomes.get('robots-disallowed', 0)} disallowed by robots, "
            f"{sum(c.outcomes.get(k, 0) for k in ERROR_OUTCOMES)} errors, "
            f"{c.dead_letters} dead letters, "
            f"{seine.ctx.handoff.stats.missed} hand-off misses (fetched again); "
            f"data in {effective.data_dir}",
            flush=True,
        )
        errors = sum(c.outcomes.get(k, 0) for k in ERROR_OUTCOMES)
        failure = nothing_fetched_failure(fetched, errors, c.dead_letters)
        if until_idle and code == 0 and failure:
            print(f"seine: crawl failed: {failure}", file=sys.stderr, flush=True)
            return EXIT_NOTHING_FETCHED
        return code


def cmd_seed(args: argparse.Namespace) -> int:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    import topology

    settings = _settings_from(args)
    topic = topology.topic_name(settings.app_id, topology.SEEDS)
    # List all topics: asking for one by name lets a broker auto-create it.
    metadata = AdminClient({"bootstrap.servers": settings.bootstrap}).list_topics(timeout=10)
    info = metadata.topics.get(topic)
    if info is None or info.error is not None or not info.partitions:
        print(
            f"seine seed: topic {topic} not found on {settings.bootstrap}: is a crawl running?",
            file=sys.stderr,
        )
        return 1
    producer = Producer({"bootstrap.servers": settings.bootstrap})
    count = len(info.partitions)
    for url in args.urls:
        payload = json.dumps({"url": url, "priority": args.priority}).encode()
        producer.produce(topic, payload, partition=topology.url_partition(url, count))
    producer.flush(10)
    print(f"seine seed: {len(args.urls)} seed(s) sent to {topic}")
    return 0


def _open_store(args: argparse.Namespace, command: str) -> Any:
    """Every page store under --data-dir (its own, and one per worker of `--workers N`),
    read-only (a crawl may hold them open), as one StoreSet; None when there is none."""
    from streams.storeset import open_stores

    data = Path(_settings_from(args).data_dir)
    try:
        return open_stores(data)
    except OSError as exc:
        print(f"seine {command}: {exc}", file=sys.stderr)
        return None


def cmd_get(args: argparse.Namespace) -> int:
    from streams.core.urls import canonical

    store = _open_store(args, "get")
    if store is None:
        return 1
    with store:
        capture = store.get(canonical(args.url) or args.url, at=args.at)
        if capture is None:
            print(f"seine get: {args.url} is not stored in {store.path}", file=sys.stderr)
            return 1
        sys.stdout.buffer.write(capture.body)
        sys.stdout.buffer.flush()
    return 0


def cmd_pages(args: argparse.Namespace) -> int:
    store = _open_store(args, "pages")
    if store is None:
        return 1
    with store:
        for url in store.urls():
            sys.stdout.write(url + "\n")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """`seine export --cdxj`: the capture index as CDXJ, so pywb can replay our WARCs.

    Put the file in a pywb collection's ``indexes/`` and the segments in its
    ``archive/``: CDXJ names segments relative to the archive directory.  ``--out``
    writes a temp file and renames it, so a reader never sees half an index.
    """
    store = _open_store(args, "export")
    if store is None:
        return 1
    with store:
        if args.out is None:
            n = store.export_cdxj(sys.stdout)
            sys.stdout.flush()
        else:
            out = Path(args.out)
            tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
            try:
                with tmp.open("w", encoding="utf-8", newline="\n") as f:
                    n = store.export_cdxj(f)
                tmp.replace(out)
            finally:
                tmp.unlink(missing_ok=True)
    print(f"seine export: {n} captures from {store.path}", file=sys.stderr)
    return 0


def _retry_after(value: str | None) -> float:
    """Seconds to wait from a Retry-After header (seconds form), kept within 0.2–5."""
    try:
        return min(5.0, max(0.2, float(value or 1)))
    except ValueError:
        return 1.0


def cmd_shorten(args: argparse.Namespace) -> int:
    """POST /links on a worker (any worker: it forwards to the owner) and print the short URL."""
    import urllib.error
    import urllib.request

    body: dict[str, Any] = {"url": args.url, "permanent": args.permanent}
    if args.expires_at is not None:
        try:
            body["expires_at"] = float(args.expires_at)
        except ValueError:
            body["expires_at"] = args.expires_at
    request = urllib.request.Request(
        args.web.rstrip("/") + "/links",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                print(json.loads(response.read())["short_url"])
            return 0
        except urllib.error.HTTPError as exc:
            reason = exc.read().decode("utf-8", "replace")
            with contextlib.suppress(ValueError, KeyError, TypeError):
                reason = json.loads(reason)["error"]
            if exc.code == 503 and time.monotonic() < deadline:
                # Partitions moving between workers: the server says when to retry.
                time.sleep(_retry_after(exc.headers.get("Retry-After")))
                continue
            print(f"seine shorten: {exc.code}: {reason}", file=sys.stderr)
        except (urllib.error.URLError, OSError) as exc:
            print(f"seine shorten: cannot reach {args.web}: {exc}", file=sys.stderr)
        break
    return 1


def cmd_status(args: argparse.Namespace) -> int:
    """Summarise a crawl from outside: its crawl log, its consumer group, its dead letters."""
    from streams.core.stats import CrawlTally
    from streams.crawllog import (
        CrawlNotFound,
        LogRead,
        dead_letter_count,
        group_lag,
        parse_since,
        read_crawl_log,
        status_report,
    )

    settings = _settings_from(args)
    since = parse_since(args.since) if args.since else None
    tally = CrawlTally(history_seconds=3600)
    read = LogRead()
    try:
        for _p, _offset, record in read_crawl_log(settings, since=since, read=read):
            tally.add(record)
    except CrawlNotFound as exc:
        print(f"seine status: {exc}: is a crawl running with this app id?", file=sys.stderr)
        return 1
    try:
        lag = group_lag(settings)
    except Exception as exc:  # the broker may not answer group requests; say so
        print(f"seine status: consumer lag unavailable: {exc}", file=sys.stderr)
        lag = {}
    print(status_report(settings, tally, read, lag, dead_letter_count(settings)), flush=True)
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    """Re-feed URLs of the crawl log to the frontier of the running crawl."""
    from streams.crawllog import CrawlNotFound, parse_since, plan_replay, read_crawl_log, refeed

    settings = _settings_from(args)
    since = parse_since(args.since) if args.since else None
    until = parse_since(args.until) if args.until else None
    outcomes = tuple(o.strip() for o in args.outcomes.split(",") if o.strip())
    try:
        records = read_crawl_log(settings, since=since, from_offset=args.from_offset)
        plan = plan_replay(records, outcomes=outcomes, min_age=args.min_age, until=until)
        if args.dry_run:
            for url in plan.urls:
                print(url)
            sent = 0
        else:
            sent = refeed(settings, plan.urls)
    except CrawlNotFound as exc:
        print(f"seine replay: {exc}: is a crawl running with this app id?", file=sys.stderr)
        return 1
    print(
        f"seine replay: {sent if not args.dry_run else len(plan.urls)} URL(s) "
        f"{'re-fed to the frontier' if not args.dry_run else 'would be re-fed'}; "
        f"{plan.too_recent} fetched less than {args.min_age:g} s ago left out",
        file=sys.stderr,
    )
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from streams.demo.server import start_server_process
    from streams.demo.webgen import WebSpec

    spec = WebSpec(hosts=args.hosts, pages_per_host=args.pages, seed=args.seed)
    with tempfile.TemporaryDirectory(prefix="seine-demo-") as tmp:
        server = start_server_process(spec, Path(tmp) / "requests.jsonl", Path(tmp))
        try:
            print(
                f"seine demo: serving {args.hosts} hosts × {args.pages} pages on loopback "
                f"port {server.port}; crawling…",
                flush=True,
            )
            settings = _settings_from(
                args, allow_private=True, resolve={**server.resolve, **parse_resolve(args.resolve)}
            )
            if args.data_dir is None:
                settings = settings.with_overrides(data_dir="seine-data/demo")
            code = run_crawl(settings, list(server.seeds), until_idle=True)
            print(
                f"seine demo: try `seine pages --data-dir {settings.data_dir}` "
                f"and `seine get URL --data-dir {settings.data_dir}`"
            )
            return code
        finally:
            server.stop()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "crawl":
            seeds = _read_seeds(args)
            if not seeds:
                print(
                    "seine crawl: no seeds given (URL arguments or --seeds-file)", file=sys.stderr
                )
                return 2
            settings = _settings_from(args)
            if args.workers > 1:
                from streams.multiworker import run_workers

                with broker_for(settings) as effective:
                    return run_workers(effective, seeds, args.workers, args.until_idle)
            return run_crawl(settings, seeds, args.until_idle, drain_on_sigint=True)
        if args.command == "worker":
            settings = _settings_from(args)
            if not settings.bootstrap:
                print("seine worker: --bootstrap (or SEINE_BOOTSTRAP) is required", file=sys.stderr)
                return 2
            return run_crawl(settings, [], until_idle=False)
        if args.command == "seed":
            return cmd_seed(args)
        if args.command == "get":
            return cmd_get(args)
        if args.command == "pages":
            return cmd_pages(args)
        if args.command == "export":
            return cmd_export(args)
        if args.command == "shorten":
            return cmd_shorten(args)
        if args.command == "status":
            return cmd_status(args)
        if args.command == "replay":
            return cmd_replay(args)
        if args.command == "demo":
            return cmd_demo(args)
        if args.command == "broker":
            from streams.kafka_local import cmd_broker

            return cmd_broker(args)
    except ValueError as exc:
        print(f"seine {args.command}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # `seine pages | head`: the reader left; stop quietly, as Unix tools do.
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        return 0
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
