"""Unit tests for streams.core.shortcodes: codes, validation, mapping rules, expiry, limits."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import mmh3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.partitioning import partition_for
from streams.core.shortcodes import (
    ALPHABET,
    CODE_LENGTH,
    MAX_URL_LENGTH,
    CodeSpaceExhausted,
    LRUCache,
    RateLimiter,
    assign_code,
    code_candidates,
    home_partition,
    is_expired,
    is_valid_code,
    parse_expires_at,
    short_code,
    sweep_expired,
    sweepable,
    url_key,
    validate_long_url,
)
from streams.core.urls import canonical

NOW = 1_800_000_000.0
URLS = [f"https://host{i % 97}.example/page/{i}?q={i * 7}" for i in range(10_000)]


def reference_code(url: str, seed: int = 0) -> str:
    """The spec, written differently: murmur3 x64 (first 64 bits) mod 62**7, base62,
    most significant digit first, padded to 7 with '0'."""
    value = mmh3.hash64(url.encode(), seed, signed=False)[0] % 62**7
    out = ""
    while value:
        out = ALPHABET[value % 62] + out
        value //= 62
    return out.rjust(7, "0")


# -- codes ---------------------------------------------------------------------


def test_codes_are_seven_base62_characters() -> None:
    assert len(set(ALPHABET)) == len(ALPHABET) == 62
    assert set(ALPHABET) == set("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
    for url in URLS[:2000]:
        code = short_code(url)
        assert len(code) == CODE_LENGTH == 7
        assert set(code) <= set(ALPHABET)
        assert is_valid_code(code)


def test_codes_follow_the_spec_and_are_deterministic() -> None:
    for url in URLS[:500]:
        for seed in (0, 1, 2, 12345):
            assert short_code(url, seed) == reference_code(url, seed) == short_code(url, seed)
    # Pinned values: a change of hash, reduction or alphabet would re-code every link.
    assert short_code("https://example.com/b") == "67NZnFP"
    assert short_code("https://example.com/") == "AErTt0R"
    assert short_code("https://example.com/", 1) == "lb3XId9"


def test_seeds_give_other_codes_and_are_bounded() -> None:
    url = "https://example.com/"
    assert len({short_code(url, seed) for seed in range(1000)}) == 1000
    with pytest.raises(ValueError):
        short_code(url, -1)
    with pytest.raises(ValueError):
        short_code(url, 1 << 32)


def test_codes_are_not_sequential_or_guessable_from_each_other() -> None:
    codes = [short_code(url) for url in URLS]
    assert len(set(codes)) == len(codes)
    # Consecutive URLs (…/1, …/2) give unrelated codes: no shared leading characters
    # beyond chance (1/62 per position).
    shared = sum(a[0] == b[0] for a, b in itertools.pairwise(codes))
    assert shared < len(codes) * 3 / 62
    # Every character position is close to uniform over the alphabet.
    for position in range(CODE_LENGTH):
        counts = Counter(code[position] for code in codes)
        expected = len(codes) / 62
        chi2 = sum((counts.get(ch, 0) - expected) ** 2 / expected for ch in ALPHABET)
        assert chi2 < 120, (position, chi2)  # 61 degrees of freedom; p < 1e-5 beyond


def test_is_valid_code() -> None:
    assert is_valid_code("aZ09xYz")
    for bad in ("", "abc", "abcdefgh", "abc-def", "abc def", "abcdéfg", "../../x"):
        assert not is_valid_code(bad)


def test_url_key_is_fixed_size_hex() -> None:
    keys = {url_key(url) for url in URLS}
    assert len(keys) == len(URLS)
    assert all(len(k) == 32 and int(k, 16) >= 0 for k in keys)


@pytest.mark.parametrize("partitions", [1, 4, 16])
def test_candidates_stay_in_the_home_partition(partitions: int) -> None:
    url = "https://example.com/x"
    home = home_partition(url, partitions)
    assert home == partition_for(short_code(url, 0), partitions)
    candidates = []
    for seed, code in code_candidates(url, partitions):
        candidates.append((seed, code))
        if len(candidates) == 20:
            break
    assert candidates[0] == (0, short_code(url, 0))
    seeds = [seed for seed, _ in candidates]
    assert seeds == sorted(set(seeds))
    for seed, code in candidates:
        assert code == short_code(url, seed)
        assert partition_for(code, partitions) == home
    if partitions == 1:
        assert seeds == list(range(20))


# -- the mapping rules -----------------------------------------------------------


def test_assign_code_gives_one_code_per_url() -> None:
    codes: dict[str, Any] = {}
    urls: dict[str, Any] = {}
    first = assign_code(URLS[0], codes, urls, partitions=4, now=NOW)
    assert first[0] == short_code(URLS[0]) and first[2] is True
    assert first[1] == {
        "url": URLS[0],
        "created_at": NOW,
        "expires_at": None,
        "permanent": False,
        "seed": 0,
    }
    # Again, even asking for other properties: the existing link, unchanged.
    again = assign_code(URLS[0], codes, urls, partitions=4, now=NOW + 5, permanent=True)
    assert again == (first[0], first[1], False)
    other = assign_code(URLS[1], codes, urls, partitions=4, now=NOW)
    assert other[0] != first[0]
    assert codes.keys() == {first[0], other[0]}
    assert urls == {url_key(URLS[0]): first[0], url_key(URLS[1]): other[0]}


def colliding(url: str, seed: int) -> str:
    """A code function where every URL's seed-0 code is the same: forced collisions."""
    return "AAAAAAA" if seed == 0 else short_code(url, seed)


@pytest.mark.parametrize("partitions", [1, 4])
def test_a_collision_rehashes_with_the_next_seed(partitions: int) -> None:
    codes: dict[str, Any] = {}
    urls: dict[str, Any] = {}
    # Only URLs whose seed-0 home is the forced code's partition, as in real life
    # (a colliding code is in the partition of the URL that collides).
    a, b, c = "https://a.example/", "https://b.example/", "https://c.example/"

    def run(url: str) -> tuple[str, dict[str, Any], bool]:
        return assign_code(url, codes, urls, partitions=partitions, now=NOW, code_fn=colliding)

    code_a, link_a, _ = run(a)
    code_b, link_b, _ = run(b)
    code_c, _, _ = run(c)
    assert code_a == "AAAAAAA" and link_a["seed"] == 0
    assert code_b != code_a and link_b["seed"] > 0 and code_b == short_code(b, link_b["seed"])
    assert len({code_a, code_b, code_c}) == 3
    home = partition_for("AAAAAAA", partitions)
    assert {partition_for(code, partitions) for code in (code_a, code_b, code_c)} == {home}
    # The first URL kept its code; each URL finds its own again.
    assert codes[code_a]["url"] == a and codes[code_b]["url"] == b and codes[code_c]["url"] == c
    assert run(b) == (code_b, link_b, False)
    assert run(a)[0] == code_a


def test_uniqueness_comes_from_the_table() -> None:
    url = URLS[3]
    taken = short_code(url)
    codes: dict[str, Any] = {taken: {"url": "https://someone.else/", "expires_at": None}}
    urls: dict[str, Any] = {}
    code, link, created = assign_code(url, codes, urls, partitions=4, now=NOW)
    assert created and code != taken and link["seed"] > 0
    assert codes[taken] == {"url": "https://someone.else/", "expires_at": None}


def test_expired_link_is_renewed_under_the_same_code() -> None:
    codes: dict[str, Any] = {}
    urls: dict[str, Any] = {}
    code, _, _ = assign_code(URLS[0], codes, urls, partitions=4, now=NOW, expires_at=NOW + 10)
    assert assign_code(URLS[0], codes, urls, partitions=4, now=NOW + 9)[2] is False
    renewed = assign_code(URLS[0], codes, urls, partitions=4, now=NOW + 10, permanent=True)
    assert renewed[0] == code and renewed[2] is True
    assert renewed[1]["created_at"] == NOW + 10 and renewed[1]["expires_at"] is None
    assert renewed[1]["permanent"] is True


def test_a_swept_link_comes_back_with_its_code() -> None:
    codes: dict[str, Any] = {}
    urls: dict[str, Any] = {}
    code, _, _ = assign_code(URLS[0], codes, urls, partitions=4, now=NOW)
    del codes[code]  # the URL entry still points at it
    assert assign_code(URLS[0], codes, urls, partitions=4, now=NOW + 1)[:1] == (code,)
    assert codes[code]["created_at"] == NOW + 1


def test_exhausted_code_space_raises() -> None:
    codes: dict[str, Any] = {"AAAAAAA": {"url": "https://other/"}}
    with pytest.raises(CodeSpaceExhausted):
        assign_code("https://x/", codes, {}, partitions=1, now=NOW, code_fn=lambda u, s: "AAAAAAA")


def test_sweep_deletes_only_owned_links_past_their_grace() -> None:
    codes: dict[str, Any] = {}
    urls: dict[str, Any] = {}
    clicks: dict[str, Any] = {}
    made = {}
    for i, expires in enumerate([None, NOW + 10, NOW + 100, NOW + 10]):
        url = f"https://sweep{i}.example/"
        code, _, _ = assign_code(url, codes, urls, partitions=1, now=NOW, expires_at=expires)
        clicks[code] = i + 1
        made[url] = code
    keep = made["https://sweep3.example/"]  # expired, but another partition's
    swept = sweep_expired(
        codes, urls, clicks, owns=lambda code: code != keep, now=NOW + 10 + 60, grace=60
    )
    gone = made["https://sweep1.example/"]
    assert swept == [gone]
    assert gone not in codes and gone not in clicks
    assert url_key("https://sweep1.example/") not in urls
    assert len(codes) == 3 and len(urls) == 3 and len(clicks) == 3
    # Within the grace period an expired link stays (it answers 410, not 404).
    assert sweep_expired(codes, urls, None, owns=lambda c: True, now=NOW + 69, grace=60) == []


# -- validation -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        (None, "url must be a string"),
        (["https://x/"], "url must be a string"),
        ("", "url is empty"),
        ("  \t\n", "url is empty"),
        ("javascript:alert(1)", "javascript: URLs are not allowed"),
        ("JAVASCRIPT:alert(1)", "javascript: URLs are not allowed"),
        ("\x01 javascript:alert(1)", "javascript: URLs are not allowed"),
        ("java\tscr\nipt:alert(1)", "javascript: URLs are not allowed"),
        ("data:text/html;base64,PHNjcmlwdD4=", "data: URLs are not allowed"),
        ("vbscript:msgbox", "only http and https URLs are allowed, not vbscript:"),
        ("mailto:a@b.c", "only http and https URLs are allowed, not mailto:"),
        ("file:///etc/passwd", "only http and https URLs are allowed, not file:"),
        ("/path/only", "relative URL"),
        ("//example.com/", "relative URL"),
        ("?q=1", "relative URL"),
        ("example.com", "relative URL"),
        ("http://", "malformed URL"),
        ("https://exa mple.com/", "malformed URL"),
        ("http://[::1/", "malformed URL"),
        ("http://example.com:99999/", "malformed URL"),
        ("https://example.com/" + "a" * 2029, "longer than 2048 characters"),
        # Short as typed, too long once percent-encoded: refused as well.
        ("https://example.com/" + "é" * 1014, "longer than 2048 characters once canonicalized"),
    ],
)
def test_validation_reasons(url: object, reason: str) -> None:
    with pytest.raises(ValueError, match=None) as refused:
        validate_long_url(url)
    assert reason in str(refused.value)


def test_validation_returns_the_canonical_url() -> None:
    assert validate_long_url("HTTPS://Example.COM:443/a/./b/../c?x=1#frag") == (
        "https://example.com/a/c?x=1"
    )
    assert validate_long_url("  http://example.com  ") == "http://example.com/"
    longest = "https://example.com/" + "a" * 2028
    assert len(longest) == MAX_URL_LENGTH and validate_long_url(longest) == longest


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=80), st.text(max_size=40).map(lambda s: "http://" + s)))
def test_validation_never_accepts_what_it_should_not(text: str) -> None:
    try:
        url = validate_long_url(text)
    except ValueError as exc:
        assert str(exc)
        return
    assert url.startswith(("http://", "https://")) and len(url) <= MAX_URL_LENGTH
    assert canonical(url) == url


# -- expiry -----------------------------------------------------------------------


def test_parse_expires_at_accepts_unix_seconds_and_iso_8601() -> None:
    assert parse_expires_at(None, NOW) is None
    assert parse_expires_at(NOW + 60, NOW) == NOW + 60
    assert parse_expires_at(int(NOW) + 60, NOW) == NOW + 60
    assert parse_expires_at(str(NOW + 1.5), NOW) == NOW + 1.5
    when = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp()
    assert parse_expires_at("2030-01-02T03:04:05Z", NOW) == when
    assert parse_expires_at("2030-01-02T03:04:05", NOW) == when  # naive = UTC
    assert parse_expires_at("2030-01-02T05:04:05+02:00", NOW) == when


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (True, "not a boolean"),
        ([NOW + 60], "unix seconds or an ISO-8601 time"),
        ("tomorrow", "neither unix seconds nor an ISO-8601 time"),
        (math.nan, "finite"),
        (math.inf, "finite"),
        ("inf", "finite"),
        (NOW, "in the past"),
        (NOW - 1, "in the past"),
        ("1999-01-01T00:00:00Z", "in the past"),
        (1e15, "after the year 9999"),
    ],
)
def test_parse_expires_at_refuses(value: object, reason: str) -> None:
    with pytest.raises(ValueError) as refused:
        parse_expires_at(value, NOW)
    assert reason in str(refused.value)


def test_expiry_boundaries() -> None:
    assert not is_expired(None, NOW)
    assert not is_expired(NOW + 0.001, NOW)
    assert is_expired(NOW, NOW)  # expires *at* its time
    assert not sweepable(None, NOW, 0)
    assert not sweepable(NOW, NOW + 59, 60)
    assert sweepable(NOW, NOW + 60, 60)


# -- cache and rate limit -------------------------------------------------------------


def test_lru_cache_evicts_the_least_recently_used() -> None:
    cache: LRUCache[str, int] = LRUCache(3)
    for i, key in enumerate("abc"):
        cache.put(key, i)
    assert cache.get("a") == 0  # a is now the most recent
    cache.put("d", 3)  # evicts b
    assert "b" not in cache and cache.get("b") is None
    assert [cache.get(k) for k in "acd"] == [0, 2, 3]
    cache.put("a", 10)  # update in place, no eviction
    assert len(cache) == 3 and cache.get("a") == 10
    assert cache.pop("a") == 10 and cache.pop("a") is None
    assert (cache.hits, cache.misses) == (5, 1)
    cache.clear()
    assert len(cache) == 0
    with pytest.raises(ValueError):
        LRUCache(0)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_token_bucket_allows_a_burst_then_the_rate() -> None:
    clock = FakeClock()
    limiter = RateLimiter(rate=2.0, burst=5, clock=clock)
    assert [limiter.allow("a") for _ in range(7)] == [True] * 5 + [False] * 2
    assert limiter.retry_after("a") == pytest.approx(0.5)
    assert limiter.allow("b")  # per client
    clock.now += 0.5
    assert limiter.allow("a") and not limiter.allow("a")
    clock.now += 100  # refills to the burst, not beyond
    assert sum(limiter.allow("a") for _ in range(10)) == 5
    assert limiter.retry_after("unknown") == 0.0
    with pytest.raises(ValueError):
        RateLimiter(rate=0, burst=5)


def test_token_bucket_memory_is_bounded() -> None:
    clock = FakeClock()
    limiter = RateLimiter(rate=1.0, burst=2, clock=clock, max_clients=100)
    for i in range(1000):
        limiter.allow(f"10.0.{i // 256}.{i % 256}")
        assert len(limiter) <= 100
    # A client over its rate is remembered while others come and go: full buckets
    # (clients back under their rate) are the ones dropped.
    limiter = RateLimiter(rate=1.0, burst=2, clock=clock, max_clients=10)
    for i in range(50):
        clock.now += 0.6
        limiter.allow(f"visitor{i}")
        limiter.allow("greedy")
        limiter.allow("greedy")
        assert len(limiter) <= 10
    assert not limiter.allow("greedy")  # a fresh bucket would have said yes
