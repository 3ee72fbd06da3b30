"""www-equivalence end to end: a site met as ``www.<host>`` or ``<host>`` is fetched in one form.

Half the demo hosts also link to themselves as ``www.<host>`` (same bytes). Some of
those are seeded in their ``www.`` form, the rest bare, so both directions of the
first-seen rule are exercised: links in the other form must map onto the seed's
form. The truth comes from two independent places: the demo server's request log
(no path asked for under both forms, every request of a site in one form) and the
page store (every reachable page stored once, under the form met first).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from urllib.parse import urlsplit

from streams.core.urls import site_key
from streams.demo.server import read_request_log, start_server_process
from streams.demo.webgen import WebSpec
from streams.kafka.broker import EmbeddedBroker
from streams.store.storeset import open_stores
from tests.integration.conftest import run_crawl

SPEC = WebSpec(hosts=10, pages_per_host=24, seed=11, www_alias_fraction=0.5)


def test_each_page_is_fetched_once_in_the_form_met_first(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    server = start_server_process(SPEC, tmp_path / "requests.jsonl", tmp_path / "web")
    try:
        web = server.web
        aliased = sorted(n[4:] for n in web.all_host_names() if n.startswith("www."))
        assert len(aliased) >= 2, "the spec must give hosts with a www. alias"
        # The crawler reaches the www. names through the server's --resolve map.
        assert {f"www.{h}" for h in aliased} <= set(server.resolve)
        www_first = set(aliased[::2])  # seeded as www.<host>; the rest of the hosts bare
        seeds = [
            seed.replace("http://", "http://www.", 1)
            if urlsplit(seed).hostname in www_first
            else seed
            for seed in server.seeds
        ]

        def first_form(url: str) -> str:
            host = urlsplit(url).hostname or ""
            return url.replace("http://", "http://www.", 1) if host in www_first else url

        truth = web.reachable_allowed(seeds, www_equivalent=True)  # bare host forms
        expected = {first_form(url) for url in truth}

        # The test means something only if pages link to the form *not* seeded.
        def links_to_the_other_form(url: str) -> int:
            parts = urlsplit(url)
            target = parts.path + (f"?{parts.query}" if parts.query else "")
            return sum(
                1
                for link in web.links_of(parts.hostname or "", target)
                if link.host is not None
                and site_key(link.host) in aliased_set
                and link.host.startswith("www.") != (site_key(link.host) in www_first)
            )

        aliased_set = set(aliased)
        other_form_links = sum(links_to_the_other_form(url) for url in truth)
        assert other_form_links > 0

        run = run_crawl(
            broker, tmp_path / "data", seeds, partitions=2, resolve=server.resolve, timeout=120
        )
        assert run.returncode == 0, run.stderr[-3000:]
    finally:
        assert server.stop() == 0  # flushes the request log

    with open_stores(run.data_dir) as store:
        stored = set(store.urls())
        multi = [u for u in stored if sum(len(s.captures(u)) for s in store.stores) != 1]
    assert stored == expected, (
        f"missing {sorted(expected - stored)[:5]}, extra {sorted(stored - expected)[:5]}"
    )
    assert not multi, multi[:5]

    requests = read_request_log(tmp_path / "requests.jsonl")
    forms: dict[str, set[str]] = defaultdict(set)
    asked: dict[tuple[str, str], list[str]] = defaultdict(list)
    for r in requests:
        forms[site_key(r["host"])].add(r["host"])
        if r["path"] != "/robots.txt":
            asked[(site_key(r["host"]), r["path"])].append(r["host"])
    twice = {key: hosts for key, hosts in asked.items() if len(hosts) > 1}
    assert not twice, f"pages requested more than once: {sorted(twice.items())[:5]}"
    assert sum(len(h) for h in asked.values()) == len(expected)
    for site, hosts in forms.items():
        want = f"www.{site}" if site in www_first else site
        assert hosts == {want}, f"{site} was asked for as {sorted(hosts)}"
