"""The `seine` command: crawl, worker, seed, get, pages, export, search, shorten,
status, replay, demo, broker.

Every command builds its Settings once (defaults < config file < SEINE_* env <
flags) and hands them on; nothing reads configuration at import time. Modules:
`parser` (flags → Settings), `brokers` (which broker a command runs on),
`crawl` (one worker in this process), `commands` (everything else). The CLI may
import any part of streams/; nothing in streams/ imports it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence

from streams.cli.brokers import broker_for
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
from streams.cli.crawl import _read_seeds, run_crawl
from streams.cli.parser import _settings_from, build_parser
from streams.cli.screen import screen_seeds


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
            seeds, refused = screen_seeds(seeds, settings)
            for why in refused:
                print(f"seine crawl: {why}", file=sys.stderr)
            if not seeds:
                print("seine crawl: no seed left to crawl", file=sys.stderr)
                return 2
            # A crawl ends when it is done, as Scrapy's does; --keep-running waits for
            # more seeds, and --recrawl never idles (run_crawl).
            until_idle = not (args.keep_running or settings.crawl.recrawl)
            if args.workers > 1:
                from streams.ops.multiworker import run_workers

                with broker_for(settings, workers=args.workers) as effective:
                    return run_workers(effective, seeds, args.workers, until_idle)
            return run_crawl(settings, seeds, until_idle, drain_on_sigint=True)
        if args.command == "worker":
            settings = _settings_from(args)
            if not settings.kafka.bootstrap:
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
        if args.command == "search":
            from streams.cli.search import cmd_search

            return cmd_search(args)
        if args.command == "shorten":
            return cmd_shorten(args)
        if args.command == "status":
            return cmd_status(args)
        if args.command == "replay":
            return cmd_replay(args)
        if args.command == "demo":
            return cmd_demo(args)
        if args.command == "broker":
            from streams.kafka.local import cmd_broker

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
