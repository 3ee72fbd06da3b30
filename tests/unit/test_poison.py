"""streams.core.poison: what a stage refuses before handling a message."""

from __future__ import annotations

from streams import codec
from streams.core.poison import Limits, long_links, oversized, screen

LIMITS = Limits(max_message_bytes=1000, max_url_bytes=100)
LONG = "http://a.test/" + "x" * 200


def cand(url: str) -> dict:
    return {"url": url, "depth": 0, "priority": 0, "via": None}


def test_size_limit() -> None:
    assert oversized(1000, LIMITS) is None
    reason = oversized(1001, LIMITS)
    assert reason is not None and "1001 bytes" in reason and "1000-byte" in reason


def test_clean_batch_is_returned_as_it_is() -> None:
    record = {"urls": [cand("http://a.test/")]}
    kept, refusals = screen("url_batch", record, LIMITS)
    assert kept is record and refusals == []


def test_a_long_url_is_split_off_and_the_rest_kept() -> None:
    record = {"urls": [cand("http://a.test/1"), cand(LONG), cand("http://a.test/2")]}
    kept, refusals = screen("url_batch", record, LIMITS)
    assert kept == {"urls": [cand("http://a.test/1"), cand("http://a.test/2")]}
    assert len(refusals) == 1
    assert refusals[0].record == {"urls": [cand(LONG)]}
    assert refusals[0].reason.startswith("urls[1]: URL of 214 bytes is over the 100-byte limit")
    # the refused part is a valid record of the topic's schema
    codec.encode("url_batch", refusals[0].record)


def test_nothing_left_means_nothing_to_handle() -> None:
    kept, refusals = screen("url_batch", {"urls": [cand(LONG)]}, LIMITS)
    assert kept is None and len(refusals) == 1


def test_frontier_event_checks_new_urls_and_completions_and_keeps_a_tick() -> None:
    completion = {
        "url": "http://a.test/",
        "host": "h" * 300,
        "kind": "page",
        "status": 200,
        "outcome": "fetched",
        "elapsed_ms": 1.0,
        "finished_at": 1.0,
        "retry_after": None,
        "body": None,
    }
    record = {"new_urls": [cand(LONG)], "completions": [completion], "tick": True}
    kept, refusals = screen("frontier_event", record, LIMITS)
    assert kept == {"new_urls": [], "completions": [], "tick": True}
    assert [r.reason.split(":")[0] for r in refusals] == ["new_urls[0]", "completions[0]"]
    assert "host of 300 characters" in refusals[1].reason
    for refusal in refusals:
        assert refusal.record["tick"] is False
        codec.encode("frontier_event", refusal.record)


def test_parsed_pages_check_page_original_and_base_but_not_links() -> None:
    page = {
        "url": "http://a.test/",
        "status": 200,
        "headers": [],
        "body": b"",
        "fetched_at": 1.0,
        "elapsed_ms": 1.0,
        "ip": None,
        "depth": 0,
        "truncated": False,
    }
    parsed = {
        "page": page,
        "fingerprint": "f",
        "title": "",
        "links": [LONG],
        "base": None,
        "nofollow": False,
        "noindex": False,
        "duplicate_of": None,
    }
    kept, refusals = screen("parsed_batch", {"pages": [parsed]}, LIMITS)
    assert refusals == [] and kept is not None
    bad = {**parsed, "base": LONG}
    kept, refusals = screen("parsed_batch", {"pages": [parsed, bad]}, LIMITS)
    assert kept == {"pages": [parsed]} and "<base href>" in refusals[0].reason
    assert [link for link, _ in long_links(["http://a.test/", LONG], LIMITS)] == [LONG]


def test_schemas_without_items_pass() -> None:
    record = {"url": LONG, "priority": 0}
    assert screen("seed", record, LIMITS) == (record, [])


def test_the_quick_pass_and_the_exact_check_agree_at_the_limit() -> None:
    """The one-pass length check only vouches for URLs of at most limit/4 characters;
    anything longer is checked byte by byte, so multi-byte URLs are judged exactly."""
    four = "\U0001f600"  # 4 bytes in UTF-8
    at_limit = four * 25  # 100 bytes: allowed
    over = four * 26  # 104 bytes: refused
    three = "€" * 33  # 99 bytes, 33 characters (> 100 // 4): allowed after the exact check
    for urls, refused in (
        ([at_limit], []),
        ([over], [0]),
        ([three, "a" * 25], []),
        (["a" * 100], []),
        (["a" * 101, "a"], [0]),
        (["\ud800" * 34], [0]),  # lone surrogates: 3 bytes each with surrogatepass
    ):
        record = {"urls": [cand(u) for u in urls]}
        kept, refusals = screen("url_batch", record, LIMITS)
        assert [int(r.reason.split("[")[1].split("]")[0]) for r in refusals] == refused, urls
        if not refused:
            assert kept is record


def test_items_the_quick_pass_cannot_read_fall_back_to_the_exact_check() -> None:
    record = {"urls": [cand("http://a.test/"), {"depth": 1}, "not a dict", cand(LONG)]}
    kept, refusals = screen("url_batch", record, LIMITS)
    assert kept == {"urls": [cand("http://a.test/"), {"depth": 1}, "not a dict"]}
    assert [r.reason.split(":")[0] for r in refusals] == ["urls[3]"]
    # a long host with short URLs is still refused
    request = {"url": "http://a.test/", "host": "h" * 261, "kind": "page"}
    kept, refusals = screen("fetch_batch", {"requests": [request]}, LIMITS)
    assert kept is None and "host of 261 characters" in refusals[0].reason
    record = {"requests": [{**request, "host": "h" * 260}]}
    assert screen("fetch_batch", record, LIMITS) == (record, [])
