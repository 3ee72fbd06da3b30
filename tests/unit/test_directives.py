"""X-Robots-Tag and the Link header's canonical (streams/core/directives.py)."""

from __future__ import annotations

import pytest

from streams.core.directives import Directives, canonical_from_link, x_robots_tag

AGENT = "seinebot"


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([], Directives()),
        (["noindex"], Directives(noindex=True)),
        (["NoIndex, NoFollow"], Directives(noindex=True, nofollow=True)),
        (["none"], Directives(noindex=True, nofollow=True)),
        (["all"], Directives()),
        (["noarchive"], Directives(noarchive=True)),
        # several headers add up
        (["noindex", "nofollow"], Directives(noindex=True, nofollow=True)),
        # scoped to this crawler, or to another one
        (["seinebot: noindex"], Directives(noindex=True)),
        (["SeineBot: nofollow, noarchive"], Directives(nofollow=True, noarchive=True)),
        (["googlebot: noindex"], Directives()),
        (["googlebot: noindex", "nofollow"], Directives(nofollow=True)),
        # a directive with a value is no scope
        (["unavailable_after: 25 Jun 2010 15:00:00 PST"], Directives()),
        (["max-snippet: 20, noindex"], Directives(noindex=True)),
        (["noindex, unavailable_after: 25 Jun 2010"], Directives(noindex=True)),
        # unknown words change nothing
        (["nothing-we-know, indexifembedded"], Directives()),
        ([" , ,"], Directives()),
    ],
)
def test_x_robots_tag(values: list[str], expected: Directives) -> None:
    assert x_robots_tag(values, AGENT) == expected


def test_a_huge_header_is_read_bounded() -> None:
    assert x_robots_tag(["x" * 10_000_000 + ", noindex"], AGENT) == Directives()
    assert x_robots_tag(["noindex, " + "x" * 10_000_000], AGENT) == Directives(noindex=True)


def test_directives_combine() -> None:
    assert Directives(noindex=True) | Directives(nofollow=True) == Directives(True, True, False)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([], None),
        (['<https://a.example/page>; rel="canonical"'], "https://a.example/page"),
        (["</page>; rel=canonical"], "/page"),
        (
            ['<https://a.example/p2>; rel="next", <https://a.example/c>; rel="canonical"'],
            "https://a.example/c",
        ),
        (['<https://a.example/c>; rel="alternate canonical"'], "https://a.example/c"),
        (['<https://a.example/c>; title="x"; REL="Canonical"'], "https://a.example/c"),
        (['<https://a.example/a>; rel="alternate"; hreflang="de"'], None),
        (['<>; rel="canonical"'], None),
        (["garbage without brackets; rel=canonical"], None),
    ],
)
def test_canonical_from_link(values: list[str], expected: str | None) -> None:
    assert canonical_from_link(values) == expected
