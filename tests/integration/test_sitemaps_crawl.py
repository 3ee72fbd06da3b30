"""Sitemaps feed the frontier: pages linked from nowhere but a sitemap get crawled.

One loopback server plays two hosts. sm.test names a sitemap index in robots.txt;
the index lists a plain sitemap, a gzipped one (.xml.gz), a gzip bomb and a chain
of nested indexes deeper than the bound. probe.test has no robots.txt, only a
/sitemap.xml (found with --sitemap-probe). Neither home page links anything. The
crawl must store every page the sitemaps list, request nothing the robots rules,
the nesting bound or the site rule exclude, and cut the bomb off with a reason.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import pytest

import topology
from streams import codec
from streams.kafka.broker import EmbeddedBroker
from streams.store.storeset import open_stores
from tests.integration.conftest import read_topic, run_crawl
from tests.integration.loopback import page, serve
from tests.unit.test_sitemaps import index, urlset


def xml(body: bytes, ctype: str = "application/xml"):
    return lambda _h: (200, {"Content-Type": ctype}, body)


def gzip_bomb(mib: int) -> bytes:
    compressor = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = b"\0" * (1 << 20)
    return b"".join(compressor.compress(chunk) for _ in range(mib)) + compressor.flush()


S = "http://sm.test"
ROUTES = {
    ("sm.test", "/robots.txt"): lambda _h: (
        200,
        {"Content-Type": "text/plain"},
        f"User-agent: *\nDisallow: /private\n\nSitemap: {S}/sitemap_index.xml\n".encode(),
    ),
    ("sm.test", "/"): page("<html><title>home</title><body>nothing linked</body></html>"),
    ("sm.test", "/sitemap_index.xml"): xml(
        index(
            f"{S}/pages.xml",
            f"{S}/more.xml.gz",
            f"{S}/bomb.xml.gz",
            f"{S}/nested-1.xml",
        )
    ),
    ("sm.test", "/pages.xml"): xml(
        urlset(
            f"{S}/orphan-a",
            f"{S}/orphan-b?x=1&amp;y=2",
            f"{S}/private/secret",
            "http://elsewhere.test/offsite",
        )
    ),
    ("sm.test", "/more.xml.gz"): xml(gzip.compress(urlset(f"{S}/orphan-c")), "application/x-gzip"),
    ("sm.test", "/bomb.xml.gz"): xml(gzip_bomb(64), "application/x-gzip"),
    ("sm.test", "/nested-1.xml"): xml(index(f"{S}/nested-2.xml")),  # depth 2
    ("sm.test", "/nested-2.xml"): xml(index(f"{S}/nested-3.xml")),  # depth 3: the bound
    ("sm.test", "/nested-3.xml"): xml(urlset(f"{S}/too-deep")),
    ("probe.test", "/"): page("<html><body>no links here either</body></html>"),
    ("probe.test", "/sitemap.xml"): xml(b"http://probe.test/hidden\n", "text/plain"),
}
for name in ("orphan-a", "orphan-b?x=1&y=2", "orphan-c", "private/secret", "too-deep"):
    ROUTES[("sm.test", f"/{name}")] = page(f"<html><body>page {name}</body></html>")
ROUTES[("probe.test", "/hidden")] = page("<html><body>hidden page</body></html>")


@pytest.mark.timeout(180)
def test_sitemap_pages_are_crawled(broker: EmbeddedBroker, tmp_path: Path) -> None:
    with serve(ROUTES) as web:
        run = run_crawl(
            broker,
            tmp_path / "data",
            [f"{S}/", "http://probe.test/"],
            partitions=2,
            resolve=web.resolve("sm.test", "probe.test", "elsewhere.test"),
            extra_args=["--sitemap-probe"],
            SEINE_MAX_SITEMAP_BYTES=str(1 << 20),
            SEINE_SITEMAP_MAX_DEPTH="3",
        )
        assert run.returncode == 0, run.stderr[-3000:]
        print(f"crawl took {run.seconds:.1f} s")
        requested = [(r.host, r.path) for r in web.requests()]

    with open_stores(run.data_dir) as store:
        stored = set(store.urls())
    expected = {
        f"{S}/",
        f"{S}/orphan-a",
        f"{S}/orphan-b?x=1&y=2",
        f"{S}/orphan-c",
        "http://probe.test/",
        "http://probe.test/hidden",
    }
    assert stored == expected

    # every sitemap within the bound fetched once; nothing past the bound, the
    # robots rules or the site rule requested at all
    for path in ("/sitemap_index.xml", "/pages.xml", "/more.xml.gz", "/nested-1.xml"):
        assert requested.count(("sm.test", path)) == 1, path
    assert requested.count(("sm.test", "/nested-2.xml")) == 1
    assert ("sm.test", "/nested-3.xml") not in requested
    assert ("sm.test", "/too-deep") not in requested
    assert ("sm.test", "/private/secret") not in requested
    assert not [r for r in requested if r[0] == "elsewhere.test"]
    assert requested.count(("probe.test", "/sitemap.xml")) == 1
    assert len(requested) == len(set(requested)), "a URL was requested twice"

    topic = topology.topic_name(run.app_id, topology.CRAWL_LOG)
    records = [
        codec.decode("crawl_log", m.value())
        for m in read_topic(broker.bootstrap, topic, 10**6, 5.0)
    ]
    by_url = {r["url"]: r for r in records if r["stage"] == "fetch"}
    assert by_url[f"{S}/pages.xml"]["outcome"] == "sitemap"
    assert "1 on other sites dropped" in by_url[f"{S}/pages.xml"]["reason"]
    assert by_url[f"{S}/nested-2.xml"]["outcome"] == "sitemap"
    assert "not followed: nested deeper than 3" in by_url[f"{S}/nested-2.xml"]["reason"]
    bomb = by_url[f"{S}/bomb.xml.gz"]
    assert bomb["outcome"] == "sitemap-invalid", bomb
    assert bomb["bytes"] <= 1 << 20  # read off the wire: 64 MiB inflate from ~260 KB
    assert f"decoded body cut at {1 << 20} bytes" in bomb["reason"], bomb
    disallowed = [r for r in records if r["url"] == f"{S}/private/secret"]
    assert [r["outcome"] for r in disallowed] == ["robots-disallowed"]
