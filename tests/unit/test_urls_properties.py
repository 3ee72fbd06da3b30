"""Property tests for streams.core.urls.

canonical() runs on whatever pages contain, so it must never raise and must be a
fixed point of itself; the Python fast path of resolve_and_canonicalize must
agree with ada on every input. Budgets are small (300 examples, no deadline) so
the file stays well under 30 s.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams.core import urls
from streams.core.traps import trap_reason
from streams.core.urls import (
    canonical,
    host_of,
    resolve,
    resolve_and_canonicalize,
    resolve_canonical,
)

FAST = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

CANON_SHAPE = re.compile(r"https?://[^#\s]*\Z")


UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
ESCAPE = re.compile(r"%(..)")


def _check_canonical(text: object) -> None:
    """The invariants every canonical() call must hold, whatever the input."""
    c = canonical(text)  # type: ignore[arg-type]
    if c is None:
        return
    short = c[:200]  # keep failure messages readable for 100k-char inputs
    assert CANON_SHAPE.match(c), short
    assert c.isascii(), short
    assert canonical(c) == c, short  # idempotent
    # No escape is left that encodes an unreserved character or has lower-case hex.
    path_query = c[c.index("/", c.index("://") + 3) :]
    for esc in set(ESCAPE.findall(path_query)):
        assert re.fullmatch(r"[0-9A-F]{2}", esc), (short, esc)
        assert chr(int(esc, 16)) not in UNRESERVED, (short, esc)


# ---------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------

SCHEMES = st.sampled_from(["http", "https", "HTTP", "hTTps", "ftp", "javascript", "data", ""])
HOSTS = st.one_of(
    st.sampled_from(
        [
            "example.com",
            "WWW.Example.COM",
            "bücher.de",
            "xn--bcher-kva.de",
            "127.0.0.1",
            "0x7f.1",
            "[::1]",
            "[0:0::1]",
            "a..b",
            "xn--zz",
            "",
            "ex%41mple.com",
            "ｅｘａｍｐｌｅ.com",
        ]
    ),
    st.from_regex(r"[a-zA-Z0-9.-]{1,20}", fullmatch=True),
)
PORTS = st.sampled_from(["", ":", ":80", ":443", ":8080", ":0080", ":99999", ":x"])
PATH_CHARS = st.sampled_from(
    [
        *"abcAZ019-._~/%?#&=;:@!$'()*+,\\ \t\n\"<>{}|^`[]é€",
        "%41",
        "%7e",
        "%7E",
        "%2f",
        "%2F",
        "%2e",
        "%2E",
        "%%",
        "%zz",
        "..",
        "./",
        "../",
        "//",
    ]
)
PATHS = st.lists(PATH_CHARS, max_size=30).map("".join)
URL_LIKE = st.builds(
    lambda s, sep, u, h, p, path: f"{s}{sep}{u}{h}{p}{path}",
    SCHEMES,
    st.sampled_from(["://", ":", ":/", ":\\\\", ":///"]),
    st.sampled_from(["", "user@", "u:p@", "a%40b:@"]),
    HOSTS,
    PORTS,
    PATHS,
)


# ---------------------------------------------------------------------------
# canonical: never raises, idempotent
# ---------------------------------------------------------------------------


@FAST
@given(st.text())
def test_canonical_arbitrary_text(text: str) -> None:
    _check_canonical(text)


@FAST
@given(st.binary(max_size=200), st.sampled_from(["surrogateescape", "latin-1"]))
def test_canonical_random_bytes_decoded(data: bytes, how: str) -> None:
    text = data.decode("utf-8", "surrogateescape") if how == "surrogateescape" else data.decode(how)
    _check_canonical(text)
    _check_canonical("http://example.com/" + text)


@FAST
@given(URL_LIKE)
def test_canonical_url_like(url: str) -> None:
    _check_canonical(url)


@FAST
@given(st.integers() | st.none() | st.binary() | st.lists(st.text(), max_size=2))
def test_canonical_non_str(value: object) -> None:
    assert canonical(value) is None  # type: ignore[arg-type]


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.text(min_size=1, max_size=5), st.sampled_from(["", "http://example.com/"]))
def test_canonical_overlong(chunk: str, prefix: str) -> None:
    url = prefix + chunk * (100_000 // len(chunk) + 1)
    assert len(url) >= 100_000
    _check_canonical(url)


def test_canonical_overlong_valid_url_is_kept() -> None:
    # Length is trap_reason's business, not canonical's: a long URL stays a URL.
    url = "http://example.com/" + "a" * 100_000
    assert canonical(url) == url
    assert trap_reason(url) == "too-long"


def test_canonical_huge_host_label() -> None:
    _check_canonical("http://" + "a" * 200_000 + ".com/")


# ---------------------------------------------------------------------------
# resolve / batch: never raise, and the fast path agrees with ada
# ---------------------------------------------------------------------------

BASES = st.sampled_from(
    [
        "http://www.example.com/dir/sub/page.html?x=1#top",
        "https://Example.COM:443",
        "http://example.com/%7edir/%zz/p?%7e=%41",
        "http://u:p@example.com:8080/a/b/",
        "http://example.com/a/b/c/d;p?q",
        "http://[::1]/x",
        "http://example.com/?",
        "mailto:a@b",
        "not a url",
        "http://127.0.1.5:44565/a/./b/../c.html?q=%7e#f",
        "http://a.b/..",
    ]
)
# Bias towards the characters the Python fast path accepts, so it is exercised.
REL_CHARS = st.sampled_from(
    [*"ab09-._~/?#&=;:@!$'()*+,%", "%41", "%7e", "%2f", "//", "./", "../", "..", ".", "\\", " "]
)
RELS = st.lists(REL_CHARS, max_size=15).map("".join)


# Absolute and scheme-relative links shaped for the authority fast path (plain host,
# any port spelling), with paths and queries from RELS.
ABS_LINKS = st.builds(
    lambda scheme, host, port, rest: f"{scheme}//{host}{port}{rest}",
    st.sampled_from(["http:", "https:", "", "HTTP:", "ftp:", "http:/"]),
    st.one_of(HOSTS, st.sampled_from(["127.0.1.11", "a.b", "A.B", "1.2.3", "-", "."])),
    st.sampled_from(["", ":", ":80", ":443", ":0080", ":39393", ":65536", ":99999", ":x"]),
    st.one_of(RELS.map(lambda r: "/" + r), RELS),
)


@FAST
@given(BASES, st.one_of(RELS, URL_LIKE, ABS_LINKS, st.text(max_size=30)))
def test_batch_fast_path_agrees_with_ada(base: str, href: str) -> None:
    single = resolve_canonical(base, href)
    r = resolve(base, href)
    assert single == (canonical(r) if r is not None else None)
    assert resolve_and_canonicalize(base, [href]) == ([single] if single is not None else [])
    if r is not None:
        assert r.startswith(("http://", "https://"))


@FAST
@given(st.text(max_size=50), st.text(max_size=50))
def test_resolve_never_raises(base: str, href: str) -> None:
    r = resolve(base, href)
    assert r is None or r.startswith(("http://", "https://"))


# ---------------------------------------------------------------------------
# host_of: regex fast path agrees with ada's parse
# ---------------------------------------------------------------------------

# Includes "xn--" labels (valid and not), which host_of leaves to ada.
HOST_LABEL = st.one_of(
    st.from_regex(r"[a-z0-9-]{1,8}", fullmatch=True),
    st.from_regex(r"xn--[a-z0-9-]{0,8}", fullmatch=True),
    st.sampled_from(["xn--bcher-kva", "xn--r8jz45g", "0x7f", "1", "09"]),
)


@FAST
@given(
    st.lists(HOST_LABEL, min_size=1, max_size=4).map(".".join),
    st.sampled_from(
        ["", ":", ":1", ":80", ":8080", ":9999", ":39393", ":65535", ":65536", ":09999"]
    ),
    st.sampled_from(["", "/", "/p?q", "?q", "#f"]),
)
def test_host_of_matches_canonical(host: str, port: str, rest: str) -> None:
    url = f"http://{host}{port}{rest}"
    c = canonical(url)
    if c is None:
        assert host_of(url) == ""
    else:
        expected = c.split("://", 1)[1].split("/", 1)[0]
        expected = expected.rsplit(":", 1)[0] if ":" in expected else expected
        assert host_of(url) == expected == host_of(c)


@FAST
@given(
    st.sampled_from(["http://a.b", "https://www.a.b:8080", "http://127.0.1.5:44565", "http://A.b"]),
    st.sampled_from(["", "?q", "#f", " ", "x", ":1"]),
    st.lists(st.sampled_from(["/", "/p", "?q", "#f", "\ud800", " ", "\\", "é"]), max_size=4).map(
        "".join
    ),
    st.lists(st.sampled_from(["/", "/p", "?q", "#f", "\ud800", " ", "\\", "é"]), max_size=4).map(
        "".join
    ),
)
def test_host_of_memo_answers_as_a_fresh_parse(
    authority: str, tail: str, rest1: str, rest2: str
) -> None:
    """host_of memoises its regex answers by the text before the first "/": two URLs
    sharing that text, asked in either order, get what an empty memo gives each."""
    first, second = authority + tail + "/" + rest1, authority + tail + "/" + rest2
    fresh = []
    for url in (first, second):
        urls._HOSTS.clear()
        fresh.append(host_of(url))
    for order in ((first, second), (second, first)):
        urls._HOSTS.clear()
        assert [host_of(u) for u in order] == [fresh[(first, second).index(u)] for u in order]


def test_batch_common_links_need_no_ada_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """A canonical page URL, dot-segment links, absolute links to known hosts and
    javascript:/mailto: links are all answered in Python (as ada answers them)."""
    base = "http://127.0.1.9:44565/docs/a/page-3.html"
    hrefs = [
        "../page-1.html",
        "./",
        "..",
        "./b/../c.html?x=%7e#s",
        "javascript:void(0)",
        "MailTo:a@b",
        "http://127.0.1.9:44565/x/../y.html",
        "//127.0.1.9:44565/./z",
    ]
    expected = [c for c in (resolve_canonical(base, h) for h in hrefs) if c is not None]
    assert expected == [
        "http://127.0.1.9:44565/docs/page-1.html",
        "http://127.0.1.9:44565/docs/a/",
        "http://127.0.1.9:44565/docs/",
        "http://127.0.1.9:44565/docs/a/c.html?x=~",
        "http://127.0.1.9:44565/y.html",
        "http://127.0.1.9:44565/z",
    ]
    resolve_and_canonicalize(base, ["http://127.0.1.9:44565/"])  # memoise the authority
    urls._prepare_base.cache_clear()
    calls: list[bytes] = []
    real = urls._serialize

    def counting(data: bytes, base_url: bytes | None) -> str | None:
        calls.append(data)
        return real(data, base_url)

    monkeypatch.setattr(urls, "_serialize", counting)
    assert resolve_and_canonicalize(base, hrefs, dedupe=False) == expected
    assert calls == []


def test_batch_absolute_memo_keys_scheme_relative_links_by_the_page_scheme() -> None:
    """A scheme-relative link memoised under an https page is not reused under an
    http one (nor the other way round); an absolute link's memo serves any page."""
    urls._ABSOLUTES.clear()
    for _ in range(2):  # the second round answers from the memo
        assert resolve_and_canonicalize("https://a.test/", ["//b.test/p", "http://c.test/q"]) == [
            "https://b.test/p",
            "http://c.test/q",
        ]
        assert resolve_and_canonicalize("http://a.test/", ["//b.test/p", "http://c.test/q"]) == [
            "http://b.test/p",
            "http://c.test/q",
        ]
    assert set(urls._ABSOLUTES) == {"https://b.test/p", "http://b.test/p", "http://c.test/q"}
