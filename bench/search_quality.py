"""Benchmark: does `seine search` find an API name's page at rank 1 at least as often
as plain BM25 over the raw files? On real pages no one here wrote, the Python docs of
Debian's python3.11-doc:

    apt-get install python3.11-doc      # /usr/share/doc/python3.11/html, ~530 pages
    .venv/bin/python bench/search_quality.py
    .venv/bin/python bench/search_quality.py --queries 150 --show-misses 20

What it does:

* **The crawl**: the docs are served on loopback by the standard library's HTTP
  server and crawled by ``seine crawl URL --until-idle --allow-private --same-host
  --data-dir DIR`` (embedded broker, indexing on: the default). ``--same-host``
  only keeps the crawl from waiting on the docs' links to other sites, which do
  not resolve here; it changes nothing of what is indexed.
* **The queries**: a seeded sample of the Python-domain names of the docs' Sphinx
  inventory (``objects.inv``: functions, methods, classes, modules, exceptions,
  attributes, data), keeping names defined on one page only, and that page crawled.
  The right answer is that page (its URL without the ``#fragment``).
* **Seine**: one ``seine search --queries FILE --json --limit 10`` process answers
  them all; its whole run (start, opening the index, every query, snippets
  included) divided by the queries is the time per query.
* **The peer**: every ``.html`` file's text (lxml, scripts and styles dropped: no
  main-content extraction), one Tantivy field with the default tokenizer, no
  boosts; a query is its words, OR'ed: textbook BM25, the same scoring family as
  Seine's, so the difference is what Seine's documents and query parsing add.
  Requiring every word gives the peer the same figures; Tantivy's own parsing of a
  dotted name (a phrase) gives it far fewer.

Both are scored the same way: rank-1 hits, MRR@10 (1/rank of the right page within
the first 10, else 0) and hits within the first 10.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import lxml.html  # noqa: E402
import tantivy  # noqa: E402

DEFAULT_DIR = Path("/usr/share/doc/python3.11/html")
SEED = 20261128
#: One inventory line: name, domain:role, priority, uri, display name.
_INVENTORY_LINE = re.compile(r"(.+?)\s+(\S+?):(\S+)\s+(-?\d+)\s+(\S*)\s+(.*)")
#: Words as Tantivy's default tokenizer cuts them (runs of letters and digits).
WORD = re.compile(r"[^\W_]+")


def inventory(docs: Path) -> dict[str, str]:
    """Python-domain name → the page defining it (relative to `docs`), for the names
    defined on one page only."""
    raw = (docs / "objects.inv").read_bytes().split(b"\n", 4)
    pages: dict[str, set[str]] = defaultdict(set)
    for line in zlib.decompress(raw[4]).decode("utf-8").splitlines():
        found = _INVENTORY_LINE.fullmatch(line)
        if found and found.group(2) == "py":
            pages[found.group(1)].add(found.group(5).split("#", 1)[0])
    return {name: next(iter(where)) for name, where in pages.items() if len(where) == 1}


def api_queries(docs: Path, crawled: set[str], n: int, seed: int = SEED) -> list[tuple[str, str]]:
    """A seeded sample of `n` (name, page) pairs whose page is in `crawled`."""
    names = inventory(docs)
    eligible = sorted(name for name, page in names.items() if page in crawled)
    picked = random.Random(seed).sample(eligible, min(n, len(eligible)))
    return [(name, names[name]) for name in picked]


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return


@contextlib.contextmanager
def serve(docs: Path) -> Iterator[str]:
    """The files of `docs` over HTTP on loopback; yields the base URL (ends in /)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_QuietHandler, directory=str(docs)))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def crawl(seed_url: str, data_dir: Path, log: Path, timeout: float) -> float:
    """`seine crawl` with its embedded broker until idle; returns its wall seconds."""
    cmd = [sys.executable, "-m", "streams.cli", "crawl", seed_url, "--until-idle"]
    cmd += ["--allow-private", "--same-host", "--data-dir", str(data_dir)]
    started = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT
        )
        try:
            code: int | None = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            code = None
            proc.terminate()  # seine stops its broker on SIGTERM
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    if code != 0:
        why = f"passed {timeout:.0f} s" if code is None else f"exited {code}"
        tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
        raise SystemExit(f"search_quality: the crawl {why}:\n" + "\n".join(tail))
    return time.monotonic() - started


def crawled_pages(data_dir: Path, base: str) -> set[str]:
    """The pages in the crawl's indexes, relative to `base`."""
    from streams.index.search import CrawlSearch

    pages: set[str] = set()
    for index in CrawlSearch(data_dir).indexes:
        index.index.reload()
        searcher = index.index.searcher()
        found = searcher.search(tantivy.Query.all_query(), max(1, searcher.num_docs)).hits
        for _score, address in found:
            url = str(searcher.doc(address).get_first("url") or "")
            if url.startswith(base):
                pages.add(url[len(base) :])
    return pages


def seine_search(
    data_dir: Path, queries: list[str], work: Path
) -> tuple[dict[str, list[str]], float]:
    """Every query through one `seine search --json` process: the URLs of each
    query's hits in rank order, and the process's wall seconds."""
    queries_file = work / "queries.txt"
    queries_file.write_text("".join(q + "\n" for q in queries), encoding="utf-8")
    cmd = [sys.executable, "-m", "streams.cli", "search", "--queries", str(queries_file)]
    cmd += ["--json", "--limit", "10", "--data-dir", str(data_dir)]
    started = time.monotonic()
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL, cwd=ROOT
    )
    seconds = time.monotonic() - started
    if done.returncode not in (0, 1):  # 1: no query had a hit
        raise RuntimeError(f"seine search exited {done.returncode}: {done.stderr[-2000:]}")
    ranked: dict[str, list[str]] = defaultdict(list)
    for line in done.stdout.splitlines():
        hit = json.loads(line)
        ranked[hit["query"]].append(hit["url"])
    return ranked, seconds


def raw_text(body: bytes) -> str:
    """A page's text, tags stripped: every text node but scripts' and styles'."""
    tree = lxml.html.fromstring(body)
    for node in tree.xpath("//script|//style"):
        node.drop_tree()
    return str(tree.text_content())


class Peer:
    """Plain BM25 over the raw files: one default-tokenized field, no boosts."""

    def __init__(self, docs: Path) -> None:
        builder = tantivy.SchemaBuilder()
        builder.add_text_field("path", stored=True, tokenizer_name="raw")
        builder.add_text_field("text")
        self.index = tantivy.Index(builder.build())
        started = time.monotonic()
        writer = self.index.writer(heap_size=64 * 1024 * 1024, num_threads=1)
        self.files = 0
        for path in sorted(docs.rglob("*.html")):
            doc = tantivy.Document()
            doc.add_text("path", path.relative_to(docs).as_posix())
            doc.add_text("text", raw_text(path.read_bytes()))
            writer.add_document(doc)
            self.files += 1
        writer.commit()
        writer.wait_merging_threads()
        self.index.reload()
        self.build_seconds = time.monotonic() - started

    def search(self, query: str, limit: int = 10) -> list[str]:
        words = WORD.findall(query)
        if not words:
            return []
        parsed = self.index.parse_query(" ".join(words), ["text"])
        searcher = self.index.searcher()
        hits = searcher.search(parsed, limit).hits
        return [str(searcher.doc(address).get_first("path")) for _score, address in hits]


@dataclass
class Score:
    queries: int
    rank1: int
    top10: int
    mrr: float
    #: (query, expected, what came first) of every query not right at rank 1
    misses: list[tuple[str, str, str]]


def score(ranked: dict[str, list[str]], expected: list[tuple[str, str]]) -> Score:
    """Rank-1 hits, hits in the first 10 and MRR@10 of `ranked` (query → answers in
    rank order, comparable with the expected pages)."""
    rank1 = top10 = 0
    reciprocal = 0.0
    misses = []
    for query, page in expected:
        got = ranked.get(query, [])[:10]
        if page in got:
            top10 += 1
            reciprocal += 1.0 / (got.index(page) + 1)
        if got[:1] == [page]:
            rank1 += 1
        else:
            misses.append((query, page, got[0] if got else "-"))
    return Score(len(expected), rank1, top10, reciprocal / max(1, len(expected)), misses)


def relative(ranked: dict[str, list[str]], base: str) -> dict[str, list[str]]:
    return {
        q: [u[len(base) :] if u.startswith(base) else u for u in us] for q, us in ranked.items()
    }


@dataclass
class Comparison:
    seine: Score
    peer: Score
    #: seconds: the whole `seine search` process, the peer's searches, its build
    seine_s: float
    peer_s: float
    peer_build_s: float
    peer_files: int


def compare(
    docs: Path, data_dir: Path, base: str, n: int, work: Path, seed: int = SEED
) -> Comparison:
    """Seine and the peer on `n` API-name queries, over a finished crawl of `docs`
    served at `base`."""
    expected = api_queries(docs, crawled_pages(data_dir, base), n, seed)
    queries = [name for name, _page in expected]
    seine_ranked, seine_s = seine_search(data_dir, queries, work)
    peer = Peer(docs)
    started = time.monotonic()
    peer_ranked = {q: peer.search(q) for q in queries}
    peer_s = time.monotonic() - started
    return Comparison(
        score(relative(seine_ranked, base), expected),
        score(peer_ranked, expected),
        seine_s,
        peer_s,
        peer.build_seconds,
        peer.files,
    )


def report(found: Comparison) -> None:
    seine, peer = found.seine, found.peer
    n = max(1, seine.queries)
    print(f"{seine.queries} API-name queries; the peer indexed {found.peer_files} .html files")
    print(f"{'engine':<36} {'rank-1':>11} {'MRR@10':>7} {'top-10':>7} {'ms/query':>9}")
    rows = [
        ("seine search (one process)", seine, found.seine_s),
        ("plain BM25, raw files (in-process)", peer, found.peer_s),
    ]
    for label, got, seconds in rows:
        print(
            f"{label:<36} {got.rank1:>4} {got.rank1 / n:>6.1%} {got.mrr:>7.3f} "
            f"{got.top10:>7} {1000 * seconds / n:>9.2f}"
        )
    ratio = seine.rank1 / peer.rank1 if peer.rank1 else float("inf")
    print(f"seine / peer: rank-1 {ratio:.2f}x, MRR {seine.mrr / max(peer.mrr, 1e-9):.2f}x")
    print(
        f"(seine's ms/query: its whole process over the queries; "
        f"the peer's index built in {found.peer_build_s:.1f} s)"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="Sphinx HTML with objects.inv")
    p.add_argument("--queries", type=int, default=300, help="API names sampled")
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds the crawl may take")
    p.add_argument("--show-misses", type=int, default=0, help="print this many of Seine's misses")
    p.add_argument(
        "--keep", type=Path, help="crawl into this dir and keep it (default: a temp dir)"
    )
    args = p.parse_args(argv)
    if not (args.dir / "objects.inv").is_file():
        print(f"search_quality: no objects.inv in {args.dir} (apt-get install python3.11-doc)")
        return 2
    with tempfile.TemporaryDirectory(prefix="seine-sq-") as tmp:
        work = Path(tmp)
        data_dir = args.keep or work / "data"
        with serve(args.dir) as base:
            crawl_s = crawl(base + "index.html", data_dir, work / "crawl.log", args.timeout)
            print(f"crawled {base}index.html in {crawl_s:.1f} s into {data_dir}")
            found = compare(args.dir, data_dir, base, args.queries, work, args.seed)
    report(found)
    for query, page, first in found.seine.misses[: args.show_misses]:
        print(f"  miss {query!r}: want {page}, first {first}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
