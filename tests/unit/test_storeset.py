"""Several workers' page stores read as one (streams/store/storeset.py)."""

from __future__ import annotations

import io
import json
from pathlib import Path

from streams.store.pagestore import PageStore
from streams.store.storeset import SiblingStores, held_anywhere, open_stores, stored_anywhere

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


def test_an_adopted_fetch_finds_its_page_in_the_previous_owners_store(tmp_path: Path) -> None:
    """A worker adopting a partition asks its own store, then the other workers' (the
    previous owner stored the page before the kill lost its completion); a store
    written after the last open is seen once the open is older than `max_age`."""
    url, at = "http://a.example/p", 1_700_000_000.5
    own_path = tmp_path / "worker-1" / "pages"
    with PageStore(own_path) as own:
        now = [0.0]
        siblings = SiblingStores(own_path, max_age=1.0, clock=lambda: now[0])
        stored_since = stored_anywhere(own, siblings)
        assert siblings.paths() == []  # no other store yet
        assert not stored_since(url, at)
        with PageStore(tmp_path / "worker-0" / "pages") as other:  # a live writer
            other.put(url, status=200, headers=HTML, body=b"<p>x", fetched_at=at + 0.2)
            assert not stored_since(url, at)  # opened (none) less than max_age ago
            now[0] = 1.5
            assert stored_since(url, at)
            assert not stored_since(url, at + 1.0)  # a capture older than the dispatch
        assert not stored_since("http://a.example/q", at)
        siblings.close()


def test_a_one_worker_store_has_no_siblings(tmp_path: Path) -> None:
    put(tmp_path / "worker-0" / "pages", "http://a.example/p", b"x", 1.0)
    assert SiblingStores(tmp_path / "pages").paths() == []


def test_a_dispatch_asks_the_stores_as_of_the_last_assignment(tmp_path: Path) -> None:
    """The frontier asks, of each page it dispatches, whether any store holds it: the
    other stores are opened once after each assignment, not again on age."""
    url = "http://a.example/p"
    own_path = tmp_path / "worker-1" / "pages"
    with PageStore(own_path) as own:
        siblings = SiblingStores(own_path, max_age=0.0)
        held = held_anywhere(own, siblings)
        assert not held(url)
        put(tmp_path / "worker-0" / "pages", url, b"<p>x", 5.0)
        assert not held(url)  # opened before that write, and kept
        siblings.expire()  # partitions assigned
        assert held(url)
        own.put("http://a.example/q", status=200, headers=HTML, body=b"q", fetched_at=6.0)
        assert held("http://a.example/q")
        siblings.close()
