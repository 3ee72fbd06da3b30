"""Several workers' page stores read as one (streams/store/storeset.py)."""

from __future__ import annotations

import io
import json
from pathlib import Path

from streams.store.pagestore import PageStore
from streams.store.storeset import open_stores

HTML = [("Content-Type", "text/html")]


def put(root: Path, url: str, body: bytes, fetched_at: float) -> None:
    with PageStore(root) as store:
        store.put(url, status=200, headers=HTML, body=body, fetched_at=fetched_at)


def exported(data: Path) -> list[dict[str, str]]:
    with open_stores(data) as stores:
        buffer = io.StringIO()
        count = stores.export_cdxj(buffer)
    lines = buffer.getvalue().splitlines()
    assert count == len(lines) and lines == sorted(lines)
    return [json.loads(line.split(" ", 2)[2]) for line in lines]


def test_a_capture_two_workers_wrote_is_one_capture(tmp_path: Path) -> None:
    """After a kill, the partition's next owner may write a capture the dead worker had
    written already (its revisit record never reached the changelog): the same fetch,
    in two stores. Read as one, it is one capture; other captures stay apart."""
    url = "http://a.example/p"
    put(tmp_path / "worker-0" / "pages", url, b"<p>x", 1_700_000_000.25)
    put(tmp_path / "worker-1" / "pages", url, b"<p>x", 1_700_000_000.25)  # the same fetch
    put(tmp_path / "worker-1" / "pages", url, b"<p>y", 1_700_000_100.0)  # a later one
    put(tmp_path / "worker-1" / "pages", "http://a.example/q", b"<p>x", 1_700_000_000.25)
    records = exported(tmp_path)
    urls = [r["url"] for r in records]
    assert sorted(urls) == [url, url, "http://a.example/q"]
    assert len({r["digest"] for r in records if r["url"] == url}) == 2  # x once, and y
    with open_stores(tmp_path) as stores:
        assert stores.get(url) is not None and stores.get(url).body == b"<p>y"  # type: ignore[union-attr]


def test_an_exact_copy_is_marked_with_its_original(tmp_path: Path) -> None:
    """`seine pages` lists duplicates (revisit records of another URL) apart from pages,
    and a later refetch of a page unchanged (a revisit of itself) stays a page."""
    root = tmp_path / "worker-0" / "pages"
    with PageStore(root) as store:
        first = store.put("http://a.test/", status=200, headers=HTML, body=b"x", fetched_at=1.0)
        for copy, at in (("http://a.test/?ref=y", 2.0), ("http://a.test/", 3.0)):
            store.put_revisit(
                copy,
                original_url=first.url,
                original_digest=first.digest,
                original_date=first.fetched_at,
                status=200,
                headers=HTML,
                fetched_at=at,
            )
    put(tmp_path / "worker-1" / "pages", "http://b.test/", b"y", 4.0)
    with open_stores(tmp_path) as stores:
        assert stores.url_kinds() == [
            ("http://a.test/", None),
            ("http://a.test/?ref=y", "http://a.test/"),
            ("http://b.test/", None),
        ]
