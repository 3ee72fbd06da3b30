"""Unit tests for streams.core.urls: one test (or parametrised group) per rule."""

from __future__ import annotations

from typing import Any

import ada_url
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.core.urls import (
    canonical,
    host_of,
    resolve,
    resolve_and_canonicalize,
    resolve_canonical,
    site_key,
)

BASE = "http://www.example.com/dir/sub/page.html?x=1#top"

# ---------------------------------------------------------------------------
# resolve
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("href", "expected"),
    [
        ("page-12.html", "http://www.example.com/dir/sub/page-12.html"),
        ("../b/", "http://www.example.com/dir/b/"),
        ("/x/y?z=1#f", "http://www.example.com/x/y?z=1#f"),  # resolve keeps the fragment
        ("#frag", "http://www.example.com/dir/sub/page.html?x=1#frag"),
        ("", "http://www.example.com/dir/sub/page.html?x=1"),
        ("?q", "http://www.example.com/dir/sub/page.html?q"),
        ("//other.org/p", "http://other.org/p"),
        ("https://s.example/", "https://s.example/"),
        ("HTTP://WWW.EXAMPLE.COM", "http://www.example.com/"),
        ("  /trim-me \n", "http://www.example.com/trim-me"),
        ("/a\\b", "http://www.example.com/a/b"),  # WHATWG: backslash is a slash for http
    ],
)
def test_resolve_http(href: str, expected: str) -> None:
    assert resolve(BASE, href) == expected


@pytest.mark.parametrize(
    "href",
    [
        "javascript:void(0)",
        "JavaScript:alert(1)",
        "mailto:a@b.example",
        "data:text/html,hi",
        "ftp://ftp.example.com/file",
        "tel:+123",
        "ws://example.com/",
        "http://exa mple.com/",  # space in host: parse failure
        "http://[::1/",
        "http://a:99999/",  # port out of range
    ],
)
def test_resolve_uncrawlable_is_none(href: str) -> None:
    assert resolve(BASE, href) is None


def test_resolve_bad_base_and_non_str_never_raise() -> None:
    assert resolve("not a url", "page.html") is None
    assert resolve("not a url", "http://ok.example/") is None  # WHATWG: bad base fails all
    assert resolve(None, "page.html") is None  # type: ignore[arg-type]
    assert resolve(BASE, b"page.html") is None  # type: ignore[arg-type]


def test_resolve_absolute_with_non_http_base() -> None:
    assert resolve("about:blank", "https://x.example/a") == "https://x.example/a"
    assert resolve("mailto:a@b", "page.html") is None


# ---------------------------------------------------------------------------
# canonical: one test per rule
# ---------------------------------------------------------------------------


def test_canonical_lowercases_scheme_and_host() -> None:
    assert canonical("HTTP://WWW.Example.COM/Path/File.HTML") == (
        "http://www.example.com/Path/File.HTML"  # path case is significant: kept
    )


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://Bücher.DE/", "http://xn--bcher-kva.de/"),
        ("http://ｅｘａｍｐｌｅ.com/", "http://example.com/"),  # full-width: IDNA mapping
        ("https://例え.テスト/パス", "https://xn--r8jz45g.xn--zckzah/%E3%83%91%E3%82%B9"),
    ],
)
def test_canonical_idn_to_punycode(url: str, expected: str) -> None:
    assert canonical(url) == expected


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://example.com:80/", "http://example.com/"),
        ("https://example.com:443/", "https://example.com/"),
        ("http://example.com:443/", "http://example.com:443/"),
        ("https://example.com:80/", "https://example.com:80/"),
        ("http://example.com:8080/", "http://example.com:8080/"),
        ("http://example.com:/", "http://example.com/"),
        ("http://example.com:0080/", "http://example.com/"),
    ],
)
def test_canonical_default_port_dropped(url: str, expected: str) -> None:
    assert canonical(url) == expected


def test_canonical_drops_fragment() -> None:
    assert canonical("http://example.com/a?b=1#frag") == "http://example.com/a?b=1"
    assert canonical("http://example.com/a#") == "http://example.com/a"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://example.com/a/./b/../c", "http://example.com/a/c"),
        ("http://example.com/../../x", "http://example.com/x"),
        ("http://example.com/a/%2e/b/%2E%2e/c", "http://example.com/a/c"),
        ("http://example.com/a/b/..", "http://example.com/a/"),
    ],
)
def test_canonical_removes_dot_segments(url: str, expected: str) -> None:
    assert canonical(url) == expected


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://example.com/%7euser/%41%62%30%2D%2E%5F", "http://example.com/~user/Ab0-._"),
        ("http://example.com/a%2fb%3a", "http://example.com/a%2Fb%3A"),  # reserved: kept, upper
        ("http://example.com/?q=%7e&r=%3d%26", "http://example.com/?q=~&r=%3D%26"),
        ("http://example.com/é", "http://example.com/%C3%A9"),
        ("http://example.com/%e2%82%ac", "http://example.com/%E2%82%AC"),
        ("http://example.com/100%", "http://example.com/100%25"),  # stray % spelled out
        ("http://example.com/%zz?%g", "http://example.com/%25zz?%25g"),
        ("http://example.com/%%341", "http://example.com/%2541"),
    ],
)
def test_canonical_percent_encoding_normalised(url: str, expected: str) -> None:
    assert canonical(url) == expected


def test_canonical_percent_only_in_path_and_query() -> None:
    # Userinfo is left as ada serialises it; only path and query are normalised.
    assert canonical("http://u%7e:p@example.com/%7e") == "http://u%7e:p@example.com/~"


def test_canonical_empty_path_becomes_slash() -> None:
    assert canonical("http://example.com") == "http://example.com/"
    assert canonical("http://example.com?q") == "http://example.com/?q"


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com/dir/",  # trailing slash kept
        "http://example.com/dir",  # ...and its absence too
        "http://example.com/p?b=2&a=1&b=1",  # query order kept
        "http://example.com/a/index.html",  # file name kept
        "http://example.com/?",  # empty query is not removable (RFC 3986 §6.2.3)
        "https://user:pw@example.com:8443/a;p?q",
    ],
)
def test_canonical_keeps(url: str) -> None:
    assert canonical(url) == url


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/",
        "mailto:a@b",
        "javascript:alert(1)",
        "file:///etc/passwd",
        "/relative/path",
        "example.com",
        "",
        "http://",
        "http://exa mple.com/",
        "https://[::1",
    ],
)
def test_canonical_rejects_non_http_and_invalid(url: str) -> None:
    assert canonical(url) is None


@pytest.mark.parametrize("value", [None, 42, 3.5, b"http://example.com/", ["http://a/"], object()])
def test_canonical_non_str_is_none(value: Any) -> None:
    assert canonical(value) is None


def test_canonical_lone_surrogate_is_replaced_not_raised() -> None:
    # A USVString conversion (what a browser does) turns it into U+FFFD.
    assert canonical("http://example.com/a\udc80b") == "http://example.com/a%EF%BF%BDb"


def test_canonical_ip_hosts() -> None:
    assert canonical("http://0x7f.1/") == "http://127.0.0.1/"
    assert canonical("http://[0:0::1]:80/") == "http://[::1]/"


# ---------------------------------------------------------------------------
# resolve_canonical / resolve_and_canonicalize
# ---------------------------------------------------------------------------

HREFS = [
    "page-2.html",
    "../b/",
    "/x/y?z=1#f",
    "/x/y?z=1#other",  # same canonical as the previous one
    "http://Host.Example:80/a/./b/../c",
    "HTTP://WWW.EXAMPLE.COM",
    "javascript:void(0)",
    "mailto:a@b",
    "?q=%7e%2f",
    "#top",
    "",
    "./",
    "//cdn.example/x.js",
    "/.well-known/a",
    "/%7Euser/",
]


def test_resolve_canonical_equals_two_step() -> None:
    for href in HREFS:
        assert resolve_canonical(BASE, href) == canonical(resolve(BASE, href) or ""), href


def test_batch_matches_two_step_in_order_and_dedupes() -> None:
    two_step = [canonical(r) for h in HREFS if (r := resolve(BASE, h)) is not None]
    expected: list[str] = []
    for c in two_step:
        if c is not None and c not in expected:
            expected.append(c)
    got = resolve_and_canonicalize(BASE, HREFS)
    assert got == expected
    assert "http://www.example.com/x/y?z=1" in got
    assert len(got) < len(HREFS)


def test_batch_without_dedupe_keeps_repeats() -> None:
    got = resolve_and_canonicalize(BASE, ["a", "a#x", "a"], dedupe=False)
    assert got == ["http://www.example.com/dir/sub/a"] * 3


def test_batch_empty_href_and_fragment_give_page_itself() -> None:
    assert resolve_and_canonicalize(BASE, ["", "#x"]) == [
        "http://www.example.com/dir/sub/page.html?x=1"
    ]


def test_batch_normalises_page_url_parts() -> None:
    base = "HTTP://Example.COM:80/%7edir/./p?%7e=1"
    assert resolve_and_canonicalize(base, ["q", "", "?a=%41"]) == [
        "http://example.com/~dir/q",
        "http://example.com/~dir/p?~=1",
        "http://example.com/~dir/p?a=A",
    ]


def test_batch_bad_base_keeps_nothing_and_never_raises() -> None:
    assert resolve_and_canonicalize("not a url", ["a", "http://x.example/"]) == []
    assert resolve_and_canonicalize(None, ["a"]) == []  # type: ignore[arg-type]
    assert resolve_and_canonicalize(BASE, [None, 1, "a"]) == [  # type: ignore[list-item]
        "http://www.example.com/dir/sub/a"
    ]


def test_batch_accepts_any_iterable() -> None:
    assert resolve_and_canonicalize(BASE, (h for h in ["a", "b"])) == [
        "http://www.example.com/dir/sub/a",
        "http://www.example.com/dir/sub/b",
    ]


# ---------------------------------------------------------------------------
# host_of / site_key
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("http://www.example.com/a", "www.example.com"),
        ("https://example.com:8443/", "example.com"),
        ("HTTP://User:pw@Example.COM:8080/x", "example.com"),
        ("http://Bücher.de/", "xn--bcher-kva.de"),
        ("http://xn--bcher-kva.de/", "xn--bcher-kva.de"),
        ("http://[::1]:8080/", "[::1]"),
        ("http://0x7f.1/", "127.0.0.1"),
        ("http://example.com", "example.com"),
        ("http://example.com?q", "example.com"),
        ("/relative", ""),
        ("", ""),
        ("mailto:a@b", ""),
    ],
)
def test_host_of(url: str, host: str) -> None:
    assert host_of(url) == host


@given(
    st.lists(
        st.one_of(
            st.integers(0, 300).map(str),
            st.integers(0, 255).map(lambda n: f"0{n}"),
            st.integers(0, 255).map(hex),
        ),
        min_size=1,
        max_size=5,
    ),
    st.sampled_from(["", ":", ":80", ":8080", ":39393", ":65535", ":65536", ":99999"]),
    st.sampled_from(["", "/", "/a?b", "?q", "#f", "\\x"]),
)
def test_host_of_ipv4_agrees_with_ada(parts: list[str], port: str, rest: str) -> None:
    """The IPv4 fast path (canonical dotted quads) answers what WHATWG host parsing does."""
    url = f"http://{'.'.join(parts)}{port}{rest}"
    try:
        expected = str(ada_url.parse_url(url, attributes=("hostname",))["hostname"])
    except ValueError:
        expected = ""
    assert host_of(url) == expected


@pytest.mark.parametrize("host", ["127.0.1.1", "site-0001.demo.test"])
def test_host_of_five_digit_ports_agree_with_ada(host: str) -> None:
    """The fast paths take 5-digit ports up to 65535 (and leading zeros), as WHATWG does;
    checked against ada at every boundary of the port pattern."""
    ports = [f"{n:05d}" for n in range(0, 200)]
    for edge in (10000, 39393, 59999, 60000, 64999, 65000, 65499, 65500, 65529, 65530, 65535):
        ports += [str(n) for n in range(edge - 3, edge + 4)]
    ports += ["99999", "655350", "000080", "0"]
    for port in ports:
        for rest in ("", "/", "/p?q", "?q", "#f"):
            url = f"http://{host}:{port}{rest}"
            try:
                expected = str(ada_url.parse_url(url, attributes=("hostname",))["hostname"])
            except ValueError:
                expected = ""
            assert host_of(url) == expected, url


def test_host_of_non_str() -> None:
    assert host_of(None) == ""  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("host", "key"),
    [
        ("www.example.com", "example.com"),
        ("example.com", "example.com"),
        ("WWW.Example.com", "example.com"),
        ("www.www.example.com", "www.example.com"),  # only one www. removed
        ("www2.example.com", "www2.example.com"),
        ("wwwexample.com", "wwwexample.com"),
        ("www.", "www."),
        ("", ""),
    ],
)
def test_site_key(host: str, key: str) -> None:
    assert site_key(host) == key


def test_www_and_bare_host_share_site_key() -> None:
    a = site_key(host_of(canonical("http://WWW.Example.com/x") or ""))
    b = site_key(host_of(canonical("https://example.com:443/y") or ""))
    assert a == b == "example.com"


def test_batch_resolution_of_demo_web_links_is_ada_s() -> None:
    """Every link of the demo web's pages (relative, absolute and scheme-relative, to
    hosts with 5-digit ports) resolves in the batch path as ada resolves it alone."""
    from streams.core.parsing import parse_html
    from streams.demo.webgen import DemoWeb, WebSpec

    for ip in (True, False):
        web = DemoWeb(WebSpec(hosts=5, pages_per_host=20, use_ip_hosts=ip)).with_port(39393)
        checked = 0
        for url in web.served_urls():
            host, _, path = url.split("://", 1)[1].partition("/")
            served = web.page(host, "/" + path)
            if served is None or "html" not in served[1].get("Content-Type", ""):
                continue
            links = parse_html(served[2], "utf-8").links
            expected = [c for c in (resolve_canonical(url, h) for h in links) if c is not None]
            assert resolve_and_canonicalize(url, links, dedupe=False) == expected
            checked += len(links)
        assert checked > 1000
