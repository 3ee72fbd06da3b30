"""The link graph read back from the page stores (streams/store/linkgraph.py) and
`seine export --links [--hosts]`."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.cli import main
from streams.store.linkgraph import capture_links, host_edges, page_edges
from streams.store.pagestore import PageStore
from streams.store.storeset import open_stores

HTML = [("Content-Type", "text/html; charset=utf-8")]
T0 = 1_700_000_000.0
A = "http://a.example/"
B = "http://a.example/dir/page.html"

PAGES: dict[str, tuple[list[tuple[str, str]], str]] = {
    A: (
        HTML,
        '<a href="/b">b</a> <a href="http://B.example/x#frag">x</a>'
        '<a href="http://b.example/x">x again</a>'
        '<a href="http://c.example/" rel="external nofollow">not followed</a>'
        '<a href="#top">itself</a> <a href="mailto:me@a.example">mail</a>'
        '<a href="http://www.a.example/">www</a>',
    ),
    B: (
        HTML,
        '<head><base href="http://b.example/base/"></head>'
        '<a href="rel.html">rel</a> <a href="../up.html">up</a>',
    ),
    "http://c.example/": (
        HTML,
        '<meta name="robots" content="noindex, nofollow"><a href="http://a.example/">a</a>',
    ),
    "http://e.example/img.png": (
        [("Content-Type", "image/png")],
        '<a href="http://a.example/">not HTML</a>',
    ),
    "http://f.example/": (
        [*HTML, ("X-Robots-Tag", "seinebot: nofollow")],
        '<a href="http://a.example/">a</a>',
    ),
}

PAGE_EDGES = [
    (A, "http://a.example/b"),
    (A, "http://b.example/x"),
    (A, "http://www.a.example/"),
    (A, "http://d.example/new"),  # from A's later capture, in the other worker's store
    (B, "http://b.example/base/rel.html"),
    (B, "http://b.example/up.html"),
]
HOST_EDGES = [
    ("a.example", "b.example", 3),
    ("a.example", "d.example", 1),
    ("a.example", "www.a.example", 1),
]


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """Two workers' stores: pages with links; a revisit of A (itself, unchanged) and a
    duplicate of A under another URL, both revisit records; and a later capture of A
    with one new link in the second worker's store (its host moved in a rebalance)."""
    root = tmp_path / "data"
    with PageStore(root / "pages") as store:
        first = None
        for i, (url, (headers, body)) in enumerate(PAGES.items()):
            capture = store.put(
                url, status=200, headers=headers, body=body.encode(), fetched_at=T0 + i
            )
            first = first or capture
        assert first is not None and first.url == A
        for url, at in ((A, T0 + 50), ("http://d.example/dup", T0 + 60)):
            store.put_revisit(
                url,
                original_url=A,
                original_digest=first.digest,
                original_date=first.fetched_at,
                status=200,
                headers=HTML,
                fetched_at=at,
            )
    with PageStore(root / "worker-1" / "pages") as store:
        later = b'<a href="/b">b</a> <a href="http://d.example/new">new</a>'
        store.put(A, status=200, headers=HTML, body=later, fetched_at=T0 + 100)
    return root


def test_page_edges_are_the_links_the_crawl_follows(data_dir: Path) -> None:
    with open_stores(data_dir) as stores:
        assert list(page_edges(stores, agent="seinebot")) == PAGE_EDGES


def test_host_edges_count_page_edges_between_distinct_hosts(data_dir: Path) -> None:
    with open_stores(data_dir) as stores:
        assert host_edges(page_edges(stores, agent="seinebot")) == HOST_EDGES


def test_x_robots_tag_is_read_for_this_crawler_only(data_dir: Path) -> None:
    with PageStore(data_dir / "pages", read_only=True) as store:
        capture = store.get("http://f.example/")
        assert capture is not None
        assert capture_links(capture, agent="seinebot") == []
        assert capture_links(capture, agent="otherbot") == [A]


def test_revisit_records_give_no_links(data_dir: Path) -> None:
    with PageStore(data_dir / "pages", read_only=True) as store:
        duplicate = store.get("http://d.example/dup")
        assert duplicate is not None and duplicate.revisit_of == A
        assert duplicate.body  # get() reads the original's body, links and all
        assert capture_links(duplicate) == []


def test_links_over_the_url_limit_are_dropped(data_dir: Path) -> None:
    with PageStore(data_dir / "pages", read_only=True) as store:
        capture = store.get(B)
        assert capture is not None
        assert capture_links(capture, max_url=len("http://b.example/up.html")) == [
            "http://b.example/up.html"
        ]


def test_cli_writes_page_and_host_edge_lists(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["export", "--links", "--data-dir", str(data_dir)]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [f"{s}\t{t}" for s, t in PAGE_EDGES]
    assert f"{len(PAGE_EDGES)} edges" in captured.err
    out = tmp_path / "hosts.tsv"
    args = ["export", "--links", "--hosts", "--out", str(out), "--data-dir", str(data_dir)]
    assert main(args) == 0
    assert out.read_text("utf-8").splitlines() == [f"{s}\t{t}\t{n}" for s, t, n in HOST_EDGES]


def test_cli_user_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "--links", "--data-dir", str(tmp_path / "none")]) == 1
    assert capsys.readouterr().err == f"seine export: no page store under {tmp_path / 'none'}\n"
    assert main(["export", "--cdxj", "--hosts", "--data-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err == "seine export: --hosts goes with --links\n"
    with pytest.raises(SystemExit) as exc:
        main(["export", "--cdxj", "--links", "--data-dir", str(tmp_path)])
    assert exc.value.code == 2
