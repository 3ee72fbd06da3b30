"""Benchmark: search latency over 100,000+ documents, Seine's index beside SQLite FTS5.

    apt-get install python3.11-doc      # the text the documents are made of
    .venv/bin/python bench/search_latency.py
    .venv/bin/python bench/search_latency.py --docs 20000 --queries 300

What it does:

* **The documents**: the paragraphs and headings of the Python docs
  (python3.11-doc; their main content, via lxml), drawn with a seeded RNG: each
  document has a heading as its title, 1-4 headings, 4-16 paragraphs as its text
  (~1.8 KB), its first 160 characters as its description, and a URL on one of 200
  sites. Every document differs; the same seed gives the same corpus.
* **Seine**: `FullTextIndex` written as the indexer writes it (`apply` per document,
  `commit` per batch, `close`), searched through `CrawlSearch.search`, which is what
  `seine search` calls: the top 10 by BM25 with `BOOSTS`, their stored fields and a
  highlighted snippet each.
* **SQLite FTS5**: the same documents in a virtual table (url, title, headings,
  description, text; the unicode61 tokenizer), a transaction per batch and an
  ``optimize`` at the end (Seine's build includes its segment merges); a query is
  ``ORDER BY bm25(...)`` with Seine's field weights, ``LIMIT 10``, with ``snippet()``
  of the text.
* **The queries**: single words and two words taken from random paragraphs (a stop
  list drops words such as "the"), and Python API names from the docs' inventory.
  Seine gets the query as it is (a dotted name: all its parts required, as Seine
  parses it); FTS5 gets the same meaning in its syntax: words OR'ed, a dotted
  name's parts AND'ed.
* **Timing**: wall time of each search in this process (after 50 warm-up queries),
  the engines alternating query by query so that noise from other processes falls
  on both; p50/p95/p99 in ms, and the p99 of this process's CPU time (what other
  processes on the machine do not inflate; the load average is printed beside).
  Build time and size on disk of each.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import lxml.html  # noqa: E402

from bench.search_quality import DEFAULT_DIR, WORD, inventory  # noqa: E402
from streams.index.fulltext import BOOSTS, FullTextIndex  # noqa: E402
from streams.index.search import INDEX_DIR, CrawlSearch  # noqa: E402

SEED = 20261128
SITES = 200
WARMUP = 50
#: Words no query is made of alone.
STOP_WORDS = (
    "the and for that with this from are was were not but you your can all any has have "
    "its into than then them they there these those which when where what will would "
    "also been being does each other such only more most some used uses using"
)
STOP = frozenset(STOP_WORDS.split())
#: FTS5 columns, in order, and their bm25 weights (Seine's BOOSTS).
COLUMNS = ("url", "title", "headings", "description", "text")
WEIGHTS = ", ".join(str(BOOSTS[c]) for c in COLUMNS)


@dataclass
class Pool:
    paragraphs: list[str] = field(default_factory=list)
    headings: list[str] = field(default_factory=list)


def read_pool(docs: Path) -> Pool:
    """The main content's paragraphs (40+ characters) and headings of every page."""
    pool = Pool()
    main = '//div[@role="main"]'
    for path in sorted(docs.rglob("*.html")):
        tree = lxml.html.fromstring(path.read_bytes())
        for node in tree.xpath(f"{main}//p"):
            text = " ".join(node.text_content().split())
            if len(text) >= 40:
                pool.paragraphs.append(text)
        for node in tree.xpath(f"{main}//h1|{main}//h2|{main}//h3"):
            text = " ".join(node.text_content().split()).rstrip("¶")
            if text:
                pool.headings.append(text)
    return pool


def documents(pool: Pool, n: int, seed: int) -> Iterator[tuple[str, dict[str, Any]]]:
    """`n` documents (id, document as the indexer gets it), the same for one seed."""
    rng = random.Random(seed)
    for i in range(n):
        title = rng.choice(pool.headings)
        text = "\n\n".join(rng.choices(pool.paragraphs, k=rng.randint(4, 16)))
        slug = "-".join(WORD.findall(title.lower())[:4]) or "page"
        site = f"site-{i % SITES:03d}.test"
        url = f"http://{site}/{slug}/{i}.html"
        yield (
            url,
            {
                "url": url,
                "title": title,
                "headings": rng.sample(pool.headings, rng.randint(1, 4)),
                "description": text[:160],
                "text": text,
                "language": "en",
                "site": site,
                "fetched_at": float(i),
            },
        )


def queries(pool: Pool, docs: Path, n: int, seed: int) -> list[tuple[str, str]]:
    """`n` (kind, query): 40% one word, 40% two words of one paragraph, 20% API names."""
    rng = random.Random(seed + 1)
    api = sorted(inventory(docs))
    out: list[tuple[str, str]] = []
    while len(out) < n:
        kind = ("word", "two words", "API name")[min(2, len(out) * 5 // n // 2)]
        if kind == "API name":
            out.append((kind, rng.choice(api)))
            continue
        words = [w for w in WORD.findall(rng.choice(pool.paragraphs)) if _plain(w)]
        if len(words) >= 2:
            picked = rng.sample(words, 1 if kind == "word" else 2)
            out.append((kind, " ".join(picked)))
    rng.shuffle(out)
    return out


def _plain(word: str) -> bool:
    return len(word) >= 3 and word.isalpha() and word.lower() not in STOP


def fts5_query(query: str) -> str:
    """`query` in FTS5's syntax, meaning what Seine reads it as: words OR'ed, a dotted
    name's parts AND'ed, a part such as ``exec_module`` a phrase of its words."""
    clauses = []
    for token in query.split():
        parts = [" ".join(WORD.findall(part)) for part in token.split(".")]
        quoted = [f'"{part}"' for part in parts if part]
        if len(quoted) > 1:
            clauses.append("(" + " AND ".join(quoted) + ")")
        elif quoted:
            clauses.append(quoted[0])
    return " OR ".join(clauses)


def disk_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


class Fts5:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute(f"CREATE VIRTUAL TABLE docs USING fts5({', '.join(COLUMNS)})")
        self.sql = (
            "SELECT url, title, snippet(docs, 4, '<b>', '</b>', ' … ', 24) FROM docs "
            f"WHERE docs MATCH ? ORDER BY bm25(docs, {WEIGHTS}) LIMIT 10"
        )

    def add(self, batch: list[tuple[str, dict[str, Any]]]) -> None:
        rows = [
            (d["url"], d["title"], "\n".join(d["headings"]), d["description"], d["text"])
            for _id, d in batch
        ]
        self.db.execute("BEGIN")
        self.db.executemany("INSERT INTO docs VALUES (?, ?, ?, ?, ?)", rows)
        self.db.execute("COMMIT")

    def finish(self) -> None:
        self.db.execute("INSERT INTO docs(docs) VALUES ('optimize')")
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def search(self, query: str) -> list[Any]:
        return self.db.execute(self.sql, (fts5_query(query),)).fetchall()


def build(pool: Pool, args: argparse.Namespace, work: Path) -> tuple[dict[str, float], Fts5]:
    """Both indexes, batch by batch; the seconds each took."""
    seine = FullTextIndex(work / "seine" / INDEX_DIR, writable=True)
    fts = Fts5(work / "fts5.sqlite")
    took = {"seine": 0.0, "fts5": 0.0}
    batch: list[tuple[str, dict[str, Any]]] = []

    def flush() -> None:
        started = time.perf_counter()
        for doc_id, doc in batch:
            seine.apply(doc_id, doc)
        seine.commit()
        took["seine"] += time.perf_counter() - started
        started = time.perf_counter()
        fts.add(batch)
        took["fts5"] += time.perf_counter() - started
        batch.clear()

    for item in documents(pool, args.docs, args.seed):
        batch.append(item)
        if len(batch) >= args.batch:
            flush()
    flush()
    started = time.perf_counter()
    seine.close()  # commits and waits for the segment merges
    took["seine"] += time.perf_counter() - started
    started = time.perf_counter()
    fts.finish()
    took["fts5"] += time.perf_counter() - started
    return took, fts


@dataclass
class Timed:
    kind: str
    #: wall and CPU (this process) milliseconds
    ms: float
    cpu_ms: float
    hits: int


def timed(search: Callable[[str], Any], kind: str, query: str) -> Timed:
    wall, cpu = time.perf_counter(), time.process_time()
    found = search(query)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return Timed(kind, 1000 * wall, 1000 * cpu, len(found))


def run_queries(
    engines: dict[str, Callable[[str], Any]], asked: list[tuple[str, str]]
) -> dict[str, list[Timed]]:
    """Every query timed per engine, the engines alternating which goes first."""
    names = list(engines)
    for _kind, query in asked[:WARMUP]:
        for name in names:
            engines[name](query)
    out: dict[str, list[Timed]] = {name: [] for name in names}
    for i, (kind, query) in enumerate(asked):
        for name in names if i % 2 == 0 else names[::-1]:
            out[name].append(timed(engines[name], kind, query))
    return out


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000, method="inclusive")[round(q * 10) - 1]


def report(
    timings: dict[str, list[Timed]], took: dict[str, float], sizes: dict[str, int], load: float
) -> None:
    n_queries = len(timings["seine"])
    print(f"{n_queries} queries, 10 hits each with snippets; load average {load:.1f} meanwhile")
    head = f"{'engine':<7} {'build s':>8} {'disk MB':>8} {'p50 ms':>7} {'p95':>7} {'p99':>7}"
    print(head + f" {'max':>7} {'p99 CPU':>8} {'no hit':>7}")
    p99 = {}
    for name, rows in timings.items():
        ms = [row.ms for row in rows]
        p99[name] = percentile(ms, 99)
        print(
            f"{name:<7} {took[name]:>8.1f} {sizes[name] / 1e6:>8.1f} "
            f"{percentile(ms, 50):>7.2f} {percentile(ms, 95):>7.2f} {p99[name]:>7.2f} "
            f"{max(ms):>7.1f} {percentile([row.cpu_ms for row in rows], 99):>8.2f} "
            f"{sum(1 for row in rows if row.hits == 0):>7}"
        )
    print(f"p99 fts5 / seine: {p99['fts5'] / p99['seine']:.2f}x")
    for kind in dict.fromkeys(row.kind for row in timings["seine"]):
        cells = []
        for name, rows in timings.items():
            ms = [row.ms for row in rows if row.kind == kind]
            cells.append(f"{name} p50 {percentile(ms, 50):.2f} p99 {percentile(ms, 99):.2f}")
        print(f"  {kind:<10} " + ", ".join(cells))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="the Python docs' HTML")
    p.add_argument("--docs", type=int, default=100_000, help="documents indexed")
    p.add_argument("--queries", type=int, default=1000, help="queries timed")
    p.add_argument("--batch", type=int, default=10_000, help="documents per commit")
    p.add_argument("--seed", type=int, default=SEED)
    args = p.parse_args(argv)
    if not (args.dir / "objects.inv").is_file():
        print(f"search_latency: no objects.inv in {args.dir} (apt-get install python3.11-doc)")
        return 2
    pool = read_pool(args.dir)
    asked = queries(pool, args.dir, args.queries, args.seed)
    with tempfile.TemporaryDirectory(prefix="seine-sl-") as tmp:
        work = Path(tmp)
        took, fts = build(pool, args, work)
        sizes = {"seine": disk_bytes(work / "seine"), "fts5": disk_bytes(fts.path)}
        print(f"{args.docs} documents from {len(pool.paragraphs)} paragraphs of {args.dir}")
        crawl = CrawlSearch(work / "seine")
        engines = {"seine": lambda q: crawl.search(q, 10), "fts5": fts.search}
        load = os.getloadavg()[0]
        timings = run_queries(engines, asked)
        load = (load + os.getloadavg()[0]) / 2
        fts.db.close()
    report(timings, took, sizes, load)
    return 0


if __name__ == "__main__":
    sys.exit(main())
