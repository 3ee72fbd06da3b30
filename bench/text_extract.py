"""Benchmark: main-text extraction and language detection for the documents a search
index consumes, on real pages no one here wrote (the Python docs of Debian's
python3.11-doc, by default):

    apt-get install python3.11-doc      # /usr/share/doc/python3.11/html, ~500 pages
    .venv/bin/python bench/text_extract.py
    .venv/bin/python bench/text_extract.py --dir SOME/HTML/TREE --limit 200

Each extractor reads every page's bytes and returns its text, timed per page (CPU, in
this process; the same pages in the same order for each, after one warm-up page):

* ``resiliparse``: resiliparse's HTML-to-text with main-content extraction (boilerplate,
  navigation and footers removed);
* ``resiliparse-all``: the same without main-content extraction (every visible text);
* ``trafilatura``: trafilatura's ``extract`` (main content, tables kept);
* ``selectolax``: the body's text as Seine's parse stage reads it today (the peer that
  removes nothing).

What each keeps is judged on two things an index of API docs must find:

* **identifiers**: the names the page defines (``<dt id="json.dumps">``: the last
  dotted component, ``dumps``), the share of them present in the text;
* **code**: the words of ``<pre>`` blocks (identifier-like tokens of 3+ characters),
  the share present in the text;

and the text's size beside the raw body's. Language detection (``resiliparse``'s
``detect_fast``, and ``pycld2`` when installed) is timed over each extractor's text.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from selectolax.lexbor import LexborHTMLParser

DEFAULT_DIR = Path("/usr/share/doc/python3.11/html")
TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")

Extractor = Callable[[bytes], str]


def _resiliparse(main_content: bool) -> Extractor:
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.encoding import detect_encoding
    from resiliparse.parse.html import HTMLTree

    def extract(body: bytes) -> str:
        tree = HTMLTree.parse_from_bytes(body, detect_encoding(body) or "utf-8")
        return str(extract_plain_text(tree, main_content=main_content, preserve_formatting=True))

    return extract


def _trafilatura(body: bytes) -> str:
    import trafilatura

    return trafilatura.extract(body.decode("utf-8", "replace"), include_tables=True) or ""


def _selectolax(body: bytes) -> str:
    tree = LexborHTMLParser(body)
    return tree.body.text(separator=" ") if tree.body is not None else ""


def extractors(names: list[str]) -> dict[str, Extractor]:
    table: dict[str, Callable[[], Extractor]] = {
        "resiliparse": lambda: _resiliparse(True),
        "resiliparse-all": lambda: _resiliparse(False),
        "trafilatura": lambda: _trafilatura,
        "selectolax": lambda: _selectolax,
    }
    found: dict[str, Extractor] = {}
    for name in names:
        try:
            found[name] = table[name]()
            found[name](b"<html><body><p>warm up</p></body></html>")
        except ImportError as exc:
            print(f"text_extract: {name} skipped ({exc})", file=sys.stderr)
    return found


def expectations(body: bytes) -> tuple[set[str], set[str]]:
    """The identifiers a page defines and the words of its code blocks."""
    tree = LexborHTMLParser(body)
    ids = [node.attributes.get("id") or "" for node in tree.css("dt[id]")]
    defined = {name for name in (i.rsplit(".", 1)[-1] for i in ids) if TOKEN.fullmatch(name)}
    code = {token for pre in tree.css("pre") for token in TOKEN.findall(pre.text())}
    return defined, code


def kept(words: set[str], text: str) -> tuple[int, int]:
    present = set(TOKEN.findall(text))
    return len(words & present), len(words)


def detectors() -> dict[str, Callable[[str], str]]:
    found: dict[str, Callable[[str], str]] = {}
    try:
        from resiliparse.parse.lang import detect_fast

        found["resiliparse detect_fast"] = lambda text: str(detect_fast(text)[0])
    except ImportError:
        pass
    try:
        import pycld2

        found["pycld2"] = lambda text: str(pycld2.detect(text)[2][0][1])
    except ImportError:
        pass
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="a tree of .html files")
    p.add_argument("--limit", type=int, default=0, help="at most this many pages (0: all)")
    p.add_argument(
        "--extractors",
        default="resiliparse,resiliparse-all,trafilatura,selectolax",
        help="comma-separated, of: resiliparse, resiliparse-all, trafilatura, selectolax",
    )
    args = p.parse_args(argv)
    paths = sorted(args.dir.rglob("*.html"))
    if args.limit:
        paths = paths[: args.limit]
    if not paths:
        print(f"text_extract: no .html under {args.dir}", file=sys.stderr)
        return 2
    bodies = [path.read_bytes() for path in paths]
    expected = [expectations(body) for body in bodies]
    raw = sum(len(body) for body in bodies)
    print(f"{len(bodies)} pages under {args.dir}, {raw / 1e6:.1f} MB of HTML")
    print(
        f"{'extractor':<16} {'ms/page p50':>11} {'p90':>7} {'total s':>8} "
        f"{'text/raw':>8} {'identifiers':>12} {'code words':>11}"
    )
    texts: dict[str, list[str]] = {}
    for name, extract in extractors(args.extractors.split(",")).items():
        times, out = [], []
        for body in bodies:
            start = time.process_time()
            out.append(extract(body))
            times.append(time.process_time() - start)
        texts[name] = out
        ids = [kept(d, t) for (d, _), t in zip(expected, out, strict=True)]
        code = [kept(c, t) for (_, c), t in zip(expected, out, strict=True)]
        id_share = sum(k for k, _ in ids) / max(1, sum(n for _, n in ids))
        code_share = sum(k for k, _ in code) / max(1, sum(n for _, n in code))
        size = sum(len(t.encode()) for t in out) / raw
        q = statistics.quantiles(times, n=10)
        print(
            f"{name:<16} {statistics.median(times) * 1e3:>11.2f} {q[-1] * 1e3:>7.2f} "
            f"{sum(times):>8.2f} {size:>8.1%} {id_share:>12.1%} {code_share:>11.1%}"
        )
    for detector, detect in detectors().items():
        for name, out in texts.items():
            start = time.process_time()
            langs = [detect(text[:20000]) for text in out if text.strip()]
            spent = time.process_time() - start
            top = max(set(langs), key=langs.count) if langs else "-"
            share = langs.count(top) / max(1, len(langs))
            print(
                f"{detector} on {name}: {spent / max(1, len(langs)) * 1e3:.3f} ms/page, "
                f"{top} for {share:.1%} of {len(langs)} pages"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
