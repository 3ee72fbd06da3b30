"""Unit tests for streams.core.robots beyond the conformance suites.

Covers what the suites don't: our own agent string, crawl-delay, sitemaps,
allow_all/disallow_all, robots_url, hostile input (garbage, huge files, long
lines) and the matcher's glob algorithm against a brute-force reference.
"""

from __future__ import annotations

import random
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.robots import RobotsRules, _Rule, agent_token, robots_url

UA = "SeineBot/0.1 (+https://example.invalid/bot)"


# -- agent matching ---------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "User-agent: SeineBot",
        "user-agent: seinebot",
        "USER-AGENT: SEINEBOT/2.0",
        "User-agent: SeineBot*",
    ],
)
def test_full_user_agent_matches_its_product_token(line: str) -> None:
    rules = RobotsRules.parse(f"User-agent: *\nAllow: /\n\n{line}\nDisallow: /private\n")
    assert not rules.allowed("https://example.com/private/x", UA)
    assert rules.allowed("https://example.com/public", UA)
    assert rules.allowed("https://example.com/private/x", "OtherBot/1.0")


@pytest.mark.parametrize("line", ["User-agent: Seine", "User-agent: SeineBotX", "User-agent: Bot"])
def test_other_tokens_do_not_match(line: str) -> None:
    rules = RobotsRules.parse(f"{line}\nDisallow: /\n")
    assert rules.allowed("https://example.com/", UA)


def test_specific_group_replaces_global_even_without_rules() -> None:
    rules = RobotsRules.parse("User-agent: *\nDisallow: /\n\nUser-agent: SeineBot\nAllow: /x\n")
    assert rules.allowed("/anything", UA)
    assert not rules.allowed("/anything", "OtherBot")


def test_groups_for_the_same_agent_are_merged() -> None:
    rules = RobotsRules.parse(
        "User-agent: SeineBot\nDisallow: /a\n\n"
        "User-agent: Other\nDisallow: /b\n\n"
        "User-agent: seinebot\nDisallow: /c\n"
    )
    assert not rules.allowed("/a", UA)
    assert rules.allowed("/b", UA)
    assert not rules.allowed("/c", UA)


def test_several_user_agent_lines_share_one_group() -> None:
    rules = RobotsRules.parse("User-agent: Other\nUser-agent: SeineBot\n\nDisallow: /x\n")
    assert not rules.allowed("/x", UA)
    assert not rules.allowed("/x", "Other")
    assert rules.allowed("/x", "Third")


def test_agent_token_extraction() -> None:
    assert agent_token("SeineBot/0.1 (+https://example.invalid/bot)") == "SeineBot"
    assert agent_token("Foo Bar") == "Foo"
    assert agent_token("foo_bar-baz9") == "foo_bar-baz"
    assert agent_token("*") == ""


# -- path matching ----------------------------------------------------------


def test_non_ascii_rule_matches_percent_encoded_url() -> None:
    rules = RobotsRules.parse("User-agent: *\nDisallow: /foo/ß\n")
    assert not rules.allowed("https://example.com/foo/%C3%9F", UA)
    assert not rules.allowed("https://example.com/foo/%c3%9f", UA)
    assert rules.allowed("https://example.com/foo/ss", UA)


def test_percent_escape_case_is_normalised_on_both_sides() -> None:
    rules = RobotsRules.parse("User-agent: *\nDisallow: /foo/%c3%9f\n")
    assert not rules.allowed("/foo/%C3%9F", UA)
    assert not rules.allowed("/foo/%c3%9F", UA)


def test_invalid_utf8_rule_matches_same_octets() -> None:
    rules = RobotsRules.parse(b"User-agent: *\nDisallow: /\xff\xfe\n")
    assert not rules.allowed("/%FF%FE/x", UA)
    assert rules.allowed("/%EF%BF%BD", UA)  # not turned into U+FFFD


def test_longest_match_wins_and_allow_wins_ties() -> None:
    rules = RobotsRules.parse(
        "User-agent: *\nDisallow: /a\nAllow: /a/b\nDisallow: /a/b/c\nAllow: /t\nDisallow: /t\n"
    )
    assert not rules.allowed("/a/x", UA)
    assert rules.allowed("/a/b/x", UA)
    assert not rules.allowed("/a/b/c", UA)
    assert rules.allowed("/t", UA)


def test_wildcard_and_end_anchor() -> None:
    rules = RobotsRules.parse("User-agent: *\nDisallow: /*.pdf$\nDisallow: /a$b\n")
    assert not rules.allowed("/docs/x.pdf", UA)
    assert rules.allowed("/docs/x.pdf?download=1", UA)
    assert not rules.allowed("/a$bc", UA)  # "$" inside a pattern is literal


def test_robots_txt_is_always_allowed() -> None:
    rules = RobotsRules.parse("User-agent: *\nDisallow: /\n")
    assert rules.allowed("https://example.com/robots.txt", UA)
    assert not rules.allowed("https://example.com/robots.txt.bak", UA)
    assert RobotsRules.disallow_all().allowed("/robots.txt", UA)


@pytest.mark.parametrize(
    "text",
    [
        "\ufeffUser-agent: *\nDisallow: /x\n",
        b"\xef\xbb\xbfUser-agent: *\r\nDisallow: /x\r\n",
        b"\xef\xbbUser-agent: *\rDisallow: /x",
    ],
)
def test_bom_and_line_endings(text: str | bytes) -> None:
    assert not RobotsRules.parse(text).allowed("/x", UA)


def test_missing_colon_and_typos_are_accepted() -> None:
    rules = RobotsRules.parse("user-agent SeineBot\ndisalow /x\ndisallow /y z\n")
    assert not rules.allowed("/x", UA)
    assert rules.allowed("/y", UA)  # three words without a colon: not a rule


def test_rules_before_any_user_agent_are_ignored() -> None:
    rules = RobotsRules.parse("Disallow: /\nUser-agent: *\nDisallow: /x\n")
    assert rules.allowed("/y", UA)
    assert not rules.allowed("/x", UA)


def _line_too_long(directive: str, prefix: str) -> str:
    """The path that fills a line "<directive><path>/qux" past the 16664-octet cap."""
    max_length = 2083 * 8 - len(prefix) - len(directive) + 1
    return prefix + "a" * (max_length - len(prefix))


def test_line_too_long_is_cut_not_dropped() -> None:
    # Google's GoogleOnly_LineTooLong (computed strings, so not in the JSON).
    longline = _line_too_long("disallow: ", "/x/")
    rules = RobotsRules.parse(f"user-agent: FooBot\ndisallow: {longline}/qux\n")
    assert rules.allowed("http://foo.bar/fux", "FooBot")
    assert not rules.allowed(f"http://foo.bar{longline}/fux", "FooBot")

    line_a = _line_too_long("allow: ", "/x/")
    line_b = "/x/" + "b" * (len(line_a) - 3)
    rules = RobotsRules.parse(
        f"user-agent: FooBot\ndisallow: /\nallow: {line_a}/qux\nallow: {line_b}/qux\n"
    )
    assert not rules.allowed("http://foo.bar/", "FooBot")
    assert rules.allowed(f"http://foo.bar{line_a}/qux", "FooBot")
    assert rules.allowed(f"http://foo.bar{line_b}/fux", "FooBot")


# -- crawl-delay -------------------------------------------------------------


def test_crawl_delay_for_our_agent_replaces_global() -> None:
    rules = RobotsRules.parse(
        "User-agent: *\nCrawl-delay: 10\n\nUser-agent: SeineBot\nCrawl-delay: 2.5\nDisallow: /x\n"
    )
    assert rules.crawl_delay(UA) == 2.5
    assert rules.crawl_delay("OtherBot") == 10.0


def test_crawl_delay_not_inherited_from_global() -> None:
    # Our group applies in full, so the "*" delay does not leak into it.
    rules = RobotsRules.parse("User-agent: *\nCrawl-delay: 10\n\nUser-agent: SeineBot\nDisallow:\n")
    assert rules.crawl_delay(UA) is None


def test_crawl_delay_absent_and_malformed() -> None:
    assert RobotsRules.parse("").crawl_delay(UA) is None
    rules = RobotsRules.parse(
        "User-agent: *\nCrawl-delay: soon\nCrawl-delay: -1\nCrawl-delay: nan\n"
        "Crawl-delay: inf\nCrawl-delay: 3\nCrawl-delay: 7\n"
    )
    assert rules.crawl_delay(UA) == 3.0  # first valid value wins


def test_crawl_delay_does_not_split_a_group_but_counts_for_agents_above_it() -> None:
    # As in the reference, only allow/disallow lines close a group, so
    # "Disallow: /" applies to both agents; the delay only to the one above it.
    rules = RobotsRules.parse("User-agent: a\nCrawl-delay: 4\nUser-agent: SeineBot\nDisallow: /\n")
    assert not rules.allowed("/", UA)
    assert not rules.allowed("/", "a")
    assert rules.crawl_delay("a") == 4.0
    assert rules.crawl_delay(UA) is None
    rules = RobotsRules.parse("User-agent: a\nUser-agent: SeineBot\nCrawl-delay: 4\n")
    assert rules.crawl_delay(UA) == rules.crawl_delay("a") == 4.0


def test_crawl_delay_before_any_user_agent_is_ignored() -> None:
    assert RobotsRules.parse("Crawl-delay: 5\nUser-agent: *\n").crawl_delay(UA) is None


# -- sitemaps ----------------------------------------------------------------


def test_sitemaps_collected_anywhere_in_order_deduplicated() -> None:
    rules = RobotsRules.parse(
        b"Sitemap: https://example.com/a.xml\n"
        b"User-agent: *\nDisallow: /x\n"
        b"SITEMAP:https://example.com/b.xml # comment\n"
        b"Site-map: https://example.com/a.xml\n"
        b"Sitemap:\n"
        b"Sitemap: https://example.com/\xff.xml\n"
    )
    assert rules.sitemaps == [
        "https://example.com/a.xml",
        "https://example.com/b.xml",
        "https://example.com/\ufffd.xml",
    ]
    rules.sitemaps.clear()  # a copy: the rules are not changed
    assert len(rules.sitemaps) == 3
    assert not rules.allowed("/x", UA)  # the sitemap line did not end the group


# -- allow_all / disallow_all ---------------------------------------------------


def test_allow_all() -> None:
    rules = RobotsRules.allow_all()
    assert rules.allowed("https://example.com/anything?q=1", UA)
    assert rules.crawl_delay(UA) is None
    assert rules.sitemaps == []


def test_disallow_all() -> None:
    rules = RobotsRules.disallow_all()
    assert not rules.allowed("https://example.com/", UA)
    assert not rules.allowed("/x", "AnyBot")
    assert rules.crawl_delay(UA) is None
    assert rules.sitemaps == []


def test_empty_robots_txt_allows_everything() -> None:
    assert RobotsRules.parse("").allowed("/x", UA)
    assert RobotsRules.parse(b"").allowed("/x", UA)


# -- hostile input ---------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        b"\x00\x01\x02\xff\xfe",
        "<html><body><h1>404 Not Found</h1></body></html>",
        "User-agent: *\nDisallow: /\ud800x\n",  # lone surrogate in a str
        ":::\n:\n#:\n\t\t\n" * 100,
        "User-agent:\nDisallow:\nAllow:\nUser-agent: *\n",
        "Disallow: " + "*" * 20_000,
    ],
)
def test_garbage_never_raises(text: str | bytes) -> None:
    rules = RobotsRules.parse(text)
    assert isinstance(rules.allowed("https://example.com/a", UA), bool)
    rules.crawl_delay(UA)
    assert isinstance(rules.sitemaps, list)


def test_non_str_input_never_raises() -> None:
    for junk in (None, 42, bytearray(b"User-agent: *\nDisallow: /x\n")):
        RobotsRules.parse(junk)  # type: ignore[arg-type]
    assert not RobotsRules.parse(bytearray(b"User-agent: *\nDisallow: /x\n")).allowed("/x", UA)  # type: ignore[arg-type]


def test_random_bytes_never_raise() -> None:
    rng = random.Random(9309)
    alphabet = b"User-agent:Disallow:Allow:Sitemap:Crawl-delay:*$#/% \t\r\n\xef\xbb\xbf\xff"
    for _ in range(300):
        data = bytes(rng.choice(alphabet) for _ in range(rng.randrange(200)))
        rules = RobotsRules.parse(data)
        rules.allowed("/" + data[:20].decode("latin-1"), UA)
        rules.crawl_delay(UA)


def _timed(data: bytes, url: str) -> float:
    """CPU seconds of this process: a guard against super-linear parsing or matching
    (which would take minutes), not a speed figure; wall time would also count the
    other processes of a loaded machine (5.5 s wall for 0.65 s of work was seen)."""
    start = time.process_time()
    rules = RobotsRules.parse(data)
    rules.allowed(url, UA)
    rules.crawl_delay(UA)
    return time.process_time() - start


@pytest.mark.parametrize(
    "kind",
    ["random", "one-line", "many-groups", "wildcard-rules"],
)
def test_one_megabyte_parses_quickly(kind: str) -> None:
    size = 1 << 20
    if kind == "random":
        data = random.Random(1).randbytes(size)
    elif kind == "one-line":
        data = b"Disallow: /" + b"*a" * (size // 2)
    elif kind == "many-groups":
        block = b"User-agent: bot\nDisallow: /private/*/x$\nCrawl-delay: 1\n"
        data = block * (size // len(block))
    else:
        block = b"User-agent: *\nDisallow: /*a*a*a*a*a*a*a*b\n"
        data = block * (size // len(block))
    assert len(data) >= size * 0.99
    assert _timed(data, "https://example.com/" + "a" * 2000) < 5.0


# -- the glob matcher against a brute-force reference -----------------------------


def _reference_matches(path: str, pattern: str) -> bool:
    """Google's position-set algorithm, straightforwardly: the spec of Matches()."""
    positions = {0}
    for i, ch in enumerate(pattern):
        if ch == "$" and i == len(pattern) - 1:
            return len(path) in positions
        if ch == "*":
            positions = set(range(min(positions), len(path) + 1))
        else:
            positions = {p + 1 for p in positions if p < len(path) and path[p] == ch}
            if not positions:
                return False
    return True


@settings(max_examples=400, deadline=None)
@given(
    path=st.text(alphabet="ab/$", max_size=12),
    pattern=st.text(alphabet="ab/*$", min_size=1, max_size=8),
)
def test_rule_matching_equals_reference(path: str, pattern: str) -> None:
    assert _Rule.build(True, pattern).matches(path) == _reference_matches(path, pattern)


# -- robots_url -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://Example.COM/a/b?c#d", "http://example.com/robots.txt"),
        ("https://example.com:443/x", "https://example.com/robots.txt"),
        ("http://example.com:8080/x", "http://example.com:8080/robots.txt"),
        ("https://user:pw@bücher.de/x", "https://xn--bcher-kva.de/robots.txt"),
        ("http://[::1]:81/", "http://[::1]:81/robots.txt"),
    ],
)
def test_robots_url(url: str, expected: str) -> None:
    assert robots_url(url) == expected


@pytest.mark.parametrize("url", ["", "/just/a/path", "mailto:a@example.com", "not a url"])
def test_robots_url_rejects_non_network_urls(url: str) -> None:
    with pytest.raises(ValueError):
        robots_url(url)
