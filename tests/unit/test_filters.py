"""Unit tests for streams.core.filters: the canonical URL, or a Rejection with its reason."""

from __future__ import annotations

import pytest

from streams.core.filters import FilterConfig, Rejection, filter_url

OPEN = FilterConfig()


def reason(verdict: str | Rejection) -> str:
    assert isinstance(verdict, Rejection), f"expected a rejection, got {verdict!r}"
    return verdict.reason


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://example.com/a", "https://example.com/a"),
        ("HTTP://Example.COM:80/a/./b/../c#frag", "http://example.com/a/c"),
        ("https://example.com", "https://example.com/"),
        ("https://example.com:8443/x?b=2&a=1", "https://example.com:8443/x?b=2&a=1"),
    ],
)
def test_accepted_urls_come_back_canonical(url: str, expected: str) -> None:
    assert filter_url(url, 0, OPEN, ()) == expected


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        "mailto:someone@example.com",
        "ftp://example.com/file",
        "data:text/html,hi",
        "/relative/path",
        "not a url",
        "",
        "http://",
    ],
)
def test_uncrawlable(url: str) -> None:
    assert reason(filter_url(url, 0, OPEN, ())) == "not a crawlable http(s) URL"


@pytest.mark.parametrize(
    ("url", "trap"),
    [
        ("https://example.com/" + "x" * 3000, "too-long"),
        ("https://example.com/a/a/a/page", "repeated-segment"),
        ("https://example.com/cal/2024/2024/2024/", "repeated-segment"),
        ("https://example.com/" + "/".join(f"d{i}" for i in range(30)), "too-deep"),
    ],
)
def test_traps(url: str, trap: str) -> None:
    assert reason(filter_url(url, 0, OPEN, ())) == f"trap guard: {trap}"


def test_near_traps_pass() -> None:
    assert filter_url("https://example.com/a/a/b", 0, OPEN, ()) == "https://example.com/a/a/b"
    deep = "https://example.com/" + "/".join(f"d{i}" for i in range(20))
    assert filter_url(deep, 0, OPEN, ()) == deep


def test_max_depth() -> None:
    config = FilterConfig(max_depth=2)
    assert filter_url("https://example.com/", 2, config, ()) == "https://example.com/"
    assert reason(filter_url("https://example.com/", 3, config, ())) == (
        "depth 3 over --max-depth 2"
    )
    # 0 means no limit.
    assert filter_url("https://example.com/", 10_000, OPEN, ()) == "https://example.com/"


def test_same_host() -> None:
    config = FilterConfig(same_host=True)
    seeds = {"example.com"}
    assert filter_url("https://example.com/a", 1, config, seeds) == "https://example.com/a"
    # www. and the bare host are one site; the port does not matter.
    assert filter_url("https://www.example.com/", 1, config, seeds) == "https://www.example.com/"
    assert filter_url("http://EXAMPLE.com:8080/", 1, config, seeds) == "http://example.com:8080/"
    assert reason(filter_url("https://other.example/", 1, config, seeds)) == (
        "off-site (--same-host)"
    )
    assert reason(filter_url("https://sub.example.com/", 1, config, seeds)) == (
        "off-site (--same-host)"
    )
    # Without --same-host, any site passes.
    assert filter_url("https://other.example/", 1, OPEN, seeds) == "https://other.example/"


def test_checks_run_in_order() -> None:
    both = FilterConfig(max_depth=1, same_host=True)
    assert reason(filter_url("ftp://x/", 5, both, ())).startswith("not a crawlable")
    assert reason(filter_url("https://x.example/a/a/a/", 5, both, ())).startswith("trap guard")
    assert reason(filter_url("https://x.example/", 5, both, ())).startswith("depth 5")
    assert reason(filter_url("https://x.example/", 1, both, ())).startswith("off-site")


def test_a_remembered_verdict_is_the_verdict_and_the_rules_still_apply_each_time() -> None:
    """url-filter meets a URL once per page linking to it, so the URL-only part (canonical
    form, trap shape) is memoised: the second answer equals the first and an uncached
    one, while depth and scope, which depend on the link, are judged on every call."""
    from streams.core.filters import VERDICT_CACHE_MAX_URL, _vet, vet
    from streams.core.traps import DEFAULT_RULES

    urls = [
        "HTTP://Example.COM:80/a/./b/../c#frag",
        "https://x.example/a/a/a/",
        "ftp://x/",
        "https://example.com/" + "p" * VERDICT_CACHE_MAX_URL,  # too long to be remembered
        "https://example.com/" + "a/" * 1200,  # a trap, and not remembered
    ]
    for url in urls:
        assert vet(url) == vet(url) == _vet(url, DEFAULT_RULES)
    config = FilterConfig(max_depth=2, same_host=True)
    seeds = {"example.com"}
    assert filter_url(urls[0], 1, config, seeds) == "http://example.com/a/c"
    assert reason(filter_url(urls[0], 3, config, seeds)) == "depth 3 over --max-depth 2"
    assert reason(filter_url(urls[0], 1, config, {"other.example"})) == "off-site (--same-host)"
    assert filter_url(urls[0], 1, config, seeds) == "http://example.com/a/c"
