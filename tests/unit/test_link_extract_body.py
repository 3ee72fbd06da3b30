"""link-extract takes a page's body from the hand-off cache, or, when the message is
read again after its page was stored (a kill or a rebalance before the offset
commit), from the page store that holds it, its own or the previous owner's: the page
is not fetched and stored a second time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from streams.core.handoff import HandoffCache
from streams.stages.link_extract import _take_body
from streams.store.pagestore import PageStore
from streams.store.storeset import SiblingStores
from streams.store.warc import payload_digest

URL = "http://a.example/page.html"
BODY = b"<html><body><a href='/next'>next</a></body></html>"
FETCHED_AT = 1_795_000_000.0


def page(fetched_at: float = FETCHED_AT) -> Any:
    return {"url": URL, "fetched_at": fetched_at}


def test_the_body_comes_from_the_hand_off_cache_first(tmp_path: Path) -> None:
    cache, digest = HandoffCache(1 << 20), payload_digest(BODY)
    cache.put(URL, digest, BODY)
    with PageStore(tmp_path / "pages") as store:
        assert _take_body(cache, store, page(), digest) == (BODY, False)


def test_a_stored_capture_gives_its_body_back(tmp_path: Path) -> None:
    cache, digest = HandoffCache(1 << 20), payload_digest(BODY)
    with PageStore(tmp_path / "pages") as store:
        assert _take_body(cache, store, page(), digest) == (None, False)  # refetch
        store.put(URL, status=200, headers=[], body=BODY, fetched_at=FETCHED_AT)
        assert _take_body(cache, store, page(), digest) == (BODY, True)
        # a capture from before this fetch is another capture: fetch this one again
        assert _take_body(cache, store, page(FETCHED_AT + 60), digest) == (None, False)


def test_a_capture_the_previous_owner_stored_gives_its_body_back(tmp_path: Path) -> None:
    """The partition moved: the killed worker stored the page in its own store."""
    cache, digest = HandoffCache(1 << 20), payload_digest(BODY)
    with PageStore(tmp_path / "worker-1" / "pages") as store:
        siblings = SiblingStores(store.path, max_age=0.0)
        assert _take_body(cache, store, page(), digest, siblings) == (None, False)
        with PageStore(tmp_path / "worker-0" / "pages") as previous:
            previous.put(URL, status=200, headers=[], body=BODY, fetched_at=FETCHED_AT)
        assert _take_body(cache, store, page(), digest, siblings) == (BODY, True)
        assert _take_body(cache, store, page(FETCHED_AT + 60), digest, siblings) == (None, False)
        siblings.close()
