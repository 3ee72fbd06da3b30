"""The full-text index (streams/index/): upserts and deletions by id, boosts, URL
tokens, identifiers, lenient queries, snippets, and the merge over workers' indexes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from streams.index.fulltext import FullTextIndex, dotted_names
from streams.index.search import CrawlSearch, index_paths


def doc(url: str, *, title: str = "", text: str = "", **more: Any) -> dict[str, Any]:
    return {"url": url, "title": title, "text": text, "fetched_at": 1.0, **more}


@pytest.fixture
def index(tmp_path: Path) -> FullTextIndex:
    return FullTextIndex(tmp_path / "search", writable=True)


def urls(index: FullTextIndex, query: str) -> list[str]:
    return [hit.url for hit in index.search(query)]


def test_nothing_is_searchable_before_a_commit(index: FullTextIndex) -> None:
    index.apply("http://a/1", doc("http://a/1", text="zebra"))
    assert urls(index, "zebra") == []
    assert index.commit() == 1
    assert urls(index, "zebra") == ["http://a/1"]


def test_an_id_holds_one_document_and_a_tombstone_deletes_it(index: FullTextIndex) -> None:
    index.apply("http://a/1", doc("http://a/1", text="zebra"))
    index.commit()
    index.apply("http://a/1", doc("http://a/1", text="giraffe"))
    index.commit()
    assert urls(index, "zebra") == [] and urls(index, "giraffe") == ["http://a/1"]
    assert index.num_docs() == 1
    index.apply("http://a/1", None)
    index.apply("http://never/sent", None)  # a deletion of an unknown id: a no-op
    index.commit()
    assert urls(index, "giraffe") == [] and index.num_docs() == 0


def test_title_and_anchors_outweigh_text(index: FullTextIndex) -> None:
    index.apply("http://a/text", doc("http://a/text", text="kestrel falcon hawk owl"))
    index.apply("http://a/title", doc("http://a/title", title="kestrel", text="falcon hawk owl"))
    index.apply(
        "http://a/anchor",
        doc("http://a/anchor", text="falcon hawk owl sparrow", anchors=["kestrel"]),
    )
    index.commit()
    assert urls(index, "kestrel") == ["http://a/title", "http://a/anchor", "http://a/text"]


def test_url_words_and_identifiers_are_searchable(index: FullTextIndex) -> None:
    index.apply(
        "http://docs.example/library/json.html",
        doc("http://docs.example/library/json.html", text="Use json.dumps(obj, indent=2)."),
    )
    index.apply("http://docs.example/os.html", doc("http://docs.example/os.html", text="dumps"))
    index.commit()
    assert urls(index, "library")[0] == "http://docs.example/library/json.html"
    assert urls(index, "json.dumps") == ["http://docs.example/library/json.html"]


def test_a_dotted_name_finds_the_page_that_defines_it_in_parts(index: FullTextIndex) -> None:
    # Sphinx prints `extend(iterable)` under `class array.array`: never the name whole
    index.apply(
        "http://d/array.html",
        doc(
            "http://d/array.html",
            title="array — Efficient arrays of numeric values",
            text="class array.array(typecode) extend(iterable) Append items from iterable.",
        ),
    )
    index.apply("http://d/list.html", doc("http://d/list.html", text="A list can extend a list."))
    index.commit()
    assert urls(index, "array.array.extend") == ["http://d/array.html"]
    assert urls(index, '"array.array.extend"') == []  # quoted: the exact phrase only


@pytest.mark.parametrize(
    ("query", "parsed"),
    [
        ("os.path.join", '(+os +path +join) "os.path.join"'),
        ("asyncio.run x", '(+asyncio +run) "asyncio.run" x'),
        ('"use os.path here"', '"use os.path here"'),
        ("title:os.path -a.b +c.d", "title:os.path -a.b +c.d"),
        ("example.com/a.b", "example.com/a.b"),
        ("plain words", "plain words"),
    ],
)
def test_dotted_names_outside_quotes_ask_for_their_parts(query: str, parsed: str) -> None:
    assert dotted_names(query) == parsed


@pytest.mark.parametrize(
    "query", ['title:"unclosed', "a:b:c", "((", "AND", "-", "\x00", "x" * 5000]
)
def test_a_malformed_query_is_no_error(index: FullTextIndex, query: str) -> None:
    index.apply("http://a/1", doc("http://a/1", text="zebra"))
    index.commit()
    assert isinstance(index.search(query), list)


def test_snippets_mark_the_matches_and_escape_the_rest(index: FullTextIndex) -> None:
    index.apply("http://a/1", doc("http://a/1", text="the <script> zebra\nruns fast"))
    index.commit()
    (hit,) = index.search("zebra")
    assert "\n" not in hit.snippet
    assert [hit.snippet[a:b] for a, b in hit.highlights] == ["zebra"]
    assert hit.snippet_html() == "the &lt;script&gt; <b>zebra</b> runs fast"
    as_json = hit.as_json("zebra", 1)
    assert set(as_json) >= {"query", "rank", "url", "title", "score", "snippet"}


def test_a_hit_on_the_title_only_shows_the_start_of_the_text(index: FullTextIndex) -> None:
    index.apply("http://a/1", doc("http://a/1", title="zebra", text="word " * 100))
    index.commit()
    (hit,) = index.search("zebra")
    assert hit.snippet.startswith("word word") and len(hit.snippet) < 200


def test_a_read_only_index_that_is_not_there_says_so(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no search index"):
        FullTextIndex(tmp_path / "nothing")
    with pytest.raises(FileNotFoundError, match="no search index under"):
        CrawlSearch(tmp_path)


def test_a_crawl_search_merges_workers_and_keeps_the_newest_copy(tmp_path: Path) -> None:
    first = FullTextIndex(tmp_path / "worker-0" / "search", writable=True)
    second = FullTextIndex(tmp_path / "worker-1" / "search", writable=True)
    first.apply("http://a/1", doc("http://a/1", text="zebra old", fetched_at=1.0))
    first.apply("http://a/2", doc("http://a/2", text="zebra zebra zebra"))
    # the partition moved: the second worker indexed a newer copy of http://a/1
    second.apply("http://a/1", doc("http://a/1", text="zebra new", fetched_at=5.0))
    first.commit()
    second.commit()
    assert len(index_paths(tmp_path)) == 2
    crawl = CrawlSearch(tmp_path)
    hits = crawl.search("zebra")
    assert sorted(hit.url for hit in hits) == ["http://a/1", "http://a/2"]
    (one,) = [hit for hit in hits if hit.url == "http://a/1"]
    assert "new" in one.snippet
    assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)
    assert len(crawl.search("zebra", limit=1)) == 1
