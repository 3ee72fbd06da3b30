"""The other `seine` commands: seed, get, pages, export, shorten, status, replay and
demo."""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from streams.cli.crawl import crawl
from streams.cli.parser import _settings_from
from streams.cli.screen import screen_seeds
from streams.settings import Settings, parse_resolve


def cmd_seed(args: argparse.Namespace) -> int:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    import topology

    settings = _settings_from(args)
    urls, refused = screen_seeds(args.urls, None)  # the crawl's settings decide addresses
    for why in refused:
        print(f"seine seed: {why}", file=sys.stderr)
    if not urls:
        print("seine seed: no seed left to send", file=sys.stderr)
        return 2
    topic = topology.topic_name(settings.app_id, topology.SEEDS)
    # List all topics: asking for one by name lets a broker auto-create it.
    metadata = AdminClient({"bootstrap.servers": settings.kafka.bootstrap}).list_topics(timeout=10)
    info = metadata.topics.get(topic)
    if info is None or info.error is not None or not info.partitions:
        print(
            f"seine seed: topic {topic} not found on {settings.kafka.bootstrap}: "
            "is a crawl running?",
            file=sys.stderr,
        )
        return 1
    producer = Producer({"bootstrap.servers": settings.kafka.bootstrap})
    count = len(info.partitions)
    for url in urls:
        payload = json.dumps({"url": url, "priority": args.priority}).encode()
        producer.produce(topic, payload, partition=topology.url_partition(url, count))
    producer.flush(10)
    print(f"seine seed: {len(urls)} seed(s) sent to {topic}")
    return 0


def _open_store(args: argparse.Namespace, command: str) -> Any:
    """Every page store under --data-dir (its own, and one per worker of `--workers N`),
    read-only (a crawl may hold them open), as one StoreSet; None when there is none."""
    from streams.store.storeset import open_stores

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
    pages = copies = 0
    with store:
        for url, original in store.url_kinds():
            if original is None:
                pages += 1
                sys.stdout.write(url + "\n")
            else:  # an exact copy, kept as a revisit record: marked, after a tab
                copies += 1
                sys.stdout.write(f"{url}\tduplicate of {original}\n")
    print(f"seine pages: {pages} pages stored, {copies} duplicates (marked)", file=sys.stderr)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """`seine export --cdxj`: the capture index as CDXJ, so pywb can replay our WARCs;
    `seine export --links [--hosts]`: the link graph as an edge list (see
    streams/store/linkgraph.py).

    Put the CDXJ file in a pywb collection's ``indexes/`` and the segments in its
    ``archive/``: CDXJ names segments relative to the archive directory.  ``--out``
    writes a temp file and renames it, so a reader never sees half a file.
    """
    from streams.core.robots import agent_token
    from streams.store import linkgraph

    if args.hosts and not args.links:
        print("seine export: --hosts goes with --links", file=sys.stderr)
        return 2
    settings = _settings_from(args)
    store = _open_store(args, "export")
    if store is None:
        return 1
    agent = agent_token(settings.fetch.user_agent)
    max_url = settings.crawl.max_url_bytes
    what = "captures"
    write: Callable[[TextIO], int] = store.export_cdxj
    if args.links:
        what = "host edges" if args.hosts else "edges"
        graph = linkgraph.write_host_edges if args.hosts else linkgraph.write_page_edges
        write = functools.partial(graph, store, agent=agent, max_url=max_url)
    with store:
        if args.out is None:
            n = write(sys.stdout)
            sys.stdout.flush()
        else:
            out = Path(args.out)
            tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
            try:
                f = tmp.open("w", encoding="utf-8", newline="\n")
            except OSError as exc:  # a directory that is not there, or not ours
                print(f"seine export: cannot write {out}: {exc.strerror}", file=sys.stderr)
                return 1
            try:
                with f:
                    n = write(f)
                tmp.replace(out)
            finally:
                tmp.unlink(missing_ok=True)
    print(f"seine export: {n} {what} from {store.path}", file=sys.stderr)
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
    from streams.ops.crawllog import (
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
    if not settings.kafka.bootstrap:
        return _status_from_journal(settings, since)
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


def _status_from_journal(settings: Settings, since: float | None) -> int:
    """`seine status --data-dir DIR`: the crawl log and dead letters kept beside the
    pages, readable after the broker is gone (streams/store/journal.py)."""
    from streams.core.stats import CrawlTally
    from streams.ops.crawllog import LogRead, status_report
    from streams.store.journal import (
        CRAWL_LOG_FILE,
        DEAD_LETTERS_FILE,
        journal_files,
        read_journal,
    )

    data_dir = Path(settings.data_dir)
    files = journal_files(data_dir, CRAWL_LOG_FILE)
    if not files:
        print(
            f"seine status: no crawl log in {data_dir} (give --data-dir of a crawl, "
            "or --bootstrap of a running one)",
            file=sys.stderr,
        )
        return 1
    tally = CrawlTally(history_seconds=3600)
    for record in read_journal(data_dir):
        if since is None or float(record.get("at") or 0.0) >= since:
            tally.add(record)
    dead = sum(1 for _ in read_journal(data_dir, DEAD_LETTERS_FILE))
    read = LogRead(records=tally.records, partitions=len(files))
    report = status_report(settings, tally, read, {}, dead, source=str(data_dir))
    print(report, flush=True)
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    """Re-feed URLs of the crawl log to the frontier of the running crawl."""
    from streams.ops.crawllog import CrawlNotFound, parse_since, plan_replay, read_crawl_log, refeed

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


#: Marks a data dir as a demo's, which the next `seine demo` may clear.
DEMO_MARK = ".seine-demo"


def _fresh_demo_dir(data_dir: Path) -> str | None:
    """Make `data_dir` empty for a demo: a previous demo's data is removed (its web
    was served on another port, so none of it would be reused); any other data is
    left alone and refused. Returns the one-line refusal, else None."""
    import shutil

    if not data_dir.exists() or not any(data_dir.iterdir()):
        data_dir.mkdir(parents=True, exist_ok=True)
    elif (data_dir / DEMO_MARK).exists():
        shutil.rmtree(data_dir)
        data_dir.mkdir(parents=True)
        print(f"seine demo: starting afresh: removed the previous demo's data in {data_dir}")
    else:
        return f"{data_dir} holds data that is not a demo's: give another --data-dir"
    (data_dir / DEMO_MARK).write_text("written by seine demo, which may clear this dir\n")
    return None


def cmd_demo(args: argparse.Namespace) -> int:
    from streams.demo.server import start_server_process
    from streams.demo.webgen import WebSpec

    spec = WebSpec(hosts=args.hosts, pages_per_host=args.pages, seed=args.seed)
    data_dir = Path(args.data_dir or "seine-data/demo")
    refused = _fresh_demo_dir(data_dir)
    if refused:
        print(f"seine demo: {refused}", file=sys.stderr)
        return 2
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
            settings = settings.with_overrides(data_dir=str(data_dir))
            code = crawl(settings, list(server.seeds), until_idle=True)
            print(
                f"seine demo: try `seine pages --data-dir {settings.data_dir}`, "
                f"`seine get URL --data-dir {settings.data_dir}` "
                f"and `seine search WORDS --data-dir {settings.data_dir}`"
            )
            return code
        finally:
            server.stop()
