"""Segment names are unique across writers, not only within one store.

Segments of many workers end up side by side (one data dir, one bucket, one CDXJ whose
``filename`` must name one file), so two processes that rotate segments in the same
second, with the same sequence numbers and even the same writer id, must never pick
the same name. The store opens a new segment with O_EXCL, so a collision would raise
FileExistsError (or, without it, silently overwrite another writer's records).
"""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

from streams.core import pagestore as ps
from streams.core.pagestore import PageStore

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
        m = ps._SEGMENT_RE.match(name)
        assert m is not None and m.group(3) == "same" and len(m.group(4)) == 8


def test_writer_tag() -> None:
    assert ps._writer_tag("worker-3") == "worker_3"
    assert ps._writer_tag("a/b\\..c") == "a_b_..c"
    default = ps._writer_tag(None)
    assert default.endswith(f"_{os.getpid()}") and ps._writer_tag("  ") == default
    # Older names (no writer, no random part) still parse, so a reopened store numbers on.
    m = ps._SEGMENT_RE.match("seine-20240101000000-00007.warc.gz")
    assert m is not None and m.group(2) == "00007"
