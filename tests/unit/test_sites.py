"""Sites: ids, registry keys, first-seen canonical host forms, and the url-filter/seeds wiring.

The pipeline test (tests/integration/test_www_equivalence.py) shows the rule holds
end to end; these pin each rule on its own, with a dict standing in for the table.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, MutableMapping
from typing import Any

import mmh3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import topology
from streams.core.filters import FilterConfig
from streams.core.provenance import Via
from streams.core.records import UrlBatch, UrlCandidate
from streams.core.sites import (
    SiteInfo,
    SiteRegistry,
    registry_key,
    site_id,
    split_host,
    url_id,
)
from streams.core.urls import canonical, site_key
from streams.stages import seeds as seeds_stage
from streams.stages import url_filter
from streams.stages.url_filter import registry_for

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class CountingTable(MutableMapping[str, Any]):
    """A dict that counts writes: each write is a changelog message in the real table."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.writes = 0
        self.reads = 0

    def __getitem__(self, key: str) -> Any:
        self.reads += 1
        return self.data[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.writes += 1
        # What Faust does to a table value: a JSON round trip.
        self.data[key] = json.loads(json.dumps(value))

    def __delitem__(self, key: str) -> None:
        del self.data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


# ----------------------------------------------------------------------------- ids


def test_site_id_is_a_stable_63_bit_hash_of_the_site_key() -> None:
    # Pinned: ids are stored (registry keys, tables), so they must never change.
    assert site_id("example.com") == 5263683394119058897
    low64 = mmh3.hash128(b"example.com", 0, x64arch=True) & ((1 << 64) - 1)
    assert site_id("example.com") == low64 & ((1 << 63) - 1)
    ids = {site_id(f"site-{i}.test") for i in range(5000)}
    assert len(ids) == 5000
    assert all(0 <= i < 1 << 63 for i in ids)
    assert any(i >= 1 << 62 for i in ids)  # the whole 63-bit range is used


def test_www_and_bare_host_have_one_site_id() -> None:
    assert site_id(site_key("www.example.com")) == site_id(site_key("example.com"))
    assert site_id(site_key("example.com")) != site_id(site_key("example.org"))
    registry = SiteRegistry({})
    assert registry.site_id_of("http://www.example.com:8080/a") == site_id("example.com")


def test_url_id_is_the_64_bit_murmur_hash_of_the_canonical_url() -> None:
    url = "http://example.com/"
    assert url_id(url) == 11571728257177965048  # pinned
    assert url_id(url) == mmh3.hash128(url.encode(), 0, x64arch=True) & ((1 << 64) - 1)
    ids = {url_id(f"http://a.test/p{i}") for i in range(5000)}
    assert len(ids) == 5000 and max(ids) >= 1 << 63  # unsigned: the top bit is used


@pytest.mark.parametrize(
    ("url", "parts"),
    [
        ("http://example.com/a?b", ("http://", "example.com", "/a?b")),
        ("https://www.example.com:8443/", ("https://", "www.example.com", ":8443/")),
        ("http://user:pw@example.com:81/x", ("http://user:pw@", "example.com", ":81/x")),
        ("http://example.com?q=1", ("http://", "example.com", "?q=1")),
        ("http://example.com", ("http://", "example.com", "")),
        ("http://[::1]:8080/p", ("http://", "[::1]", ":8080/p")),
        ("http://127.0.0.1/p", ("http://", "127.0.0.1", "/p")),
        ("not a url", None),
        ("http:///nohost", None),
        ("http://[::1/", None),
    ],
)
def test_split_host(url: str, parts: tuple[str, str, str] | None) -> None:
    assert split_host(url) == parts


def test_registry_key_is_site_id_then_hash_of_the_url_without_its_host() -> None:
    sid = site_id("example.com")
    key = registry_key(sid, "http://example.com/a?x=1")
    assert len(key) == 16
    assert key[:8] == sid.to_bytes(8, "big")
    rest = mmh3.hash64(b"http:///a?x=1", 0, signed=False)[0]
    assert key[8:] == rest.to_bytes(8, "big")
    # The host is not in the hash; scheme, port, path and query are.
    assert registry_key(sid, "http://www.example.com/a?x=1") == key
    assert registry_key(sid, "https://example.com/a?x=1") != key
    assert registry_key(sid, "http://example.com:8080/a?x=1") != key
    assert registry_key(sid, "http://example.com/a?x=2") != key
    assert registry_key(sid, "http://example.com/a/?x=1") != key


def test_registry_keys_keep_each_sites_urls_contiguous_when_sorted() -> None:
    urls = [f"http://{h}.test/{p}" for h in ("a", "b", "c", "www.d", "e") for p in range(200)]
    keyed = sorted((registry_key(site_id(site_key(u.split("/")[2])), u), u) for u in urls)
    order = [u.split("/")[2] for _, u in keyed]
    runs = [h for i, h in enumerate(order) if i == 0 or order[i - 1] != h]
    assert sorted(runs) == sorted(set(order))  # each site exactly one run
    ids = [int.from_bytes(k[:8], "big") for k, _ in keyed]
    assert ids == sorted(ids)  # big-endian bytes sort as the numbers


# ----------------------------------------------------------------------- registry


def test_first_form_met_is_canonical_and_the_other_is_recorded_as_alias() -> None:
    table = CountingTable()
    registry = SiteRegistry(table)
    info = registry.register("example.com")
    assert info == SiteInfo(site_id("example.com"), "example.com", "example.com")
    info = registry.register("WWW.Example.com")
    assert info.canonical == "example.com"
    assert info.aliases == ("www.example.com",)
    assert info.forms == ("example.com", "www.example.com")
    assert table.data["example.com"] == {
        "id": site_id("example.com"),
        "canonical": "example.com",
        "aliases": ["www.example.com"],
        "settled": False,
    }


def test_www_form_first_makes_it_canonical() -> None:
    registry = SiteRegistry({})
    assert registry.register("www.example.com").canonical == "www.example.com"
    assert registry.register("example.com").aliases == ("example.com",)
    assert registry.canonicalize("http://example.com/a") == "http://www.example.com/a"


def test_known_forms_write_nothing_again() -> None:
    table = CountingTable()
    registry = SiteRegistry(table)
    for _ in range(3):
        registry.register("example.com")
        registry.register("www.example.com")
        registry.canonicalize("http://www.example.com/p")
    assert table.writes == 2  # the site, then its alias


def test_a_second_registry_over_the_same_table_agrees() -> None:
    """Another worker (or this one after a restart) reads the forms from the table."""
    table = CountingTable()
    SiteRegistry(table).register("www.example.com")
    other = SiteRegistry(table)
    assert other.canonicalize("http://example.com/x") == "http://www.example.com/x"
    assert other.get("example.com") == SiteInfo(
        site_id("example.com"), "example.com", "www.example.com", ("example.com",)
    )
    assert other.get("unknown.test") is None


@pytest.mark.parametrize(
    ("first", "url", "expected"),
    [
        # scheme, userinfo, port, path and query are kept; only the host changes
        (
            "example.com",
            "https://www.example.com:8443/a/b/?q=1&r",
            "https://example.com:8443/a/b/?q=1&r",
        ),
        ("example.com", "http://u:p@www.example.com/x", "http://u:p@example.com/x"),
        ("www.example.com", "http://example.com", "http://www.example.com/"),
        ("www.example.com", "http://example.com?x", "http://www.example.com/?x"),
        # non-canonical spellings are canonicalised first
        ("example.com", "HTTP://WWW.EXAMPLE.COM:80/%7Ea#frag", "http://example.com/~a"),
        # other sites, IPs and sub-domains other than www. are untouched
        ("example.com", "http://www.example.org/", "http://www.example.org/"),
        ("example.com", "http://shop.example.com/", "http://shop.example.com/"),
        ("example.com", "http://127.0.0.1:8080/", "http://127.0.0.1:8080/"),
        ("example.com", "http://[::1]/", "http://[::1]/"),
    ],
)
def test_canonicalize_rewrites_only_the_host(first: str, url: str, expected: str) -> None:
    registry = SiteRegistry({})
    registry.register(first)
    assert registry.canonicalize(url) == expected


@pytest.mark.parametrize("bad", ["", "not a url", "mailto:a@b.c", "http://", "/relative"])
def test_canonicalize_refuses_urls_without_a_host(bad: str) -> None:
    with pytest.raises(ValueError):
        SiteRegistry({}).canonicalize(bad)


def test_a_redirect_settles_the_form_once() -> None:
    table = CountingTable()
    registry = SiteRegistry(table)
    registry.register("example.com")
    info = registry.prefer("www.example.com")
    assert (info.canonical, info.aliases, info.settled) == (
        "www.example.com",
        ("example.com",),
        True,
    )
    assert registry.canonicalize("http://example.com/a") == "http://www.example.com/a"
    # A server redirecting back does not flip it again.
    assert registry.prefer("example.com").canonical == "www.example.com"
    assert registry.canonicalize("http://example.com/b") == "http://www.example.com/b"
    # Preferring the canonical form just settles it; an unknown site starts settled.
    other = SiteRegistry({})
    other.register("a.test")
    assert other.prefer("a.test") == SiteInfo(site_id("a.test"), "a.test", "a.test", (), True)
    assert other.prefer("www.a.test").canonical == "a.test"
    assert other.prefer("www.b.test") == SiteInfo(
        site_id("b.test"), "b.test", "www.b.test", (), True
    )


def test_a_stale_cache_never_overwrites_the_table() -> None:
    """Worker A caches a site; worker B settles it by redirect; A meets the other form."""
    table = CountingTable()
    a = SiteRegistry(table)
    a.register("example.com")  # cached in A: canonical example.com, no alias
    SiteRegistry(table).prefer("www.example.com")
    a.register("www.example.com")  # not in A's cached forms: re-read, nothing to write
    assert table.data["example.com"]["canonical"] == "www.example.com"
    assert table.data["example.com"]["settled"] is True


def test_the_cache_is_bounded_and_can_be_off() -> None:
    table = CountingTable()
    small = SiteRegistry(table, cache_size=3)
    for i in range(10):
        small.register(f"s{i}.test")
        small.register(f"www.s{i}.test")
        assert len(small._cache) <= 3
    off = SiteRegistry(table, cache_size=0)
    reads = table.reads
    off.canonicalize("http://www.s1.test/")
    off.canonicalize("http://www.s1.test/")
    assert not off._cache and table.reads > reads
    assert table.data["s1.test"]["aliases"] == ["www.s1.test"]


# Not "www.<tld>": its bare form would be a TLD and its www form "www.www.<tld>",
# whose site key (one "www." removed) is "www.<tld>" -- not the pair this property is about.
hosts = st.from_regex(r"[a-z][a-z0-9]{0,8}\.(test|com|example)", fullmatch=True).filter(
    lambda host: not host.startswith("www.")
)
paths = st.from_regex(r"(/[A-Za-z0-9._~%-]{0,6}){0,4}(\?[a-z0-9=&]{0,8})?", fullmatch=True)


@FAST
@given(host=hosts, path=paths, www_first=st.booleans(), port=st.sampled_from(["", ":8080"]))
def test_both_forms_map_to_one_url_in_the_first_seen_form(
    host: str, path: str, www_first: bool, port: str
) -> None:
    registry = SiteRegistry({})
    bare = canonical(f"http://{host}{port}{path}")
    www = canonical(f"http://www.{host}{port}{path}")
    assert bare is not None and www is not None
    first, second = (www, bare) if www_first else (bare, www)
    mapped = registry.canonicalize(first)
    assert mapped == first  # the first form met is kept as it is
    assert registry.canonicalize(second) == mapped
    assert registry.canonicalize(mapped) == mapped  # idempotent
    assert canonical(mapped) == mapped  # still a canonical URL


# ------------------------------------------------------------- url-filter wiring


class FakeOutbox:
    def __init__(self) -> None:
        self.added: list[tuple[str, int, dict[str, Any]]] = []
        self.logs: list[dict[str, Any]] = []

    def add(self, spec: topology.TopicSpec, partition: int, item: dict[str, Any]) -> None:
        self.added.append((spec.name, partition, item))

    def log(self, record: dict[str, Any]) -> None:
        self.logs.append(record)

    @property
    def urls(self) -> list[str]:
        return [item["url"] for _, _, item in self.added]


def candidates(urls: list[str], via: str | None = "http://src.test/", depth: int = 1) -> UrlBatch:
    return {"urls": [{"url": u, "depth": depth, "priority": 0, "via": via} for u in urls]}


def test_url_filter_maps_every_form_to_the_first_seen_one() -> None:
    sites: dict[str, Any] = {}
    out = FakeOutbox()
    batch = candidates(
        [
            "http://www.example.com/a",
            "http://example.com/a",
            "http://EXAMPLE.com/b#x",
            "http://www.example.com/b",
        ]
    )
    url_filter.handle(5, batch, FilterConfig(), set(), sites, out)  # type: ignore[arg-type]
    # each form of one URL is one candidate, counting the links to it (for its tier)
    assert out.urls == ["http://www.example.com/a", "http://www.example.com/b"]
    assert [item["inlinks"] for _, _, item in out.added] == [2, 2]
    assert {(name, p) for name, p, _ in out.added} == {("url-seen", 5)}
    assert sites["example.com"]["aliases"] == ["example.com"]
    assert out.added[0][2]["via"] == "http://src.test/"  # the rest of the candidate is kept


def test_url_filter_merges_repeats_at_the_least_depth_but_keeps_seeds_apart() -> None:
    out = FakeOutbox()
    batch = {
        "urls": [
            {"url": "http://a.test/x", "depth": 3, "priority": 0, "via": "http://a.test/1"},
            {"url": "http://a.test/x", "depth": 2, "priority": 0, "via": "http://a.test/2"},
            {"url": "http://a.test/x", "depth": 4, "priority": 0, "via": "http://a.test/3"},
            {"url": "http://a.test/x", "depth": 0, "priority": 2, "via": "seed"},
            {"url": "http://a.test/y", "depth": 1, "priority": 0, "via": "http://a.test/1"},
        ]
    }
    url_filter.handle(0, batch, FilterConfig(), set(), {}, out)  # type: ignore[arg-type]
    got = [(i["url"], i["depth"], i.get("inlinks", 1), i["via"]) for _, _, i in out.added]
    assert got == [
        ("http://a.test/x", 2, 3, "http://a.test/1"),
        ("http://a.test/x", 0, 1, "seed"),
        ("http://a.test/y", 1, 1, "http://a.test/1"),
    ]


def test_url_filter_logs_rejections_and_maps_nothing_for_them() -> None:
    sites: dict[str, Any] = {}
    out = FakeOutbox()
    trap = "http://example.com/" + "a/" * 3
    url_filter.handle(0, candidates([trap, "mailto:x@y.z"]), FilterConfig(), set(), sites, out)  # type: ignore[arg-type]
    assert out.added == []
    assert [r["reason"] for r in out.logs] == [
        "trap guard: repeated-segment",
        "not a crawlable http(s) URL",
    ]
    assert sites == {}


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://example.com/" + "x" * 2030, "trap guard: too-long"),  # 2,049 characters
        ("http://example.com/cal/2024/2024/2024/", "trap guard: repeated-segment"),
        ("http://example.com/" + "/".join(f"d{i}" for i in range(21)), "trap guard: too-deep"),
    ],
)
def test_each_trap_guard_ends_in_the_crawl_log_with_its_reason(url: str, reason: str) -> None:
    sites: dict[str, Any] = {}
    out = FakeOutbox()
    url_filter.handle(
        0,
        candidates([url, "http://example.com/ok"]),
        FilterConfig(),
        set(),
        sites,
        out,  # type: ignore[arg-type]
    )
    assert out.urls == ["http://example.com/ok"]  # the batch's other URL carries on
    assert [(r["url"], r["stage"], r["outcome"], r["reason"]) for r in out.logs] == [
        (url, "url-filter", "filtered", reason)
    ]


def test_seeds_pass_same_host_and_define_the_form_but_not_the_trap_guard() -> None:
    sites: dict[str, Any] = {}
    out = FakeOutbox()
    config = FilterConfig(same_host=True)
    seeds = candidates(
        ["http://www.example.com/", "http://x.test/" + "".join(f"d{i}/" for i in range(25))],
        via="seed",
        depth=0,
    )
    url_filter.handle(0, seeds, config, set(), sites, out)  # type: ignore[arg-type]
    assert out.urls == ["http://www.example.com/"]
    assert out.added[0][2]["via"] == "seed"
    assert out.logs[0]["reason"] == "trap guard: too-deep"
    # a link, unlike a seed, must be in scope under --same-host
    url_filter.handle(0, candidates(["http://other.test/"]), config, set(), sites, out)  # type: ignore[arg-type]
    assert out.logs[-1]["reason"] == "off-site (--same-host)"
    url_filter.handle(0, candidates(["http://example.com/p"]), config, {"example.com"}, sites, out)  # type: ignore[arg-type]
    assert out.urls[-1] == "http://www.example.com/p"


def test_a_redirect_to_the_other_form_settles_the_site_but_a_link_does_not() -> None:
    sites: dict[str, Any] = {}
    out = FakeOutbox()
    config = FilterConfig()
    url_filter.handle(0, candidates(["http://example.com/"], via="seed"), config, set(), sites, out)  # type: ignore[arg-type]
    # a page of example.com linking to its www. form: mapped back, nothing settled
    link = candidates(["http://www.example.com/"], via="http://example.com/")
    url_filter.handle(0, link, config, set(), sites, out)  # type: ignore[arg-type]
    assert out.urls[-1] == "http://example.com/"
    assert sites["example.com"]["settled"] is False
    # the server redirects example.com/ to www.example.com/: that form wins
    redirect = candidates(["http://www.example.com/"], via=Via.REDIRECT + "http://example.com/")
    url_filter.handle(0, redirect, config, set(), sites, out)  # type: ignore[arg-type]
    assert out.urls[-1] == "http://www.example.com/"
    assert sites["example.com"]["canonical"] == "www.example.com"
    url_filter.handle(0, candidates(["http://example.com/q"]), config, set(), sites, out)  # type: ignore[arg-type]
    assert out.urls[-1] == "http://www.example.com/q"
    # a redirect to another site settles nothing
    other = candidates(["http://www.b.test/"], via=Via.REDIRECT + "http://a.test/")
    url_filter.handle(0, other, config, set(), sites, out)  # type: ignore[arg-type]
    assert sites["b.test"]["settled"] is False


def test_url_filter_keeps_one_registry_per_table() -> None:
    table: dict[str, Any] = {}
    assert registry_for(table) is registry_for(table)
    assert registry_for({}) is not registry_for(table)
    registry = SiteRegistry({})
    assert registry_for(registry) is registry


# ------------------------------------------------------------------ seeds wiring


class FakeContext:
    def host_partition(self, host: str) -> int:
        return len(site_key(host)) % 4


def test_seeds_go_to_url_filter_in_their_sites_partition() -> None:
    out = FakeOutbox()
    seeds_stage.handle(FakeContext(), b'{"url": "HTTP://WWW.Example.com/a#f", "priority": 3}', out)  # type: ignore[arg-type]
    assert out.added == [
        (
            "url-filter",
            len("example.com") % 4,
            {"url": "http://www.example.com/a", "depth": 0, "priority": 3, "via": "seed"},
        )
    ]
    with pytest.raises(seeds_stage.InvalidSeed):
        seeds_stage.handle(FakeContext(), b"javascript:alert(1)", out)  # type: ignore[arg-type]


def test_the_topology_says_seeds_feed_url_filter() -> None:
    spec = next(s for s in topology.STAGES if s.name == "seeds")
    assert spec.sinks == (topology.URL_FILTER, topology.DEAD_LETTERS)
    url_filter_spec = next(s for s in topology.STAGES if s.name == "url-filter")
    assert topology.URL_SEEN in url_filter_spec.sinks


def _reference_url_filter(
    partition: int,
    batch: dict[str, Any],
    config: FilterConfig,
    scope: set[str],
    sites: dict[str, Any],
    out: FakeOutbox,
) -> None:
    """url-filter's step as it was before its loop was flattened (at 3141602): one
    filter_url call, redirect settling and merge per candidate."""
    from dataclasses import replace

    from streams.core.filters import Rejection, filter_url
    from streams.stages.context import crawl_log_record

    registry = registry_for(sites)
    seed_config = replace(config, same_host=False)
    passed: dict[Any, dict[str, Any]] = {}
    for candidate in batch["urls"]:
        via = candidate.get("via")
        verdict = filter_url(
            candidate["url"], candidate["depth"], seed_config if via == Via.SEED else config, scope
        )
        if isinstance(verdict, Rejection):
            out.log(
                crawl_log_record(
                    candidate["url"][:4096],
                    "url-filter",
                    "filtered",
                    reason=verdict.reason,
                    depth=candidate["depth"],
                )
            )
            continue
        url_filter._settle_by_redirect(registry, verdict, via)
        accepted = {**candidate, "url": registry.canonicalize(verdict, is_canonical=True)}
        via = accepted.get("via") or ""
        if via == Via.SEED or via.startswith(Via.REDIRECT):
            passed[(id(accepted),)] = accepted
            continue
        key = (accepted["url"], accepted.get("kind"))
        first = passed.get(key)
        if first is None:
            passed[key] = accepted
            continue
        first["inlinks"] = int(first.get("inlinks", 1)) + int(accepted.get("inlinks", 1))
        first["depth"] = min(int(first["depth"]), int(accepted["depth"]))
        first["priority"] = max(int(first["priority"]), int(accepted["priority"]))
    for candidate in passed.values():
        out.add(topology.URL_SEEN, partition, candidate)


@pytest.mark.parametrize(
    "config",
    [FilterConfig(), FilterConfig(max_depth=2), FilterConfig(same_host=True)],
    ids=["default", "max-depth", "same-host"],
)
def test_url_filter_answers_as_its_reference_step(config: FilterConfig) -> None:
    """Differential: random batches (repeats in several host forms, seeds, redirect
    targets on either form, sitemaps, rejects, with and without optional fields)
    through url-filter and through its step as it was: the same candidates, crawl-log
    records and site records."""
    import random

    rng = random.Random(5)
    hosts = ["a.test", "www.a.test", "b.test", "www.c.test", "c.test", "d.test"]
    paths = ["/", "/x", "/y?q=1", "/x#f", "/cal/1/1/1/", "/" + "z/" * 25, "/é"]
    vias: list[str | None] = [
        "http://a.test/",
        "http://b.test/p",
        "seed",
        None,
        "",
        "redirect:http://a.test/",
        "redirect:http://www.c.test/",
        "redirect:http://b.test/",
    ]
    ours: tuple[dict[str, Any], FakeOutbox] = ({}, FakeOutbox())
    theirs: tuple[dict[str, Any], FakeOutbox] = ({}, FakeOutbox())
    scope = {"a.test", "c.test"}
    for _ in range(150):
        batch: list[UrlCandidate] = []
        for _ in range(rng.randrange(1, 30)):
            url = rng.choice(["http://", "https://", "HTTP://", "mailto:"]) + rng.choice(hosts)
            item: UrlCandidate = {
                "url": url + rng.choice(paths),
                "depth": rng.randrange(0, 4),
                "priority": rng.randrange(0, 3),
                "via": rng.choice(vias),
            }
            if rng.random() < 0.7:
                item["inlinks"] = rng.randrange(1, 4)
            if rng.random() < 0.7:
                item["kind"] = rng.choice(["page", "page", "sitemap"])
            batch.append(item)
        partition = rng.randrange(4)
        url_filter.handle(
            partition,
            {"urls": [UrlCandidate(**c) for c in batch]},
            config,
            scope,
            ours[0],
            ours[1],  # type: ignore[arg-type]
        )
        _reference_url_filter(partition, {"urls": [dict(c) for c in batch]}, config, scope, *theirs)
    assert ours[1].added == theirs[1].added
    untimed = [
        [{k: v for k, v in r.items() if k != "at"} for r in o.logs] for o in (ours[1], theirs[1])
    ]
    assert untimed[0] == untimed[1]
    assert ours[0] == theirs[0]
    assert len(ours[1].added) > 500 and ours[1].logs  # it saw both kinds of outcome
