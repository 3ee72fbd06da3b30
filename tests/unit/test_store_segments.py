"""Segment names are unique across writers, not only within one store.

Segments of many workers end up side by side (one data dir, one bucket, one CDXJ whose
``filename`` must name one file), so two processes that rotate segments in the same
second, with the same sequence numbers and even the same writer id, must never pick
the same name. The store opens a new segment with O_EXCL, so a collision would raise
FileExistsError (or, without it, silently overwrite another writer's records).
"""

from __future__ import annotations

import gzip
import multiprocessing
import os
import random
from pathlib import Path
from typing import Any

import pytest

from streams.store import gzipmembers, pagestore
from streams.store.pagestore import PageStore
from streams.store.segments import SEGMENT_RE, writer_tag
from tests.unit.store_helpers import HTML, records, segments

PAGES = 120


def _write(root: str, shared: str, writer_id: str | None, start: object) -> None:
    """Write PAGES pages into a store whose segments directory is the shared one."""
    store_dir = Path(root)
    store_dir.mkdir(parents=True)
    os.symlink(shared, store_dir / "segments")
    start.wait(30)  # type: ignore[attr-defined]
    with PageStore(store_dir, segment_max_bytes=2048, writer_id=writer_id) as store:
        for i in range(PAGES):
            body = f"<html><body>{root} page {i} ".encode() + os.urandom(600).hex().encode()
            store.put(f"http://w.example/{i}", status=200, headers=[], body=body)


def _run_pair(tmp_path: Path, writer_ids: tuple[str | None, str | None]) -> list[Path]:
    shared = tmp_path / "shared-segments"
    shared.mkdir()
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    procs = [
        ctx.Process(target=_write, args=(str(tmp_path / f"store{i}"), str(shared), wid, start))
        for i, wid in enumerate(writer_ids)
    ]
    for p in procs:
        p.start()
    start.set()  # both rotate through their segments over the same seconds
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    return sorted(shared.iterdir())


def test_two_processes_one_directory_never_collide(tmp_path: Path) -> None:
    segs = _run_pair(tmp_path, ("worker0", "worker1"))
    assert len(segs) >= 2 * PAGES // 3  # each record nearly fills a 2 KB segment
    # Every page of both writers is readable through its own index: nothing overwritten.
    for i in range(2):
        with PageStore(tmp_path / f"store{i}", read_only=True) as store:
            for n in range(PAGES):
                capture = store.get(f"http://w.example/{n}")
                assert capture is not None
                assert capture.body.startswith(f"<html><body>{tmp_path / f'store{i}'} ".encode())


def test_same_writer_id_same_second_still_unique(tmp_path: Path) -> None:
    """The random part alone keeps names apart (e.g. two workers given one id)."""
    segs = _run_pair(tmp_path, ("same", "same"))
    names = [p.name for p in segs]
    assert len(names) == len(set(names))
    for name in names:
        m = SEGMENT_RE.match(name)
        assert m is not None and m.group(3) == "same" and len(m.group(4)) == 8


def test_writer_tag() -> None:
    assert writer_tag("worker-3") == "worker_3"
    assert writer_tag("a/b\\..c") == "a_b_..c"
    default = writer_tag(None)
    assert default.endswith(f"_{os.getpid()}") and writer_tag("  ") == default
    # Older names (no writer, no random part) still parse, so a reopened store numbers on.
    m = SEGMENT_RE.match("seine-20240101000000-00007.warc.gz")
    assert m is not None and m.group(2) == "00007"


@pytest.fixture
def store(tmp_path: Path):
    with PageStore(tmp_path / "ps") as s:
        yield s


# ----------------------------------------------------- rotation and reopening


def test_rotation(tmp_path: Path) -> None:
    rnd = random.Random(3)
    bodies = {f"http://r.example/{i}": rnd.randbytes(700) for i in range(30)}
    with PageStore(tmp_path / "ps", segment_max_bytes=4096) as s:
        for u, b in bodies.items():
            s.put(u, status=200, headers=[], body=b)
        for u, b in bodies.items():
            assert s.get(u).body == b  # type: ignore[union-attr]
    segs = segments(tmp_path / "ps")
    assert len(segs) >= 4
    seqs = [int(SEGMENT_RE.match(p.name).group(2)) for p in segs]  # type: ignore[union-attr]
    assert seqs == list(range(1, len(segs) + 1))
    for seg in segs[:-1]:
        # Rotation happens once a record pushes the segment past the limit.
        assert seg.stat().st_size >= 4096
    for seg in segs:
        recs = records(seg)
        assert recs[0][1].rec_type == "warcinfo" and recs[0][0] == 0
        assert all(r.rec_type == "response" for _, r, _ in recs[1:])
    with PageStore(tmp_path / "ps", read_only=True) as ro:
        for u, b in bodies.items():
            assert ro.get(u).body == b  # type: ignore[union-attr]


def test_offset_length_address_one_gzip_member(store: PageStore) -> None:
    c = store.put("http://m.example/", status=200, headers=HTML, body=b"member")
    raw = (store.path / "segments" / c.segment).read_bytes()[c.offset : c.offset + c.length]
    text = gzip.decompress(raw)
    assert text.startswith(b"WARC/1.1\r\n") and text.endswith(b"member\r\n\r\n")


def test_reopen_sees_everything_and_starts_new_segment(tmp_path: Path) -> None:
    root = tmp_path / "ps"
    with PageStore(root) as s:
        s.put("http://a.example/", status=200, headers=HTML, body=b"A", fetched_at=1.0)
    (first,) = segments(root)
    size = first.stat().st_size
    with PageStore(root) as s:
        assert s.get("http://a.example/").body == b"A"  # type: ignore[union-attr]
        s.put("http://a.example/", status=200, headers=HTML, body=b"A2", fetched_at=2.0)
        s.put("http://b.example/", status=200, headers=HTML, body=b"B")
    assert first.stat().st_size == size  # never appended to
    assert len(segments(root)) == 2
    with PageStore(root) as s:
        assert list(s.urls()) == ["http://a.example/", "http://b.example/"]
        assert [c.body for c in s.captures("http://a.example/")] == [b"A", b"A2"]
        assert s.get("http://b.example/").body == b"B"  # type: ignore[union-attr]
    assert len(segments(root)) == 2  # opening without writing creates no segment


def test_failed_write_abandons_segment(store: PageStore, monkeypatch) -> None:
    """A record torn by an I/O error is never followed by more records in its segment."""
    store.put("http://ok.example/", status=200, headers=[], body=b"ok")
    real_flush = gzipmembers.GzipMembers.flush

    def failing_flush(self: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(gzipmembers.GzipMembers, "flush", failing_flush)
    with pytest.raises(OSError, match="disk full"):
        store.put_many(
            [{"url": "http://torn.example/", "status": 200, "headers": [], "body": b"x" * 9999}]
        )
    monkeypatch.setattr(gzipmembers.GzipMembers, "flush", real_flush)
    assert "http://torn.example/" not in store
    store.put("http://after.example/", status=200, headers=[], body=b"after")
    first, second = segments(store.path)
    assert store.get("http://ok.example/").segment == first.name  # type: ignore[union-attr]
    assert store.get("http://after.example/").segment == second.name  # type: ignore[union-attr]
    assert store.get("http://ok.example/").body == b"ok"  # type: ignore[union-attr]
    assert [r.rec_type for _, r, _ in records(second)] == ["warcinfo", "response"]


def test_many_segments_exceed_read_handle_cache(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(pagestore, "_READ_HANDLES", 2)
    with PageStore(tmp_path / "ps", segment_max_bytes=1) as s:
        for i in range(6):
            s.put(f"http://l.example/{i}", status=200, headers=[], body=b"%d" % i)
        assert len(segments(tmp_path / "ps")) == 6
        for _ in range(2):
            for i in range(6):
                assert s.get(f"http://l.example/{i}").body == b"%d" % i  # type: ignore[union-attr]
        assert len(s._reads._fds) == 2
