"""Each stage's pure-Python floor: the work a stage cannot skip, per page, beside what
the stage costs in a crawl.

A stage's floor is its job done by the same functions the stage calls, in one tight
loop over in-memory data, with nothing of the stream around it: no broker, no codec,
no tables or changelogs, no event loop, no batching. What a stage costs in a crawl
beyond its floor is that machinery. The floors, per page of the web:

* **fetch**: the bare aiohttp GET loop's own CPU (bench/aiohttp_floor.py, the
  "floor" crawler of bench/crawl_throughput.py), robots.txt included;
* **parse**: `parse_pages` (title, links, directives, fingerprint, simhash) and the
  payload digest;
* **content-dedup**: a dict of payload digests;
* **link-extract**: the page store's `put_many` (WARC record and index entry),
  `resolve_and_canonicalize` of the links, `page_text` (the document's text) and
  `document`;
* **url-filter**: `vet` of each link (trap rules);
* **url-seen**: a Python set of URLs (exact, in memory);
* **frontier**: `Frontier` over plain dicts: each new URL queued once, each page
  dispatched and completed once, robots.txt once a host;
* **indexer**: the full-text index's `apply` of each document, one commit;
* **anchors**: no floor (its work rides with the documents'; shown as measured).

bench/crawl_throughput.py prints these beside each Seine run's CPU per stage (the
workers' "CPU per stage" lines, summed, over the pages fetched) and names each stage
over 2× its floor. On its own this prints the floors:

    .venv/bin/python bench/stage_floor.py                  # 2,000 pages, ~15 s
    .venv/bin/python bench/stage_floor.py --hosts 20 --pages 100
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from streams.core.documents import document
from streams.core.filters import vet
from streams.core.frontier import Frontier, Politeness
from streams.core.parsing import charset_from_headers, parse_pages
from streams.core.text import page_text
from streams.core.urls import resolve_and_canonicalize
from streams.demo.webgen import DemoWeb, WebSpec
from streams.index.fulltext import FullTextIndex
from streams.store.pagestore import PageStore
from streams.store.warc import payload_digest

if TYPE_CHECKING:
    from bench.throughput_report import Result

#: A stage costing more than this many times its floor is named.
OVER = 2.0
#: Pages of the web the floors are taken over, in crawl_throughput.py.
SAMPLE = 2000
#: Pages a parse or store batch holds (a crawl's messages carry ~10-20).
BATCH = 12

Page = tuple[str, list[dict[str, str]], bytes]


def sample_pages(web: DemoWeb, count: int) -> list[Page]:
    """The first `count` canonical pages of the web: (URL, headers, body)."""
    pages: list[Page] = []
    for url in sorted(web.reachable_allowed()):
        host, _, rest = url.partition("://")[2].partition("/")
        served = web.page(host, "/" + rest)
        if served is None or served[0] != 200:
            continue
        headers = [{"name": k, "value": v} for k, v in served[1].items()]
        pages.append((url, headers, served[2]))
        if len(pages) == count:
            break
    return pages


def _timed(work: Callable[[], Any]) -> tuple[float, Any]:
    started = time.process_time()
    result = work()
    return time.process_time() - started, result


def _parse(pages: list[Page]) -> list[Any]:
    docs: list[Any] = []
    for i in range(0, len(pages), BATCH):
        chunk = pages[i : i + BATCH]
        found = parse_pages(
            [(body, charset_from_headers(headers)) for _, headers, body in chunk],
            with_simhash=True,
        )
        for (_, _, body), doc in zip(chunk, found, strict=True):
            docs.append((payload_digest(body), doc))
    return docs


def _dedup(parsed: list[Any], pages: list[Page]) -> int:
    first: dict[str, str] = {}
    for (digest, _), (url, _, _) in zip(parsed, pages, strict=True):
        first.setdefault(digest, url)
    return len(first)


def _link_extract(pages: list[Page], parsed: list[Any], store: PageStore) -> tuple[list, list]:
    links: list[str] = []
    docs: list[tuple[str, Any]] = []
    for i in range(0, len(pages), BATCH):
        writes = [
            {"url": url, "status": 200, "headers": [(h["name"], h["value"]) for h in headers],
             "body": body, "fetched_at": 1.7e9 + i, "ip": "127.0.0.1", "truncated": False}
            for url, headers, body in pages[i : i + BATCH]
        ]  # fmt: skip
        store.put_many(writes, captures=False)
    for (url, headers, body), (digest, doc) in zip(pages, parsed, strict=True):
        links.extend(resolve_and_canonicalize(url, doc.links))
        text = page_text(body, charset_from_headers(headers))
        page = {"url": url, "status": 200, "fetched_at": 1.7e9, "headers": headers, "depth": 1}
        made = document(page, title=doc.title, text=text, digest=digest, size=len(body))
        docs.append((url, made))
    return links, docs


def _frontier(urls: list[str]) -> int:
    """Queue each URL once, then dispatch and complete until nothing is left."""
    now = [1e9]
    frontier = Frontier({}, {}, Politeness(), lambda _host: 0, lambda: now[0])
    for url in urls:
        frontier.enqueue(url)
    done = 0
    while True:
        dispatches, _ = frontier.due(0)
        if not dispatches:
            if frontier.in_flight == 0:
                return done
            now[0] += 1.0
            continue
        for d in dispatches:
            body = b"" if d.kind == "robots" else None
            frontier.complete(d.host, d.kind, 200, "ok", 1.0, now[0], None, body)
            done += d.kind == "page"
        now[0] += 0.001


def floors(pages: list[Page], work: Path) -> dict[str, float]:
    """Seconds of CPU per page of each stage's floor over `pages` (fetch aside)."""
    out: dict[str, float] = {}
    n = len(pages)
    seconds, parsed = _timed(lambda: _parse(pages))
    out["parse"] = seconds / n
    out["content-dedup"] = _timed(lambda: _dedup(parsed, pages))[0] / n
    with PageStore(work / "pages") as store:
        seconds, (links, docs) = _timed(lambda: _link_extract(pages, parsed, store))
    out["link-extract"] = seconds / n
    out["url-filter"] = _timed(lambda: [vet(link) for link in links])[0] / n
    seen: set[str] = set()
    fresh = [link for link in links if not (link in seen or seen.add(link))]  # type: ignore[func-returns-value]
    out["url-seen"] = _timed(lambda: _seen(links))[0] / n
    # a page of a crawl is one URL queued, dispatched and completed
    out["frontier"] = _timed(lambda: _frontier(fresh))[0] / max(1, len(fresh))
    index = FullTextIndex(work / "index", writable=True)
    out["indexer"] = _timed(lambda: _index(index, docs))[0] / n
    index.close()
    return out


def _seen(links: list[str]) -> int:
    seen: set[str] = set()
    for link in links:
        if link not in seen:
            seen.add(link)
    return len(seen)


def _index(index: FullTextIndex, docs: list[tuple[str, Any]]) -> int:
    for doc_id, doc in docs:
        index.apply(doc_id, doc)
    return index.commit()


#: One stage's part of a worker's "CPU per stage" line: name, then "(SECONDS s,".
_STAGE = re.compile(r"(?:^|; )([a-z-]+) [\d.]+% \(([\d.]+) s")


def stage_seconds(notes: Sequence[str]) -> dict[str, float]:
    """CPU seconds per stage, summed over the workers' "CPU per stage" lines."""
    total: dict[str, float] = {}
    for line in notes:
        if "CPU per stage" not in line:
            continue
        for name, seconds in _STAGE.findall(line.split(": ", 2)[-1]):
            if name != "other":
                total[name] = total.get(name, 0.0) + float(seconds)
    return total


def compare(
    measured_s: dict[str, float], pages: int, floor_s: dict[str, float]
) -> tuple[list[str], list[str]]:
    """Lines of the per-stage table (µs a page, crawl against floor), and the stages
    over `OVER` times their floor."""
    lines, over = [], []
    for stage in sorted(measured_s, key=lambda s: -measured_s[s]):
        crawl_us = 1e6 * measured_s[stage] / max(pages, 1)
        floor = floor_s.get(stage)
        if floor is None or floor <= 0:
            lines.append(f"  {stage:<14} {crawl_us:8.0f} µs/page   (no floor)")
            continue
        ratio = crawl_us / (1e6 * floor)
        flag = f"  over {OVER:g}x its floor" if ratio > OVER else ""
        lines.append(
            f"  {stage:<14} {crawl_us:8.0f} µs/page   floor {1e6 * floor:7.0f}   "
            f"{ratio:5.1f}x{flag}"
        )
        if ratio > OVER:
            over.append(stage)
    return lines, over


def print_stage_floors(results: Sequence[Result], web: DemoWeb, work: Path) -> None:
    """After a crawl_throughput run: each Seine run's CPU per stage and page against
    the floors over `SAMPLE` pages of the same web (fetch: the floor crawler's CPU a
    page, when it ran), and the stages over `OVER` times their floor."""
    seines = [r for r in results if r.ok and r.crawler.startswith("seine")]
    if not seines:
        return
    floor_s = floors(sample_pages(web, SAMPLE), work / "stage-floors")
    bare = [r for r in results if r.ok and r.crawler == "floor"]
    if bare:
        floor_s["fetch"] = statistics.median(
            r.measured.cpu_s / max(r.check.page_fetches, 1) for r in bare
        )
    for r in seines:
        lines, over = compare(stage_seconds(r.notes), r.check.page_fetches, floor_s)
        print(f"=== {r.crawler} run {r.run}: CPU per stage and page, against its floor ===")
        print("\n".join(lines))
        named = ", ".join(over) if over else "none"
        print(f"  over {OVER:g}x the floor: {named}  (floors: bench/stage_floor.py)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=200)
    parser.add_argument("--pages", type=int, default=100, help="pages per host")
    parser.add_argument("--sample", type=int, default=SAMPLE, help="pages timed")
    args = parser.parse_args(argv)
    web = DemoWeb(
        WebSpec(
            hosts=args.hosts,
            pages_per_host=args.pages,
            page_bytes=8192,
            links_per_page=23,
            duplicate_fraction=0.1,
        )
    )
    pages = sample_pages(web, args.sample)
    with tempfile.TemporaryDirectory(prefix="seine-floor-") as work:
        result = floors(pages, Path(work))
    print(f"stage floors over {len(pages):,} pages (CPU µs a page, fetch aside):")
    for stage, seconds in result.items():
        print(f"  {stage:<14} {1e6 * seconds:8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
