"""Searching a whole crawl: every worker's index under a data dir, merged by score.

Each worker indexes the documents of the partitions it holds. A partition that
moved between workers can leave an older copy of a document in the index it left;
the merge keeps one hit per document id, the most recently fetched.
"""

from __future__ import annotations

from pathlib import Path

from streams.index.fulltext import FullTextIndex, Hit

__all__ = ["INDEX_DIR", "CrawlSearch", "index_paths", "merge_hits"]

#: A worker's index, under its data dir.
INDEX_DIR = "search"


def index_paths(data_dir: str | Path) -> list[Path]:
    """The indexes under a data dir: its own, and one per worker of `--workers N`."""
    data = Path(data_dir)
    paths = [data / INDEX_DIR, *sorted(data.glob(f"worker-*/{INDEX_DIR}"))]
    return [path for path in paths if (path / "meta.json").is_file()]


def merge_hits(hit_lists: list[list[Hit]], limit: int) -> list[Hit]:
    """Several indexes' hits as one list: one hit per document id (the most recently
    fetched copy), best score first, at most `limit`."""
    best: dict[str, Hit] = {}
    for hits in hit_lists:
        for hit in hits:
            kept = best.get(hit.id)
            if kept is None or hit.fetched_at > kept.fetched_at:
                best[hit.id] = hit
    return sorted(best.values(), key=lambda hit: -hit.score)[:limit]


class CrawlSearch:
    """Every index of a crawl, opened read-only once (a batch of queries shares them)."""

    def __init__(self, data_dir: str | Path) -> None:
        paths = index_paths(data_dir)
        if not paths:
            raise FileNotFoundError(f"no search index under {data_dir} (was --no-index set?)")
        self.indexes = [FullTextIndex(path) for path in paths]

    def reload(self) -> None:
        for index in self.indexes:
            index.index.reload()

    def num_docs(self) -> int:
        return sum(index.num_docs() for index in self.indexes)

    def search(self, query: str, limit: int = 10) -> list[Hit]:
        """The best `limit` hits of every index, one per document id, by score."""
        return merge_hits([index.search(query, limit) for index in self.indexes], limit)
