"""`seine search`: query a crawl's full-text indexes (every worker's, merged by score).

One query from the command line, or `--queries FILE` with one query per line, all
answered in this one process (the indexes are opened once: an evaluation's batch
search). Plain output is a ranked list for people; `--json` prints one JSON line per
hit: {"query", "rank", "url", "title", "score", "snippet", "highlights"}.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from streams.cli.parser import _settings_from
from streams.index.search import CrawlSearch


def _queries(args: argparse.Namespace) -> list[str] | None:
    """The queries to run, or None after printing why there are none."""
    if args.queries is None:
        if not args.query:
            print("seine search: give a QUERY or --queries FILE", file=sys.stderr)
            return None
        return [" ".join(args.query)]
    try:
        text = Path(args.queries).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        print(f"seine search: cannot read {args.queries}: {exc}", file=sys.stderr)
        return None
    return [line.strip() for line in text.splitlines() if line.strip()]


def cmd_search(args: argparse.Namespace) -> int:
    queries = _queries(args)
    if queries is None:
        return 2
    data_dir = _settings_from(args).data_dir
    try:
        crawl = CrawlSearch(data_dir)
    except (OSError, ValueError) as exc:
        print(f"seine search: {exc}", file=sys.stderr)
        return 2
    out = sys.stdout
    found_any = False
    for query in queries:
        hits = crawl.search(query, args.limit)
        found_any = found_any or bool(hits)
        for rank, hit in enumerate(hits, 1):
            if args.json:
                out.write(json.dumps(hit.as_json(query, rank), ensure_ascii=False) + "\n")
            else:
                out.write(f"{rank:>3}. {hit.title or '(no title)'}  [{hit.score:.2f}]\n")
                out.write(f"     {hit.url}\n")
                if hit.snippet:
                    out.write(f"     {hit.snippet}\n")
        if not hits and not args.json:
            out.write(f"no hits for {query!r}\n")
    out.flush()
    return 0 if found_any else 1
