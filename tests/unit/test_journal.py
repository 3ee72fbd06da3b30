"""The crawl log and dead letters kept beside the pages (streams/store/journal.py)."""

from __future__ import annotations

from pathlib import Path

from streams.store.journal import CRAWL_LOG_FILE, Journal, journal_files, read_journal


def test_records_written_by_workers_are_read_back_together(tmp_path: Path) -> None:
    one = Journal(tmp_path / "worker-0" / CRAWL_LOG_FILE)
    two = Journal(tmp_path / "worker-1" / CRAWL_LOG_FILE)
    one.write({"url": "http://a.test/", "outcome": "fetched", "key": b"\xff"})
    two.write({"url": "http://b.test/", "outcome": "http-error"})
    one.flush()
    two.close()
    assert [r["url"] for r in read_journal(tmp_path)] == ["http://a.test/", "http://b.test/"]
    assert len(journal_files(tmp_path, CRAWL_LOG_FILE)) == 2
    one.close()


def test_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / CRAWL_LOG_FILE
    journal = Journal(path)
    journal.write({"url": "http://a.test/"})
    journal.close()
    with path.open("a") as f:
        f.write('{"url": "http://b.te')  # a worker killed mid-write
    assert [r["url"] for r in read_journal(tmp_path)] == ["http://a.test/"]


def test_no_journal_is_no_records(tmp_path: Path) -> None:
    assert list(read_journal(tmp_path)) == []
    assert journal_files(tmp_path, CRAWL_LOG_FILE) == []
