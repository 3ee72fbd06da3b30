"""The indexer stage (streams/stages/indexer.py): applies documents and tombstones by
key, commits in batches on its clock, refuses a record without a key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from streams.index.fulltext import FullTextIndex
from streams.stages.indexer import IndexerStage


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def stage(tmp_path: Path, clock: Clock) -> IndexerStage:
    return IndexerStage(FullTextIndex(tmp_path / "search", writable=True), 2.0, clock)


def document(url: str, text: str) -> dict[str, Any]:
    return {"url": url, "title": "", "text": text, "fetched_at": 1.0}


def test_commits_wait_for_the_interval(tmp_path: Path) -> None:
    clock = Clock()
    indexer = stage(tmp_path, clock)
    out: Any = None
    indexer.step(0, (b"http://a/1", document("http://a/1", "zebra")), out)
    assert indexer.index.pending == 1 and indexer.index.search("zebra") == []
    clock.now += 2.5
    indexer.step(0, (b"http://a/2", document("http://a/2", "zebra")), out)
    assert indexer.index.pending == 0
    assert len(indexer.index.search("zebra")) == 2


def test_the_timer_commits_what_waits_and_a_tombstone_deletes(tmp_path: Path) -> None:
    clock = Clock()
    indexer = stage(tmp_path, clock)
    indexer.step(0, (b"http://a/1", document("http://a/1", "zebra")), None)  # type: ignore[arg-type]
    assert indexer.commit_due() == 0  # not yet due
    clock.now += 3
    assert indexer.commit_due() == 1
    indexer.step(0, (b"http://a/1", None), None)  # type: ignore[arg-type]
    assert indexer.commit_due(force=True) == 1
    assert indexer.index.search("zebra") == []
    assert (indexer.applied, indexer.deleted) == (1, 1)


def test_close_commits_the_rest(tmp_path: Path) -> None:
    indexer = stage(tmp_path, Clock())
    indexer.step(0, (b"http://a/1", document("http://a/1", "zebra")), None)  # type: ignore[arg-type]
    indexer.close()
    assert [hit.url for hit in FullTextIndex(tmp_path / "search").search("zebra")] == ["http://a/1"]


def test_a_record_without_a_key_is_refused(tmp_path: Path) -> None:
    indexer = stage(tmp_path, Clock())
    with pytest.raises(ValueError, match="without a key"):
        indexer.step(0, (None, document("http://a/1", "zebra")), None)  # type: ignore[arg-type]
