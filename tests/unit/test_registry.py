"""The URL registry: exact membership, site-grouped keys, batched writes, prefix scans."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rocksdict import Options, Rdict

import streams.core.registry as registry_module
import streams.store.url_registry as url_registry_module
from streams.core.sites import registry_key, site_id, url_id
from streams.core.urls import site_key
from streams.store.url_registry import UrlRegistry


@pytest.fixture
def reg(tmp_path: Path):
    with UrlRegistry(tmp_path / "registry") as registry:
        yield registry


def sid(host: str) -> int:
    return site_id(site_key(host))


def test_add_many_says_which_urls_are_new(reg: UrlRegistry) -> None:
    first = ["http://a.test/", "http://a.test/x", "http://b.test/"]
    assert reg.add_many(first) == [True, True, True]
    assert reg.add_many(["http://a.test/x", "http://c.test/", "http://a.test/"]) == [
        False,
        True,
        False,
    ]
    assert reg.add_many([]) == []


def test_a_repeat_within_one_batch_is_new_only_once(reg: UrlRegistry) -> None:
    assert reg.add_many(["http://a.test/1", "http://a.test/1", "http://a.test/2"]) == [
        True,
        False,
        True,
    ]


def test_membership(reg: UrlRegistry) -> None:
    reg.add_many(["http://a.test/x?q=1"])
    assert "http://a.test/x?q=1" in reg
    assert "http://a.test/x?q=2" not in reg
    assert "http://www.a.test/x?q=1" not in reg  # exact: the site mapping is upstream
    assert "no host" not in reg
    assert 42 not in reg
    assert reg.url_id_of("http://a.test/x?q=1") == url_id("http://a.test/x?q=1")
    assert reg.url_id_of("http://a.test/other") is None


def test_the_record_is_the_registry_key_to_url_id_and_url(tmp_path: Path) -> None:
    url = "http://www.a.test:8080/p?q"
    with UrlRegistry(tmp_path / "r") as reg:
        reg.add_many([url])
    db = Rdict(str(tmp_path / "r"), Options(raw_mode=True))
    try:
        items = list(db.items())
    finally:
        db.close()
    assert items == [
        (registry_key(sid("a.test"), url), url_id(url).to_bytes(8, "big") + url.encode())
    ]


def test_a_sites_urls_are_one_prefix_scan(reg: UrlRegistry) -> None:
    sites = ["a.test", "b.test", "www.c.test", "d.test"]
    urls = {h: [f"http://{h}/p{i}?x={i % 3}" for i in range(300)] for h in sites}
    mixed = [u for i in range(300) for h in sites for u in [urls[h][i]]]
    assert all(reg.add_many(mixed))
    for host in sites:
        listed = list(reg.urls_of_site(sid(host)))
        assert sorted(listed) == sorted(urls[host])
        keys = [registry_key(sid(host), u) for u in listed]
        assert keys == sorted(keys)  # in key order
    assert list(reg.urls_of_site(sid("unknown.test"))) == []
    with pytest.raises(ValueError):
        list(reg.urls_of_site(-1))


def test_the_last_possible_site_id_scans_without_an_overflowing_bound(
    reg: UrlRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    top = (1 << 63) - 1
    monkeypatch.setattr(registry_module, "site_id", lambda key: top if key == "z.test" else 1)
    # key_of memoises keys: bypass it while site ids are faked (and cache no fake key)
    unmemoised = registry_module.key_of.__wrapped__
    monkeypatch.setattr(registry_module, "key_of", unmemoised)
    monkeypatch.setattr(url_registry_module, "key_of", unmemoised)
    reg.add_many(["http://z.test/a", "http://y.test/b"])
    assert list(reg.urls_of_site(top)) == ["http://z.test/a"]
    assert list(reg.urls_of_site(1)) == ["http://y.test/b"]


def test_colliding_keys_stay_exact(reg: UrlRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two sites with one id share "/" keys: the stored URL tells them apart."""
    monkeypatch.setattr(registry_module, "site_id", lambda key: 7)
    # key_of memoises keys: bypass it while site ids are faked (and cache no fake key)
    unmemoised = registry_module.key_of.__wrapped__
    monkeypatch.setattr(registry_module, "key_of", unmemoised)
    monkeypatch.setattr(url_registry_module, "key_of", unmemoised)
    assert reg.add_many(["http://a.test/", "http://b.test/", "http://a.test/"]) == [
        True,
        True,
        False,
    ]
    assert reg.add_many(["http://b.test/", "http://c.test/"]) == [False, True]
    assert "http://a.test/" in reg and "http://b.test/" in reg and "http://c.test/" in reg
    assert "http://d.test/" not in reg
    assert sorted(reg.urls_of_site(7)) == ["http://a.test/", "http://b.test/", "http://c.test/"]


def test_writes_go_in_one_write_batch_per_call(
    reg: UrlRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    db = reg._db

    class Spy:
        def __getattr__(self, name: str) -> Any:
            calls.append(name)
            return getattr(db, name)

        def __setitem__(self, key: bytes, value: bytes) -> None:
            calls.append("put")
            db[key] = value

    monkeypatch.setattr(reg, "_db", Spy())
    assert reg.add_many([f"http://a.test/{i}" for i in range(500)]) == [True] * 500
    assert calls.count("write") == 1
    assert "put" not in calls
    assert calls.count("get") == 1  # one multi-get for the whole batch
    calls.clear()
    assert reg.add_many([f"http://a.test/{i}" for i in range(500)]) == [False] * 500
    assert "write" not in calls  # nothing new, nothing written


def test_a_url_without_a_host_writes_nothing(reg: UrlRegistry) -> None:
    with pytest.raises(ValueError):
        reg.add_many(["http://a.test/1", "not a url"])
    assert "http://a.test/1" not in reg


def test_it_persists_and_closes_once(tmp_path: Path) -> None:
    reg = UrlRegistry(tmp_path / "r")
    reg.add_many(["http://a.test/1"])
    reg.close()
    reg.close()
    with UrlRegistry(tmp_path / "r") as again:
        assert "http://a.test/1" in again
        assert again.add_many(["http://a.test/1", "http://a.test/2"]) == [False, True]


urls = st.lists(
    st.builds(
        lambda h, p: f"http://{h}/{p}",
        st.sampled_from(["a.test", "www.b.test", "c.test:8080", "127.0.0.1"]),
        st.text(alphabet="abc/?=", max_size=6),
    ),
    max_size=40,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batches=st.lists(urls, max_size=4))
def test_it_behaves_as_a_set(
    tmp_path_factory: pytest.TempPathFactory, batches: list[list[str]]
) -> None:
    model: set[str] = set()
    with UrlRegistry(tmp_path_factory.mktemp("r")) as reg:
        for batch in batches:
            expected = []
            for url in batch:
                expected.append(url not in model)
                model.add(url)
            assert reg.add_many(batch) == expected
        for url in model:
            assert url in reg
        listed = [
            u
            for host in ("a.test", "b.test", "c.test", "127.0.0.1")
            for u in reg.urls_of_site(sid(host))
        ]
        assert sorted(listed) == sorted(model)


def test_holds_says_what_url_of_says() -> None:
    """The registry compares a stored value's URL as bytes (no copy, no decode): the
    same answer as decoding it, for a URL that is a prefix of the stored one, a longer
    one, with and without a state, and non-ASCII."""
    from streams.core.registry import _holds, _value, url_of, with_state

    stored_urls = ["http://a.test/p", "http://a.test/p2", "http://é.test/ü", "http://a.test/"]
    values = [_value(u) for u in stored_urls]
    values += [with_state(v, {"s": "queued", "in": 2}) for v in values]
    values += [_value(u, b'{"r":1.5}') for u in stored_urls]
    asked = [*stored_urls, "http://a.test/p\x00x", "http://a.test", "http://a.test/p22", ""]
    for value in values:
        for url in asked:
            assert _holds(value, url.encode("utf-8")) == (url_of(value) == url), (value, url)


def _db_items(reg: UrlRegistry) -> list[tuple[bytes, bytes]]:
    return [(bytes(cast(bytes, k)), bytes(cast(bytes, v))) for k, v in reg._db.items()]


@pytest.mark.parametrize("cache_size", [4, 1 << 15])
def test_a_value_cache_changes_no_answer_and_is_never_stale(
    tmp_path: Path, cache_size: int
) -> None:
    """Differential: one random stream of registrations, in-link counts and states
    against a registry without a cache and one with (a tiny cache too, emptied again
    and again): the same answers, the same records on disk, and every cached record
    is the one on disk."""
    import random

    options = Options(raw_mode=True)
    options.create_if_missing(True)
    plain_db, cached_db = Rdict(str(tmp_path / "p"), options), Rdict(str(tmp_path / "c"), options)
    cache: dict[bytes, bytes] = {}
    plain, cached = UrlRegistry.over(plain_db), UrlRegistry.over(cached_db, cache, cache_size)
    rng = random.Random(11)
    pool = [f"http://h{i % 5}.test/p{i}" for i in range(60)]
    states: list[dict[str, Any]] = [
        {"s": "queued", "tier": 2, "q": 1, "depth": 1},
        {"s": "fetched", "status": 200, "in": 3},
        {"s": "fetching"},
        {"r": 5.0, "o": 2},
    ]
    try:
        for step in range(300):
            batch = rng.sample(pool, rng.randrange(1, 20))
            op = step % 4
            if op == 0:
                maybe = [rng.random() < 0.9 for _ in batch]
                # a "definitely new" promise is only kept for a URL not registered yet
                maybe = [m or u not in plain for m, u in zip(maybe, batch, strict=True)]
                found_p: dict[str, tuple[bytes, bytes]] = {}
                found_c: dict[str, tuple[bytes, bytes]] = {}
                keys = [registry_module.key_of(u) for u in batch]
                assert plain.add_keyed(batch, keys, maybe, found_p, b'{"r":1}') == (
                    cached.add_keyed(batch, keys, maybe, found_c, b'{"r":1}')
                )
                assert found_p == found_c
            elif op == 1:
                counts = {u: rng.randrange(1, 3) for u in batch}
                assert plain.add_inlinks(counts) == cached.add_inlinks(counts)
            elif op == 2:
                chosen = {u: rng.choice(states) for u in batch}
                assert plain.write_states(chosen) == cached.write_states(chosen)
            else:
                assert plain.states(batch) == cached.states(batch)
            assert len(cache) <= cache_size
            for key, value in cache.items():
                assert cached_db.get(key) == value
        assert _db_items(plain) == _db_items(cached)
    finally:
        plain_db.close()
        cached_db.close()


def test_a_cached_record_is_not_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    db = Rdict(str(tmp_path / "c"), options)
    urls = [f"http://a.test/{i}" for i in range(50)]
    try:
        UrlRegistry.over(db).add_many(urls)  # written, not cached
        reads: list[Any] = []

        class Spy:
            def __getattr__(self, name: str) -> Any:
                return getattr(db, name)

            def get(self, key: Any) -> Any:
                reads.append(key)
                return db.get(key)

        cached = UrlRegistry.over(Spy(), {})  # type: ignore[arg-type]
        assert cached.add_many(urls) == [False] * 50
        assert len(reads) == 1  # one multi-get fills the cache
        assert cached.add_many(urls) == [False] * 50
        cached.add_inlinks(dict.fromkeys(urls, 1))
        cached.set_states({u: {"s": "queued"} for u in urls})
        assert cached.states(urls) == {u: {"s": "queued", "in": 2} for u in urls}
        assert len(reads) == 1  # all later reads came from the cache
    finally:
        db.close()


def test_add_inlinks_grows_the_count_and_keeps_the_rest_of_the_record(tmp_path: Path) -> None:
    """Every shape a stored record can have (no state, an empty one, a stamp, a
    frontier state with and without a count, one that is not a JSON object): the
    record after is the URL id and URL as before, and the state with ``in`` grown
    by the links (from 1 when there was none), everything else kept."""
    import orjson

    from streams.core.registry import STATE_SEP, _value

    shapes: list[bytes | None] = [
        None,
        b"",
        b'{"r":5.5,"o":3}',
        b'{"s":"fetched","at":1.5,"status":200,"in":7}',
        b'{"s":"queued","tier":2,"q":4,"depth":1}',
        b"[1,2]",
        b"not json",
        b"{}",
    ]
    urls = [f"http://a.test/é{i}" for i in range(len(shapes))]
    with UrlRegistry(tmp_path / "r") as reg:
        reg.add_many(urls)
        for url, shape in zip(urls, shapes, strict=True):
            if shape is not None:
                key = registry_module.key_of(url)
                reg._db[key] = _value(url) + STATE_SEP + shape
        before = {u: reg._db[registry_module.key_of(u)] for u in urls}
        changes = reg.add_inlinks({u: i + 1 for i, u in enumerate(urls)})
        assert [c[0] for c in changes] == urls
        for i, (url, shape) in enumerate(zip(urls, shapes, strict=True)):
            old: Any = None
            if shape:
                try:
                    old = orjson.loads(shape)
                except ValueError:
                    old = None
            old = old if isinstance(old, dict) else None
            want = {**(old or {}), "in": int((old or {}).get("in", 1)) + i + 1}
            stored = reg._db[registry_module.key_of(url)]
            assert stored is not None
            assert stored == _value(url) + STATE_SEP + orjson.dumps(want)
            assert stored[:8] == before[url][:8]  # type: ignore[index]
            assert changes[i] == (url, old, want, orjson.dumps(want))
