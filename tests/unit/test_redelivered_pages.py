"""A page brought to link-extract twice (at-least-once across a kill or a rebalance)
keeps one response record per URL (streams/stages/link_extract.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from warcio.archiveiterator import ArchiveIterator

from streams.core.freshness import RevisitPolicy, RevisitSchedule
from streams.core.handoff import HandoffCache
from streams.core.records import CapturedPage
from streams.stages import link_extract
from streams.stages.dedup import payload_digest
from streams.stages.link_extract import SAME_CAPTURE, _stored_before
from streams.store.pagestore import PageStore

URL = "http://a.example/page"


def page(body: bytes, fetched_at: float, status: int = 200) -> CapturedPage:
    return {"url": URL, "headers": [], "body": body, "fetched_at": fetched_at, "status": status}


def schedule() -> RevisitSchedule:
    return RevisitSchedule({}, RevisitPolicy(), lambda url: 0, clock=lambda: 1000.0)


def stored(revisits: RevisitSchedule, p: CapturedPage, capture: tuple[str, float] | None) -> None:
    revisits.fetched(URL, fingerprint="fp", headers=[], depth=0, stored=capture)


def first_capture(
    body: bytes, fetched_at: float
) -> tuple[RevisitSchedule, CapturedPage, tuple[str, float] | None]:
    """A URL's first capture, stored: the schedule, the page and the capture."""
    revisits = schedule()
    first = page(body, fetched_at)
    capture, _ = _stored_before(revisits, first)
    stored(revisits, first, capture)
    return revisits, first, capture


def test_first_capture_is_stored_whole() -> None:
    revisits = schedule()
    capture, again = _stored_before(revisits, page(b"<p>x", 1.0))
    assert again is None and capture == (payload_digest(b"<p>x"), 1.0)


def test_the_same_capture_read_again_is_not_stored_again() -> None:
    revisits, _first, capture = first_capture(b"<p>x", 1.0)
    capture_again, again = _stored_before(revisits, page(b"<p>x", 1.0))
    assert again is SAME_CAPTURE and capture_again == capture


def test_a_refetch_of_the_same_bytes_is_a_revisit_of_the_stored_capture() -> None:
    revisits, first, capture = first_capture(b"<p>x", 1.0)
    kept, again = _stored_before(revisits, page(b"<p>x", 5.0))
    assert again == {"url": URL, "digest": payload_digest(b"<p>x"), "fetched_at": 1.0}
    assert kept == capture  # the record keeps naming the full capture
    stored(revisits, first, kept)
    _, still = _stored_before(revisits, page(b"<p>x", 9.0))
    assert still is not None and still is not SAME_CAPTURE and still["fetched_at"] == 1.0


def test_an_older_fetch_of_the_stored_bytes_read_again_late_is_not_stored() -> None:
    """After a kill on Apache Kafka the hand-off refetch (at 9.0) was stored before
    the rebalances let the fetch result of the lost capture (at 1.0) be read again:
    a revisit record of that older fetch was a second record of the page."""
    revisits, _refetch, capture = first_capture(b"<p>x", 9.0)
    kept, again = _stored_before(revisits, page(b"<p>x", 1.0))
    assert again is SAME_CAPTURE and kept == capture
    # other bytes fetched before are a capture of their own
    assert _stored_before(revisits, page(b"<p>y", 1.0))[1] is None


def test_changed_bytes_and_errors_are_stored_whole() -> None:
    revisits, _first, _capture = first_capture(b"<p>x", 1.0)
    assert _stored_before(revisits, page(b"<p>y", 5.0))[1] is None
    assert _stored_before(revisits, page(b"<p>x", 5.0, status=500)) == (None, None)


def test_two_captures_in_one_batch() -> None:
    revisits = schedule()
    first = _stored_before(revisits, page(b"<p>x", 1.0))[0]
    _, again = _stored_before(revisits, page(b"<p>x", 5.0), in_batch=first)
    assert again is not None and again is not SAME_CAPTURE and again["fetched_at"] == 1.0


def test_link_extract_stores_the_digest_it_took(tmp_path: Path) -> None:
    """link-extract hands the payload digest it took (to find a stored capture) to the
    page store, which no longer hashes the body again: the records it writes still
    verify under warcio's digest check, and the index and revisit record agree."""
    store = PageStore(str(tmp_path / "pages"))
    revisits = schedule()
    ctx = SimpleNamespace(
        limits=SimpleNamespace(max_url_bytes=8192),
        settings=SimpleNamespace(
            crawl=SimpleNamespace(near_dup_extract_links=False, max_outlinks=1000)
        ),
        counters=SimpleNamespace(pages_stored=0, documents=0, deletions=0),
        url_partition=lambda url: 0,
        handoff=HandoffCache(0),
    )
    out = SimpleNamespace(
        add=lambda *args: None, add_record=lambda *args: None, log=lambda record: None
    )
    bodies = [b"<p>x", b"<p>" + bytes(range(256)) * 40, b""]
    batch = {
        "pages": [
            {
                "page": {
                    "url": f"http://a.example/{i}",
                    "status": 200,
                    "headers": [{"name": "Content-Type", "value": "text/html"}],
                    "body": body,
                    "fetched_at": 1.0 + i,
                    "ip": "127.0.0.1",
                    "truncated": False,
                    "depth": 0,
                },
                "fingerprint": f"fp{i}",
                "links": ["/next"],
                "base": None,
                "nofollow": False,
                "duplicate_of": None,
                "near_duplicate_of": None,
            }
            for i, body in enumerate(bodies)
        ]
    }
    link_extract.handle(ctx, batch, store, out, revisits)  # type: ignore[arg-type]
    store.close()
    digests = {}
    for segment in sorted((tmp_path / "pages").rglob("*.warc.gz")):
        with segment.open("rb") as f:
            for record in ArchiveIterator(f, check_digests="raise"):
                if record.rec_type == "response":
                    uri = record.rec_headers.get_header("WARC-Target-URI")
                    digests[uri] = record.rec_headers.get_header("WARC-Payload-Digest")
                    record.content_stream().read()
    assert digests == {f"http://a.example/{i}": payload_digest(b) for i, b in enumerate(bodies)}
    for i, body in enumerate(bodies):
        assert (revisits.record(f"http://a.example/{i}") or {})["digest"] == payload_digest(body)


def test_a_duplicate_read_again_keeps_one_revisit_record(tmp_path: Path) -> None:
    """An exact duplicate is stored as a revisit record of its original; the same
    message read again (its offset was not committed at a kill) writes no second
    record of that fetch, while a later fetch of the same URL still gets its own."""
    store = PageStore(str(tmp_path / "pages"))
    ctx = SimpleNamespace(
        limits=SimpleNamespace(max_url_bytes=8192),
        settings=SimpleNamespace(
            crawl=SimpleNamespace(near_dup_extract_links=False, max_outlinks=1000)
        ),
        counters=SimpleNamespace(pages_stored=0, documents=0, deletions=0),
        url_partition=lambda url: 0,
        handoff=HandoffCache(0),
    )
    out = SimpleNamespace(
        add=lambda *args: None, add_record=lambda *args: None, log=lambda record: None
    )

    def duplicate(fetched_at: float) -> dict:
        return {
            "pages": [
                {
                    "page": {
                        "url": URL + "?ref=x",
                        "status": 200,
                        "headers": [{"name": "Content-Type", "value": "text/html"}],
                        "body": None,
                        "fetched_at": fetched_at,
                        "ip": "127.0.0.1",
                        "truncated": False,
                        "depth": 1,
                    },
                    "fingerprint": "fp",
                    "digest": payload_digest(b"<p>x"),
                    "size": 4,
                    "links": [],
                    "base": None,
                    "nofollow": False,
                    "duplicate_of": {
                        "url": URL,
                        "digest": payload_digest(b"<p>x"),
                        "fetched_at": 1.0,
                    },
                    "near_duplicate_of": None,
                }
            ]
        }

    for batch in (duplicate(2.0), duplicate(2.0), duplicate(7.0)):
        link_extract.handle(ctx, batch, store, out, schedule())  # type: ignore[arg-type]
    store.close()
    revisits = []
    for segment in sorted((tmp_path / "pages").rglob("*.warc.gz")):
        with segment.open("rb") as f:
            for record in ArchiveIterator(f):
                if record.rec_type == "revisit":
                    revisits.append(record.rec_headers.get_header("WARC-Date"))
    assert len(revisits) == 2, revisits


def test_a_capture_read_again_after_its_revisit_record_was_lost_is_not_stored_again(
    tmp_path: Path,
) -> None:
    """A worker SIGKILLed after storing a page, before the page's revisit record reached
    its changelog: restarted, it reads the page's message again (its offset was not
    committed) with no record of it. The page store itself says this capture is there,
    so it keeps one response record, and the revisit record is written again."""
    store = PageStore(str(tmp_path / "pages"))
    ctx = SimpleNamespace(
        limits=SimpleNamespace(max_url_bytes=8192),
        settings=SimpleNamespace(
            crawl=SimpleNamespace(near_dup_extract_links=False, max_outlinks=1000)
        ),
        counters=SimpleNamespace(pages_stored=0, documents=0, deletions=0),
        url_partition=lambda url: 0,
        handoff=HandoffCache(0),
    )
    out = SimpleNamespace(
        add=lambda *args: None, add_record=lambda *args: None, log=lambda record: None
    )

    def batch(fetched_at: float) -> dict:
        return {
            "pages": [
                {
                    "page": {
                        "url": URL,
                        "status": 200,
                        "headers": [{"name": "Content-Type", "value": "text/html"}],
                        "body": b"<p>x",
                        "fetched_at": fetched_at,
                        "ip": "127.0.0.1",
                        "truncated": False,
                        "depth": 0,
                    },
                    "fingerprint": "fp",
                    "links": [],
                    "base": None,
                    "nofollow": False,
                    "duplicate_of": None,
                    "near_duplicate_of": None,
                }
            ]
        }

    link_extract.handle(ctx, batch(1.0), store, out, schedule())  # type: ignore[arg-type]
    after_restart = schedule()  # the tables as recovered: no record of that store
    link_extract.handle(ctx, batch(1.0), store, out, after_restart)  # type: ignore[arg-type]
    assert (after_restart.record(URL) or {}).get("captured") == 1.0
    link_extract.handle(ctx, batch(5.0), store, out, schedule())  # type: ignore[arg-type]
    store.close()
    kinds = []
    for segment in sorted((tmp_path / "pages").rglob("*.warc.gz")):
        with segment.open("rb") as f:
            kinds += [r.rec_type for r in ArchiveIterator(f) if r.rec_type != "warcinfo"]
    # one response for the capture read twice; a later fetch is stored on its own
    assert kinds.count("response") == 2, kinds
    assert ctx.counters.pages_stored == 2
