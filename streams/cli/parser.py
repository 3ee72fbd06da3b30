"""The `seine` argument parser, and Settings from parsed flags (defaults < config
file < SEINE_* env < flags)."""

from __future__ import annotations

import argparse
import importlib.metadata
from typing import Any

from streams.core.stats import REPLAY_OUTCOMES
from streams.settings import GROUP_OF, Settings, load_settings, parse_resolve


def _version() -> str:
    try:
        return importlib.metadata.version("seine")
    except importlib.metadata.PackageNotFoundError:  # run from a tree, not installed
        return "unknown"


def _whole(value: str, least: int) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < least:
        raise argparse.ArgumentTypeError(f"{number} is not {least} or more")
    return number


def positive_int(value: str) -> int:
    """An argparse type: a whole number of 1 or more (0 or -1 workers is an error, not
    one worker)."""
    return _whole(value, 1)


def count(value: str) -> int:
    """An argparse type: a whole number of 0 or more (a negative budget is an error)."""
    return _whole(value, 0)


def seconds(value: str) -> float:
    """An argparse type: a number of seconds, 0 or more (a negative delay is an error)."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not number >= 0 or number == float("inf"):  # NaN and inf too
        raise argparse.ArgumentTypeError(f"{value} is not a number of seconds, 0 or more")
    return number


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="TOML config file (section [seine] or top level)")
    parser.add_argument("--data-dir", dest="data_dir", help="where tables and pages live")
    parser.add_argument("--log-level", dest="log_level", help="warning (default), info, debug")


def _crawl_flags(parser: argparse.ArgumentParser, *, bootstrap_required: bool = False) -> None:
    _common(parser)
    _cluster_flags(parser, bootstrap_required=bootstrap_required)
    _pace_flags(parser)
    _limit_flags(parser)
    _recrawl_flags(parser)
    _web_flags(parser)


def _cluster_flags(parser: argparse.ArgumentParser, *, bootstrap_required: bool) -> None:
    """The broker to use (or start), and how topics are partitioned and replicated."""
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


def _pace_flags(parser: argparse.ArgumentParser) -> None:
    """How long to wait between two requests to one host."""
    parser.add_argument("--delay", type=seconds, help="seconds between two requests to one host")
    parser.add_argument(
        "--max-crawl-delay",
        dest="max_crawl_delay",
        type=seconds,
        help="cap on a robots.txt Crawl-delay honoured, in seconds (default 30)",
    )
    parser.add_argument(
        "--response-time-factor",
        dest="response_time_factor",
        type=seconds,
        help="also wait K x the host's last response time between requests (default 0: off)",
    )


def _limit_flags(parser: argparse.ArgumentParser) -> None:
    """How far the crawl goes, and where it may connect."""
    parser.add_argument(
        "--max-pages", dest="max_pages", type=int, help="stop after N pages (default 0: no limit)"
    )
    parser.add_argument(
        "--max-depth", dest="max_depth", type=int, help="link depth limit (default 0: no limit)"
    )
    parser.add_argument(
        "--max-host-pages",
        dest="max_host_pages",
        type=count,
        help="pages one host may be asked for in all, a trap's budget (0: no limit)",
    )
    parser.add_argument(
        "--max-host-queue",
        dest="max_host_queue",
        type=count,
        help="URLs one host may have queued at once (0: no limit)",
    )
    _trap_flags(parser)
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


def _trap_flags(parser: argparse.ArgumentParser) -> None:
    """Trap guards: links followed per page, and URL shapes refused (README: Traps)."""
    parser.add_argument(
        "--max-outlinks",
        dest="max_outlinks",
        type=count,
        help="distinct links followed per page, the first in the page (0: all)",
    )
    parser.add_argument(
        "--max-url-length",
        dest="max_url_length",
        type=count,
        help="longest URL followed, in characters (0: no limit)",
    )
    parser.add_argument(
        "--max-path-depth",
        dest="max_path_depth",
        type=count,
        help="most path segments in a URL followed (0: no limit)",
    )
    parser.add_argument(
        "--max-segment-repeats",
        dest="max_segment_repeats",
        type=count,
        help="times a path segment (or 2-3 of them) may repeat in a row (0: no limit)",
    )
    parser.add_argument(
        "--calendar-years-ahead",
        dest="calendar_years_ahead",
        type=int,
        help="refuse URLs dated more years ahead of this one (negative: no limit)",
    )
    parser.add_argument(
        "--calendar-years-back",
        dest="calendar_years_back",
        type=int,
        help="refuse URLs dated more years before this one (negative: no limit)",
    )
    parser.add_argument(
        "--keep-session-ids",
        dest="strip_session_ids",
        action="store_const",
        const=False,
        help="keep session ids (jsessionid, PHPSESSID, sid...) in URLs instead of dropping them",
    )


def _recrawl_flags(parser: argparse.ArgumentParser) -> None:
    """Refetching on a revisit schedule, and following sitemaps."""
    parser.add_argument(
        "--recrawl",
        action="store_const",
        const=True,
        help="keep crawling: refetch pages on their revisit schedule (never stops when idle)",
    )
    parser.add_argument(
        "--revisit-min",
        dest="revisit_min",
        type=seconds,
        metavar="SECONDS",
        help="shortest revisit interval (default 3600)",
    )
    parser.add_argument(
        "--revisit-max",
        dest="revisit_max",
        type=seconds,
        metavar="SECONDS",
        help="longest revisit interval (default 30 days)",
    )
    parser.add_argument(
        "--revisit-initial",
        dest="revisit_initial",
        type=seconds,
        metavar="SECONDS",
        help="revisit interval after a page's first fetch (default 1 day)",
    )
    parser.add_argument(
        "--no-index",
        dest="index",
        action="store_const",
        const=False,
        help="do not build the full-text index for `seine search` (documents are still "
        "written to the documents topic)",
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


def _web_flags(parser: argparse.ArgumentParser) -> None:
    """The crawler's User-Agent, and the ports of the worker's web servers."""
    parser.add_argument(
        "--user-agent",
        dest="user_agent",
        help="the User-Agent header; its first word is the robots.txt and meta robots token",
    )
    parser.add_argument(
        "--web-port",
        dest="web_port",
        type=int,
        help="serve the web API on this localhost port (default: off)",
    )
    parser.add_argument(
        "--redirect-port",
        dest="redirect_port",
        type=int,
        help="also serve short-link redirects (GET /s/CODE) on this localhost port, "
        "from a process of their own beside the worker (default: off)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="seine", description="Seine: a web crawler built as a stream pipeline on Kafka."
    )
    parser.add_argument("--version", action="version", version=f"seine {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    _crawl_commands(sub)
    _store_commands(sub)
    _topic_commands(sub)
    _local_commands(sub)
    _show_defaults(parser)
    return parser


def _show_defaults(parser: argparse.ArgumentParser, defaults: Settings | None = None) -> None:
    """Append each flag's default to its help: the flag's own, or, for a flag that
    overrides a setting (its default None), the setting's built-in default."""
    defaults = defaults or Settings()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _show_defaults(sub, defaults)
            continue
        help_text = action.help
        if not action.option_strings or help_text in (None, argparse.SUPPRESS):
            continue
        if action.default == argparse.SUPPRESS:  # --help, --version
            continue
        if "default" in help_text or isinstance(action, argparse._VersionAction):
            continue
        value: Any = action.default
        if value is None and action.dest in GROUP_OF:
            group = GROUP_OF[action.dest]
            value = getattr(getattr(defaults, group) if group else defaults, action.dest)
        if value is None or isinstance(value, bool | list | dict | tuple):
            continue  # switches, and lists empty by default, say what they do
        shown = f"{value:g}" if isinstance(value, float) else str(value)
        action.help = f"{help_text} (default: {shown.replace('%', '%%')})"


def _crawl_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """crawl, worker and seed: run a crawl, join one, feed one."""
    crawl = sub.add_parser("crawl", help="crawl from seed URLs (embedded broker by default)")
    crawl.add_argument("urls", nargs="*", help="seed URLs")
    crawl.add_argument("--seeds-file", dest="seeds_file", help="file with one seed URL per line")
    crawl.add_argument(
        "--until-idle",
        dest="until_idle",
        action="store_true",
        help="exit once nothing is queued, in flight or unhandled: what a crawl does "
        "unless --keep-running or --recrawl is given",
    )
    crawl.add_argument(
        "--keep-running",
        dest="keep_running",
        action="store_true",
        help="keep running when nothing is left to do, for seeds sent later "
        "(`seine seed`) until stopped",
    )
    _workers_flag(crawl)
    _crawl_flags(crawl)

    worker = sub.add_parser("worker", help="join a crawl on a Kafka cluster as one more worker")
    _crawl_flags(worker)

    seed = sub.add_parser("seed", help="push seed URLs to a running crawl")
    seed.add_argument("urls", nargs="+")
    seed.add_argument("--bootstrap", required=True, help="Kafka bootstrap HOST:PORT")
    seed.add_argument(
        "--priority", type=int, default=0, help="seed priority: higher is crawled sooner"
    )
    _common(seed)


def _store_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """get, pages and export read the page store; shorten asks a worker for a short link."""
    get = sub.add_parser("get", help="write the stored body of URL to stdout")
    get.add_argument("url")
    get.add_argument("--at", type=float, help="the capture closest to this unix time")
    _common(get)

    pages = sub.add_parser("pages", help="list stored URLs, one per line")
    _common(pages)

    export = sub.add_parser(
        "export", help="write the page store's index for archive tools, or its link graph"
    )
    formats = export.add_mutually_exclusive_group(required=True)
    formats.add_argument(
        "--cdxj", action="store_true", help="sorted CDXJ with SURT keys, as pywb reads it"
    )
    formats.add_argument(
        "--links", action="store_true", help="the page graph: SOURCE_URL<TAB>TARGET_URL a line"
    )
    export.add_argument(
        "--hosts",
        action="store_true",
        help="with --links, the host graph: SOURCE_HOST<TAB>TARGET_HOST<TAB>LINKS a line",
    )
    export.add_argument("--out", help="write to FILE (atomically) instead of stdout")
    _common(export)

    shorten = sub.add_parser("shorten", help="make a short link on a running worker's web server")
    shorten.add_argument("url")
    shorten.add_argument("--permanent", action="store_true", help="answer 301 instead of 302")
    shorten.add_argument("--expires-at", dest="expires_at", help="unix seconds or ISO-8601 time")
    shorten.add_argument("--web", default="http://127.0.0.1:6066", help="the worker's web URL")

    search = sub.add_parser(
        "search", help="search the crawl's full-text index (every worker's, merged by score)"
    )
    search.add_argument("query", nargs="*", help="the query (Tantivy's query language)")
    search.add_argument(
        "--queries", metavar="FILE", help="run one query per line of FILE in one process"
    )
    search.add_argument(
        "--limit", type=positive_int, default=10, help="hits per query (default: %(default)s)"
    )
    search.add_argument(
        "--json",
        action="store_true",
        help='one JSON line per hit: {"query", "rank", "url", "title", "score", "snippet"}',
    )
    _common(search)


def _topic_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """status and replay: read a running crawl's topics."""
    status = sub.add_parser(
        "status",
        help="summarise a crawl: a running one from its topics (--bootstrap), "
        "any one from the crawl log kept in its data dir (--data-dir)",
    )
    status.add_argument("--bootstrap", help="Kafka bootstrap HOST:PORT of a running crawl")
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
        type=seconds,
        default=0.0,
        help="skip URLs whose latest fetch is younger than this many seconds",
    )
    replay.add_argument(
        "--dry-run", dest="dry_run", action="store_true", help="list the URLs, send nothing"
    )
    _common(replay)


def _local_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """broker and demo: run a local broker, or serve the demo web and crawl it."""
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
    demo.add_argument("--hosts", type=int, default=20, help="hosts of the demo web")
    demo.add_argument("--pages", type=int, default=30, help="pages per host")
    demo.add_argument("--seed", type=int, default=1, help="the demo web generator's seed")
    _workers_flag(demo)
    _crawl_flags(demo)


def _workers_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workers",
        type=positive_int,
        help="worker processes sharing the partitions (default: one per core, at most "
        "one per partition)",
    )


def _settings_from(args: argparse.Namespace, **extra: Any) -> Settings:
    overrides: dict[str, Any] = {}
    for name in (
        "data_dir",
        "log_level",
        "workers",
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
        "max_outlinks",
        "max_url_length",
        "max_path_depth",
        "max_segment_repeats",
        "calendar_years_ahead",
        "calendar_years_back",
        "strip_session_ids",
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
        "index",
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
