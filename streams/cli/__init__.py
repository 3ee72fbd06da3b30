"""The `seine` command: crawl, worker, seed, get, pages, export, search, shorten,
status, replay, demo, broker.

Every command builds its Settings once (defaults < config file < SEINE_* env <
flags) and hands them on; nothing reads configuration at import time. Modules:
`parser` (flags → Settings), `brokers` (which broker a command runs on),
`crawl` (one worker in this process), `commands` (everything else). The CLI may
import any part of streams/; nothing in streams/ imports it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Sequence

from confluent_kafka import KafkaException

from streams.cli.commands import (
    cmd_demo,
    cmd_export,
    cmd_get,
    cmd_pages,
    cmd_replay,
    cmd_seed,
    cmd_shorten,
    cmd_status,
)
from streams.cli.crawl import _read_seeds, crawl, run_crawl
from streams.cli.parser import _settings_from, build_parser
from streams.cli.screen import screen_seeds


def cmd_crawl(args: argparse.Namespace) -> int:
    seeds = _read_seeds(args)
    if not seeds:
        print("seine crawl: no seeds given (URL arguments or --seeds-file)", file=sys.stderr)
        return 2
    settings = _settings_from(args)
    seeds, refused = screen_seeds(seeds, settings)
    for why in refused:
        print(f"seine crawl: {why}", file=sys.stderr)
    if not seeds:
        print("seine crawl: no seed left to crawl", file=sys.stderr)
        return 2
    # A crawl ends when it is done, as Scrapy's does; --keep-running waits for more
    # seeds, and --recrawl never idles (run_crawl).
    until_idle = not (args.keep_running or settings.crawl.recrawl)
    return crawl(settings, seeds, until_idle)


def cmd_worker(args: argparse.Namespace) -> int:
    settings = _settings_from(args)
    if not settings.kafka.bootstrap:
        print("seine worker: --bootstrap (or SEINE_BOOTSTRAP) is required", file=sys.stderr)
        return 2
    return run_crawl(
        settings, [], until_idle=False, drain_on_sigint=settings.worker.drain_on_sigint
    )


def cmd_search(args: argparse.Namespace) -> int:
    from streams.cli.search import cmd_search as search

    return search(args)


def cmd_broker(args: argparse.Namespace) -> int:
    from streams.kafka.local import cmd_broker as broker

    return broker(args)


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "crawl": cmd_crawl,
    "worker": cmd_worker,
    "seed": cmd_seed,
    "get": cmd_get,
    "pages": cmd_pages,
    "export": cmd_export,
    "search": cmd_search,
    "shorten": cmd_shorten,
    "status": cmd_status,
    "replay": cmd_replay,
    "demo": cmd_demo,
    "broker": cmd_broker,
}
#: Commands that only talk to a running cluster: checked first, so one that is not
#: there is one line naming it, not librdkafka's log and a traceback.
CLUSTER_COMMANDS = ("seed", "status", "replay")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command = COMMANDS.get(args.command)
    if command is None:
        return 2
    try:
        if args.command in CLUSTER_COMMANDS and getattr(args, "bootstrap", None):
            from streams.kafka.admin import cluster_info

            cluster_info(args.bootstrap, timeout=5.0)  # a ValueError naming it
        return command(args)
    except ValueError as exc:
        print(f"seine {args.command}: {exc}", file=sys.stderr)
        return 2
    except KafkaException as exc:  # a cluster that went away mid-command
        print(f"seine {args.command}: Kafka: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # `seine pages | head`: the reader left; stop quietly, as Unix tools do.
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        return 0
