"""The demo web generator: deterministic, shaped as specified, and its ground truth exact.

The key check re-derives the ground truth independently — parse every served page's HTML,
resolve hrefs with urljoin against <base> or the page URL, obey robots.txt via the stdlib
parser, BFS — and requires it to equal `reachable_allowed()`. That is what lets the
pipeline tests trust the generator's answers.
"""

from __future__ import annotations

import ipaddress
import statistics
from collections import deque
from dataclasses import replace
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit
from urllib.robotparser import RobotFileParser

import pytest

from streams.demo.webgen import (
    PRIVATE_PREFIX,
    DemoWeb,
    WebSpec,
    canonical_url,
)

SMALL = WebSpec(hosts=8, pages_per_host=30, seed=3, port=8123)


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.base: str | None = None
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        href = dict(attrs).get("href")
        if href is None:
            return
        if tag == "base" and self.base is None:
            self.base = href
        elif tag == "a":
            self.hrefs.append(href)


def _parse(body: bytes) -> _Anchors:
    parser = _Anchors()
    parser.feed(body.decode("utf-8"))
    parser.close()
    return parser


def _split(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.hostname or "", (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def _fetch(web: DemoWeb, url: str) -> bytes | None:
    page = web.page(*_split(url))
    return None if page is None else page[2]


def _html_links(web: DemoWeb, url: str) -> list[str]:
    """Canonical http links of the page at url, as a crawler would extract them."""
    body = _fetch(web, url)
    assert body is not None, url
    parsed = _parse(body)
    base = urljoin(url, parsed.base) if parsed.base else url
    links = (canonical_url(urljoin(base, href)) for href in parsed.hrefs)
    return [link for link in links if link is not None]


@pytest.fixture(scope="module")
def web() -> DemoWeb:
    return DemoWeb(SMALL)


def _pages(web: DemoWeb) -> list[str]:
    return [u for u in web.served_urls() if PRIVATE_PREFIX not in u]


def test_deterministic_from_seed() -> None:
    a, b = DemoWeb(SMALL), DemoWeb(SMALL)
    assert a.hosts == b.hosts
    for url in _pages(a)[::7]:
        assert _fetch(a, url) == _fetch(b, url)
    assert a.reachable_allowed() == b.reachable_allowed()
    assert a.duplicate_groups() == b.duplicate_groups()
    other = DemoWeb(replace(SMALL, seed=SMALL.seed + 1))
    assert _fetch(other, a.seeds()[0]) != _fetch(a, a.seeds()[0])


def test_page_sizes_near_page_bytes(web: DemoWeb) -> None:
    sizes = [len(_fetch(web, u) or b"") for u in _pages(web)]
    assert all(0.85 * SMALL.page_bytes <= s <= 1.15 * SMALL.page_bytes for s in sizes)
    small = DemoWeb(replace(SMALL, page_bytes=4096))
    assert abs(statistics.mean(len(_fetch(small, u) or b"") for u in _pages(small)) - 4096) < 400


def test_link_counts_and_variety(web: DemoWeb) -> None:
    hrefs = [_parse(_fetch(web, u) or b"").hrefs for u in _pages(web)]
    assert all(len(h) == SMALL.links_per_page for h in hrefs)
    flat = [href for page in hrefs for href in page]
    assert any(h.startswith("mailto:") for h in flat)
    assert any(h.startswith("javascript:") for h in flat)
    assert any(h.startswith("../") for h in flat)
    assert any(h.startswith("./") for h in flat)
    assert any(h.startswith("/") and not h.startswith("//") for h in flat)
    assert any(h.startswith("//") for h in flat)
    assert any(h.startswith("http://") for h in flat)
    assert any(h.startswith("http://SITE-") for h in flat)  # host case must be normalised
    assert any("#" in h for h in flat)
    assert any("?ref=x" in h for h in flat)
    assert any(h.startswith(PRIVATE_PREFIX) for h in flat)
    cross = [h for h in flat if h.startswith("http://") and urlsplit(h).hostname]
    assert cross
    assert any(_parse(_fetch(web, u) or b"").base for u in _pages(web))


def test_robots_txt_disallows_private(web: DemoWeb) -> None:
    for host in web.hosts:
        page = web.page(host, "/robots.txt")
        assert page is not None
        status, headers, body = page
        assert status == 200 and headers["Content-Type"].startswith("text/plain")
        assert b"User-agent: *" in body and b"Disallow: /private/" in body


def test_unknown_paths_and_hosts_are_404(web: DemoWeb) -> None:
    assert web.page(web.hosts[0], "/nope.html") is None
    assert web.page(web.hosts[0], "/page-1.html?other=1") is None
    assert web.page("elsewhere.test", "/") is None
    assert web.page(web.hosts[0].upper() + ":8123", "/") is not None  # Host header form


@pytest.mark.parametrize(
    "spec",
    [
        SMALL,
        replace(SMALL, www_alias_fraction=0.5, seed=11),
        replace(SMALL, use_ip_hosts=True, port=80, links_per_page=5),
    ],
    ids=["names", "www-aliases", "ip-hosts-port-80"],
)
def test_ground_truth_matches_an_independent_html_crawl(spec: WebSpec) -> None:
    web = DemoWeb(spec)
    robots: dict[str, RobotFileParser] = {}
    queue = deque(canonical_url(s) for s in web.seeds())
    seen = set(queue)
    allowed: set[str] = set()
    disallowed: set[str] = set()
    while queue:
        url = queue.popleft()
        assert url is not None
        host = urlsplit(url).hostname or ""
        if host not in robots:
            rp = RobotFileParser()
            page = web.page(host, "/robots.txt")
            assert page is not None
            rp.parse(page[2].decode().splitlines())
            robots[host] = rp
        if not robots[host].can_fetch("AnyBot", url):
            disallowed.add(url)
            continue
        allowed.add(url)
        for link in _html_links(web, url):
            if link not in seen:
                seen.add(link)
                queue.append(link)
    assert allowed == web.reachable_allowed()
    assert disallowed == web.disallowed_linked()
    assert disallowed and all(urlsplit(u).path.startswith(PRIVATE_PREFIX) for u in disallowed)


def test_structured_links_agree_with_html(web: DemoWeb) -> None:
    for url in _pages(web)[::3]:
        host, target = _split(url)
        structured = [
            f"http://{link.host or host}:{web.port}{link.target}"
            for link in web.links_of(host, target)
            if link.target is not None
        ]
        assert structured == _html_links(web, url)


def test_reachable_allowed_excludes_private_and_covers_every_page(web: DemoWeb) -> None:
    reachable = web.reachable_allowed()
    assert not any(PRIVATE_PREFIX in u for u in reachable)
    assert reachable == set(_pages(web))  # every generated page is reachable
    assert not web.unserved_linked()
    assert all(u.startswith("http://site-") and ":8123/" in u for u in reachable)
    assert any("?ref=x" in u for u in reachable)


def test_seed_subset_reaches_a_subset() -> None:
    web = DemoWeb(SMALL)
    one = web.reachable_allowed([web.seeds()[0]])
    assert web.seeds()[0] in one
    assert one <= web.reachable_allowed()
    assert web.reachable_allowed([web.seeds()[0].upper().replace("HTTP", "http")]) == one


def test_duplicates(web: DemoWeb) -> None:
    spec = replace(SMALL, hosts=20, pages_per_host=40)
    big = DemoWeb(spec)
    copies = big.copy_urls()
    fraction = len(copies) / (spec.hosts * spec.pages_per_host)
    assert 0.06 <= fraction <= 0.14
    groups = big.duplicate_groups()
    grouped = set().union(*groups)
    assert copies <= grouped
    for group in groups:
        assert len(group) >= 2
        assert len({_fetch(big, u) for u in group}) == 1
    # across hosts as well as within one
    assert any(len({urlsplit(u).hostname for u in g}) > 1 for g in groups)
    assert any(len({urlsplit(u).hostname for u in g}) < len(g) for g in groups)
    # outside the groups, bodies are unique
    bodies = [_fetch(big, u) for u in big.reachable_allowed() - grouped]
    assert len(set(bodies)) == len(bodies)


def test_no_duplicates_when_fraction_zero() -> None:
    web = DemoWeb(replace(SMALL, duplicate_fraction=0.0))
    assert not web.copy_urls()
    assert all("?ref=x" in "".join(g) for g in web.duplicate_groups())


def test_addresses_are_distinct_loopback_ips_and_wrap() -> None:
    web = DemoWeb(WebSpec(hosts=300, pages_per_host=2))
    ips = [web.address_of(h) for h in web.hosts]
    assert len(set(ips)) == 300
    assert ips[0] == "127.0.1.1" and ips[253] == "127.0.1.254" and ips[254] == "127.0.2.1"
    net = ipaddress.IPv4Network("127.0.0.0/8")
    assert all(
        ipaddress.IPv4Address(ip) in net and ip.split(".")[3] not in ("0", "255") for ip in ips
    )
    assert web.resolve_map(4321)[web.hosts[254]] == "127.0.2.1:4321"
    with pytest.raises(ValueError):
        WebSpec(hosts=10, base_ip="10.0.0.1")
    with pytest.raises(ValueError):
        WebSpec(duplicate_fraction=1.5)


def test_www_aliases_serve_the_same_bytes() -> None:
    web = DemoWeb(replace(SMALL, www_alias_fraction=0.5))
    aliases = [n for n in web.all_host_names() if n.startswith("www.")]
    assert aliases
    resolve = web.resolve_map(8123)
    for alias in aliases:
        assert resolve[alias] == resolve[alias[4:]]
        assert web.page(alias, "/page-2.html") == web.page(alias[4:], "/page-2.html")
    reachable = web.reachable_allowed()
    assert any(urlsplit(u).hostname in aliases for u in reachable)
    folded = web.reachable_allowed(www_equivalent=True)
    assert not any("//www." in u for u in folded)
    assert folded == {u for u in reachable if "//www." not in u}


def test_ip_hosts() -> None:
    web = DemoWeb(replace(SMALL, use_ip_hosts=True))
    assert web.hosts[0] == "127.0.1.1"
    assert web.resolve_map(8123)["127.0.1.2"] == "127.0.1.2:8123"
    assert all(urlsplit(u).hostname in web.hosts for u in web.reachable_allowed())
    assert web.reachable_allowed() == set(_pages(web))


def test_with_port_rebinds_links() -> None:
    web = DemoWeb(replace(SMALL, port=0)).with_port(9999)
    assert web.seeds()[0] == "http://site-0000.demo.test:9999/"
    assert all(":9999/" in u for u in web.reachable_allowed())
    at80 = web.with_port(80)
    assert at80.seeds()[0] == "http://site-0000.demo.test/"
