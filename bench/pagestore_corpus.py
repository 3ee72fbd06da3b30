"""What bench/pagestore.py writes and compares against: deterministic ~8 KB HTML pages,
and the SQLite table that is the baseline."""

from __future__ import annotations

import itertools
import random
import sqlite3
from collections.abc import Sequence
from pathlib import Path

HOSTS = 10_000  # pages spread over this many hosts, like a crawl's partition of the web


# --------------------------------------------------------------------------- page corpus


def _vocabulary(rng: random.Random, n: int) -> list[str]:
    """Pseudo-words of 2-4 syllables: enough variety that gzip finds few long repeats."""
    syllables = [c + v for c in "bcdfghklmnprstvz" for v in ("a", "e", "i", "o", "u", "ou", "ai")]
    words: set[str] = set()
    while len(words) < n:
        words.add("".join(rng.choices(syllables, k=rng.choice((1, 2, 2, 3, 3, 4)))))
    return sorted(words)


class Corpus:
    """Deterministic ~8 KB HTML pages: ``page(i)`` is the same bytes in every run.

    A pool of paragraphs (Zipf-weighted words, so common words repeat as in real text)
    is built once; a page samples ~13 of them, plus its own title, date, counter and
    links, inside a ~1.5 KB site template.  Each record is compressed on its own (one
    gzip member per record), so pages sharing pool paragraphs does not flatter the ratio.
    """

    def __init__(self, seed: int = 8, paragraphs: int = 4096) -> None:
        rng = random.Random(seed)
        vocab = _vocabulary(rng, 12_000)
        weights = list(itertools.accumulate(1.0 / (r + 1) for r in range(len(vocab))))
        self.vocab = vocab
        self.pool: list[str] = []
        for _ in range(paragraphs):
            words = rng.choices(vocab, cum_weights=weights, k=rng.randint(60, 130))
            words[0] = words[0].capitalize()
            sentence_ends = sorted(rng.sample(range(5, len(words) - 1), k=len(words) // 14))
            for j in sentence_ends:
                words[j] += "."
                words[j + 1] = words[j + 1].capitalize()
            self.pool.append(
                '<div class="article-body__block"><p class="article-body__text">'
                + " ".join(words)
                + ".</p></div>\n"
            )
        self.head = (
            '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            '<link rel="stylesheet" href="/static/site.css?v=20250611">\n'
            '<script async src="/static/analytics.js"></script>\n'
        )
        nav = "".join(
            f'<li><a href="/{w}/">{w.capitalize()}</a></li>' for w in rng.sample(vocab[:400], 9)
        )
        self.nav = f'<header class="site"><nav><ul class="menu">{nav}</ul></nav></header>\n'
        self.foot = (
            '<footer class="site"><p>&copy; 2025 Example Media. All rights reserved. '
            '<a href="/legal/privacy">Privacy</a> &middot; <a href="/legal/terms">Terms</a> '
            '&middot; <a href="/contact">Contact</a></p></footer>\n</body>\n</html>\n'
        )

    @staticmethod
    def url(i: int) -> str:
        h = (i * 2_654_435_761) % HOSTS  # scatter consecutive pages over hosts
        return f"http://www{h % 3 or ''}.site{h}.example/articles/{i // HOSTS}/page-{i}.html"

    def page(self, i: int) -> tuple[str, list[tuple[str, str]], bytes]:
        """(url, headers, body) of page ``i``."""
        rng = random.Random(i)
        vocab = self.vocab
        title = " ".join(rng.choices(vocab, k=rng.randint(3, 8))).capitalize()
        day = 1 + i % 28
        date = f"2025-06-{day:02d}"
        parts = [
            self.head,
            f"<title>{title} | Site {i % HOSTS}</title>\n</head>\n<body>\n",
            self.nav,
            f'<main><article><h1>{title}</h1>\n<p class="meta">Published {date} '
            f"&middot; {rng.randint(1, 99_999)} views &middot; comment #{i}</p>\n",
        ]
        size = sum(map(len, parts)) + len(self.foot)
        target = rng.randint(6_500, 9_500)
        links = []
        for _ in range(rng.randint(20, 40)):
            j = rng.randrange(i + 1_000)
            anchor = " ".join(rng.choices(vocab, k=rng.randint(1, 4)))
            links.append(
                f'<li class="related-list__item"><a class="related-list__link" '
                f'href="{self.url(j)}">{anchor}</a></li>'
            )
        aside = (
            '<aside class="related"><ul class="related-list">' + "".join(links) + "</ul></aside>\n"
        )
        size += len(aside) + 20
        for p in rng.sample(self.pool, 30):
            if size >= target:
                break
            parts.append(p)
            size += len(p)
        parts += ["</article></main>\n", aside, self.foot]
        body = "".join(parts).encode()
        headers = [
            ("Date", f"Wed, {day:02d} Jun 2025 10:{i % 60:02d}:{i % 59:02d} GMT"),
            ("Server", "nginx/1.24.0"),
            ("Content-Type", "text/html; charset=utf-8"),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "max-age=600"),
            ("ETag", f'"{i:x}-{len(body):x}"'),
        ]
        return self.url(i), headers, body


# --------------------------------------------------------------------------- stores


class SqliteStore:
    """The baseline: one table, URL primary key, body BLOB, WAL, one transaction a batch."""

    def __init__(self, path: Path, *, create: bool = True) -> None:
        self.path = path
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        if create:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.execute("CREATE TABLE pages (url TEXT PRIMARY KEY, body BLOB)")

    def put_many(self, rows: Sequence[tuple[str, bytes]]) -> None:
        self.db.execute("BEGIN")
        self.db.executemany("INSERT OR REPLACE INTO pages (url, body) VALUES (?, ?)", rows)
        self.db.execute("COMMIT")

    def get(self, url: str) -> bytes | None:
        row = self.db.execute("SELECT body FROM pages WHERE url = ?", (url,)).fetchone()
        return None if row is None else bytes(row[0])

    def close(self) -> None:
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # everything in the main file
        self.db.close()

    def files(self) -> list[Path]:
        return [p for p in self.path.parent.glob(self.path.name + "*") if p.is_file()]
