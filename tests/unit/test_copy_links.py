"""Which exact duplicates keep their links (content-dedup → link-extract)."""

from __future__ import annotations

from streams.core.urls import copy_links_differ


def test_a_query_variant_of_the_same_page_links_where_the_page_does() -> None:
    assert not copy_links_differ("http://a.test/p.html?ref=x", "http://a.test/p.html", None)
    assert not copy_links_differ("http://a.test/p.html#top", "http://a.test/p.html", None)


def test_a_copy_on_another_host_or_file_links_elsewhere() -> None:
    assert copy_links_differ("http://b.test/p.html", "http://a.test/p.html", None)
    assert copy_links_differ("http://a.test/docs/q.html", "http://a.test/p.html", None)
    assert copy_links_differ("http://a.test/q.html", "http://a.test/p.html", "../")


def test_an_absolute_base_pins_both_copies_to_one_place() -> None:
    assert not copy_links_differ("http://b.test/p.html", "http://a.test/p.html", "http://a.test/")
