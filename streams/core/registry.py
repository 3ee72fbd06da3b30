"""The URL registry: every URL the crawl accepted, grouped by site, in RocksDB.

Why this shape
--------------
* **Key = site id (8 bytes, big-endian) + hash of the URL without its host
  (8 bytes)** (:func:`~streams.core.sites.registry_key`). RocksDB sorts keys as
  bytes, so a site's URLs form one contiguous key range: listing a site (recrawl,
  export, per-site budgets) is a prefix scan, not a full scan, and a site's keys
  sit in the same blocks, which keeps compaction and caching local.
* **Value = 8-byte URL id + the URL** (UTF-8), then, once the frontier has acted
  on the URL, ``\x00`` + its **crawl state** as compact JSON (see
  :func:`state_of`). The URL is kept so membership is exact: a 64-bit hash
  collision (or two sites whose 63-bit ids collide, which the key alone cannot
  tell apart) is detected by comparing URLs and resolved by probing the next key
  of the site's range, so a URL is never reported as seen because another URL
  shares its key. A canonical URL never holds a NUL (WHATWG percent-encodes it in
  every component and forbids it in hosts), so the separator is unambiguous.
* **Writes in batches.** url-seen handles URLs a batch at a time; one RocksDB
  WriteBatch per call to :meth:`UrlRegistry.add_many` (one WAL append, one
  memtable insert pass) instead of one put per URL, and the lookups before it are
  one multi-get.

Pure logic: no Kafka or Faust imports. The registry is local to one process; who
owns which partition, and recovery, are the caller's concern: in the crawl,
url-seen's Faust store (:mod:`streams.registry_table`) keeps one registry per
table partition over the database Faust opened for it (:meth:`UrlRegistry.over`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, cast

import orjson
from rocksdict import Options, Rdict, ReadOptions, WriteBatch

from streams.core.sites import registry_key, site_id, url_id
from streams.core.urls import host_of, site_key

__all__ = [
    "STICKY_FIELDS",
    "InlinkChange",
    "UrlRegistry",
    "key_of",
    "state_of",
    "url_of",
    "with_state",
]

#: Separates the URL from its crawl state in a registry value.
STATE_SEP = b"\x00"
#: State fields that outlive a state change (a URL's in-link count is not reset when
#: it is fetched); every other field describes the latest state only.
STICKY_FIELDS = ("in",)
#: How a sticky field starts in a state's JSON: an old state without any is not parsed.
_STICKY_NEEDLES = tuple(f'"{name}":'.encode() for name in STICKY_FIELDS)

#: What :meth:`UrlRegistry.add_inlinks` reports per URL: (URL, state before, state
#: after, the state after as stored).
InlinkChange = tuple[str, "dict[str, Any] | None", "dict[str, Any]", bytes]

#: Keys of one site tried after a collision before giving up (never reached in
#: practice: a second probe needs two 64-bit collisions within one site).
MAX_PROBES = 64
_SUFFIX_MASK = (1 << 64) - 1
#: Faust's own bookkeeping key in a table partition's database (16 bytes, like ours).
_FAUST_OFFSET_KEY = b"__faust\x00offset__"


#: URLs whose keys :func:`key_of` remembers (~300 bytes each: ~10 MB at most).
KEY_CACHE_SIZE = 1 << 15
#: Records a registry's value cache holds before it starts afresh (~450 bytes each
#: with the dict's own: ~15 MB at most); see :meth:`UrlRegistry.over`. url-seen's
#: store shares it out among the partitions a worker holds (:data:`VALUE_CACHE_TOTAL`).
VALUE_CACHE_SIZE = 1 << 15
#: Records all of one worker's value caches hold together (~30 MB): a worker that
#: holds many partitions gives each a smaller cache, not 15 MB apiece.
VALUE_CACHE_TOTAL = 1 << 16
#: The least a partition's cache holds however many partitions share the total.
VALUE_CACHE_MIN = 1 << 11

#: A registry's value cache: registry key -> stored value (see :meth:`UrlRegistry.over`).
ValueCache = dict[bytes, bytes]


@functools.lru_cache(maxsize=KEY_CACHE_SIZE)
def key_of(url: str) -> bytes:
    """The first-choice registry key of a URL (a collision moves it to a later key of
    the same site). Raises ValueError for a URL without a host.

    Memoised: a URL's key is asked for again and again — url-seen for every link to
    it, the frontier for each of its crawl states (queued, fetching, fetched) — and
    computing it (host, site id and URL hashes) cost more than a registry write
    (BENCHMARKS.md, crawl throughput). A pure function of the URL, so a cached key
    is always right; a failure (no host) is not cached.
    """
    host = host_of(url)
    if not host:
        raise ValueError(f"not an absolute URL with a host: {url[:200]!r}")
    return registry_key(site_id(site_key(host)), url)


def _next_probe(key: bytes) -> bytes:
    """The next key of the same site: the 8-byte suffix plus one, wrapping within the site."""
    suffix = (int.from_bytes(key[8:], "big") + 1) & _SUFFIX_MASK
    return key[:8] + suffix.to_bytes(8, "big")


def _value(url: str, stamp: bytes = b"") -> bytes:
    head = url_id(url).to_bytes(8, "big") + url.encode("utf-8")
    return head + STATE_SEP + stamp if stamp else head


def _holds(stored: bytes, raw_url: bytes) -> bool:
    """Does a stored value hold the URL whose UTF-8 bytes are `raw_url`? What
    ``url_of(stored) == url`` says, without copying and decoding the value."""
    end = 8 + len(raw_url)
    return (
        stored.startswith(raw_url, 8)
        and (len(stored) == end or stored[end] == 0)
        and STATE_SEP not in raw_url
    )


def url_of(value: bytes) -> str:
    """The URL of a stored value (8-byte URL id, the URL, then maybe its state)."""
    return bytes(value[8:]).split(STATE_SEP, 1)[0].decode("utf-8")


def state_of(value: bytes) -> dict[str, Any] | None:
    """The crawl state of a stored value, or None while the frontier has not acted on
    the URL (url-seen registered it; a record from before states were kept).

    A state is a small dict: ``s`` is one of ``queued`` (with ``tier``, ``depth``,
    and ``retry`` after a 429/503), ``fetching``, ``fetched`` (``status`` and the
    fetch ``outcome``: fetched, unchanged, redirect, sitemap ...), ``failed``
    (``outcome`` and ``reason``, ``backoff`` when the host was backed off),
    ``refused`` (``outcome``: robots-disallowed, host-budget, host-queue-full,
    robots-unavailable; ``reason``) or ``parked`` (the host was parked); ``at`` is
    when (Unix seconds) and ``in`` the in-link count seen so far.

    Before the frontier has acted (no ``s``), the state may hold url-seen's
    registration stamp instead: ``r``, when url-seen registered (or last re-sent)
    the URL, and ``o``, the offset of the url-seen message that did
    (:func:`~streams.core.urlstate.resend_due`); the frontier's first state
    replaces them.
    """
    parts = bytes(value[8:]).split(STATE_SEP, 1)
    if len(parts) < 2:
        return None
    try:
        state = orjson.loads(parts[1])
    except ValueError:
        return None
    return state if isinstance(state, dict) else None


def with_state(value: bytes, state: Mapping[str, Any]) -> bytes:
    """A stored value with its crawl state replaced by `state`, keeping the sticky
    fields of the old state that `state` does not set."""
    head, encoded = _with_state(bytes(value), state)
    return head + STATE_SEP + encoded


def _with_state(value: bytes, state: Mapping[str, Any]) -> tuple[bytes, bytes]:
    """(URL id + URL, the new state as stored: JSON) of :func:`with_state`.

    The old state is parsed only when it holds a sticky field: most writes (queued,
    fetching, fetched) replace a state without one, and parsing it cost as much as
    encoding the new one. The encoded state is returned so the caller's changelog
    record reuses it instead of encoding the state a second time.
    """
    head, sep, raw = value[8:].partition(STATE_SEP)
    if sep and any(needle in raw for needle in _STICKY_NEEDLES):
        old = state_of(value)
        if old:
            kept = {k: old[k] for k in STICKY_FIELDS if k in old and k not in state}
            if "in" in old and "in" in state and int(old["in"]) > int(state["in"]):
                kept["in"] = old["in"]  # a count only grows
            if kept:
                state = {**state, **kept}
    return value[:8] + head, orjson.dumps(state)


class UrlRegistry:
    """A RocksDB table of URLs keyed by :func:`~streams.core.sites.registry_key`.

    ``with UrlRegistry(path) as reg: reg.add_many(urls)``. URLs are expected in
    canonical form (and, in the crawl, already mapped to their site's canonical
    host): the registry compares strings, it does not normalise them.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        self._db = Rdict(str(self.path), options)
        self._closed = False
        self._cache: ValueCache | None = None
        self._cache_size = VALUE_CACHE_SIZE

    @classmethod
    def over(
        cls, db: Rdict, cache: ValueCache | None = None, cache_size: int | None = None
    ) -> UrlRegistry:
        """A registry over a database someone else opened (in raw mode) and closes.

        Faust's rocksdb store opens one database per table partition and owns its
        lifetime (rebalances open and drop them); url-seen's store wraps each in a
        registry. :meth:`close` on such a registry does not close the database.

        `cache`, if given, is a read-through, write-through cache of the database's
        records (key -> stored value) that the caller keeps for as long as every
        write to the database goes through registries over it with this same cache:
        url-seen's store keeps one per partition database and drops it when the
        partition is revoked or assigned. A RocksDB read of a record costs 2-4 µs
        (a skiplist walk in a memtable of every version written), a dict lookup
        ~0.1; url-seen reads every linked URL's record and the frontier every
        record it gives a state to, mostly the same few thousand records of a
        partition again and again. It holds at most `cache_size` records (default
        :data:`VALUE_CACHE_SIZE`; it is emptied when full: the next reads fill it
        again).
        """
        registry = cls.__new__(cls)
        registry.path = Path(".")
        registry._db = db
        registry._closed = True  # not ours to close
        registry._cache = cache
        registry._cache_size = VALUE_CACHE_SIZE if cache_size is None else cache_size
        return registry

    def _get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """The stored values of `keys` (None if absent): one multi-get for those the
        cache does not hold."""
        cache = self._cache
        if cache is None:
            return cast("list[bytes | None]", self._db.get(cast("list[Any]", keys)))
        values = [cache.get(key) for key in keys]
        missing = [key for key, value in zip(keys, values, strict=True) if value is None]
        if not missing:
            return values  # type: ignore[return-value]
        read = iter(cast("list[bytes | None]", self._db.get(cast("list[Any]", missing))))
        for i, value in enumerate(values):
            if value is None:
                stored = next(read)
                if stored is not None:
                    values[i] = cache[keys[i]] = stored
        self._trim()
        return values  # type: ignore[return-value]

    def _get_one(self, key: bytes) -> bytes | None:
        cache = self._cache
        stored = None if cache is None else cache.get(key)
        if stored is None:
            stored = cast("bytes | None", self._db.get(key))
            if stored is not None and cache is not None:
                cache[key] = stored
                self._trim()
        return stored

    def _write(self, batch: WriteBatch, records: Mapping[bytes, bytes]) -> None:
        """Write `batch`, which puts `records`, and remember them in the cache (only
        once RocksDB took them)."""
        self._db.write(batch)
        if self._cache is not None:
            self._cache.update(records)
            self._trim()

    def _trim(self) -> None:
        cache = self._cache
        if cache is not None and len(cache) > self._cache_size:
            cache.clear()

    def __enter__(self) -> UrlRegistry:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def add_many(self, urls: Iterable[str]) -> list[bool]:
        """Add URLs; for each, True if it was new (a repeat within `urls` is not new).

        One multi-get for the first-choice keys, then one WriteBatch for every new
        URL. Raises ValueError (and writes nothing) if a URL has no host.
        """
        urls = list(urls)
        return [key is not None for key in self.add_keyed(urls, [key_of(url) for url in urls])]

    def add_keyed(
        self,
        urls: Sequence[str],
        keys: Sequence[bytes],
        maybe_present: Sequence[bool] | None = None,
        found: dict[str, tuple[bytes, bytes]] | None = None,
        stamp: bytes = b"",
    ) -> list[bytes | None]:
        """Add URLs whose first-choice keys (:func:`key_of`) the caller computed; for
        each, the key it was stored under if it was new, else None.

        ``maybe_present[i] = False`` is the caller's promise that ``keys[i]`` is in no
        record yet (url-seen's Bloom filter holds every stored key, so its "definitely
        not" is such a promise): that URL is written without a read. Every other URL
        is looked up, all in one multi-get, and probed along its site's keys on a
        collision. All new records go in one WriteBatch.

        `found`, if given, receives (key, stored value) of each URL that was already
        registered, so a caller that updates those records (url-seen's in-link
        counts) needs no second lookup.

        `stamp`, if given, is stored as each new record's state (JSON, encoded once
        by the caller for the whole batch): url-seen's registration stamp, when and
        from which input message (:func:`~streams.core.urlstate.registration_stamp`).
        """
        if maybe_present is None:
            maybe_present = [True] * len(urls)
        lookup = [key for key, maybe in zip(keys, maybe_present, strict=True) if maybe]
        values = iter(self._get_many(lookup) if lookup else [])
        batch = WriteBatch(raw_mode=True)
        pending: dict[bytes, str] = {}
        records: dict[bytes, bytes] = {}
        result: list[bytes | None] = []
        for url, key, maybe in zip(urls, keys, maybe_present, strict=True):
            stored = next(values) if maybe else None
            raw_url = url.encode("utf-8")
            if stored is not None and key not in pending:
                # The common case first: the URL is the one stored under its first
                # key (what _holds says, inline: one call less per seen link).
                end = 8 + len(raw_url)
                if (
                    stored.startswith(raw_url, 8)
                    and (len(stored) == end or stored[end] == 0)
                    and STATE_SEP not in raw_url
                ):
                    if found is not None:
                        found[url] = (key, stored)
                    result.append(None)
                    continue
            written: bytes | None = None
            for _ in range(MAX_PROBES):
                in_batch = pending.get(key)
                if in_batch is not None:
                    if in_batch == url:
                        break
                elif stored is None:
                    pending[key] = url
                    records[key] = value = _value(url, stamp)
                    batch.put(key, value)
                    written = key
                    break
                elif _holds(stored, raw_url):
                    if found is not None:
                        found[url] = (key, bytes(stored))
                    break
                key = _next_probe(key)
                stored = self._get_one(key)
            else:  # pragma: no cover - needs 64 colliding URLs in one site
                raise RuntimeError(f"{MAX_PROBES} key collisions in one site at {url[:200]!r}")
            result.append(written)
        if pending:
            self._write(batch, records)
        return result

    def _find(self, urls: Sequence[str]) -> list[tuple[bytes, bytes] | None]:
        """(key, stored value) of each registered URL, None for the others: one
        multi-get for the first-choice keys, single gets only to probe a collision."""
        keys: list[bytes | None] = []
        for url in urls:
            try:
                keys.append(key_of(url))
            except ValueError:
                keys.append(None)
        lookup = [key for key in keys if key is not None]
        found = iter(self._get_many(lookup) if lookup else [])
        result: list[tuple[bytes, bytes] | None] = []
        for url, key in zip(urls, keys, strict=True):
            if key is None:
                result.append(None)
                continue
            stored = next(found)
            hit: tuple[bytes, bytes] | None = None
            raw_url = url.encode("utf-8")
            for _ in range(MAX_PROBES):
                if stored is None:
                    break
                if _holds(stored, raw_url):
                    hit = (key, bytes(stored))
                    break
                key = _next_probe(key)
                stored = self._get_one(key)
            result.append(hit)
        return result

    def set_states(
        self, states: Mapping[str, Mapping[str, Any]], *, register: bool = False
    ) -> list[str]:
        """Record the crawl state of URLs; returns the URLs written, in order.

        One multi-get, one WriteBatch. A URL that is not registered is skipped
        (the frontier only acts on URLs url-seen registered; a state must not make
        a URL "seen" behind url-seen's Bloom filter) unless `register` is set, as
        changelog replay does (url-seen's filter is rebuilt after recovery).
        """
        return list(self.write_states(states, register=register))

    def write_states(
        self, states: Mapping[str, Mapping[str, Any]], *, register: bool = False
    ) -> dict[str, bytes]:
        """:meth:`set_states`, returning each URL written with its state as stored
        (JSON, sticky fields kept), so a changelog record needs no second encode."""
        urls = list(states)
        batch = WriteBatch(raw_mode=True)
        written: dict[str, bytes] = {}
        records: dict[bytes, bytes] = {}
        for url, hit in zip(urls, self._find(urls), strict=True):
            if hit is None:
                if not register:
                    continue
                added = self.add_keyed([url], [key_of(url)])[0]
                if added is None:  # pragma: no cover - _find said it was absent
                    continue
                hit = (added, _value(url))
            key, stored = hit
            head, encoded = _with_state(stored, states[url])
            records[key] = value = head + STATE_SEP + encoded
            batch.put(key, value)
            written[url] = encoded
        if written:
            self._write(batch, records)
        return written

    def add_inlinks(
        self,
        counts: Mapping[str, int],
        found: Mapping[str, tuple[bytes, bytes]] | None = None,
    ) -> list[InlinkChange]:
        """Add in-links to registered URLs' counts (``in``, 1 when first met); for each
        URL written, (URL, state before, state after, the state as stored: JSON).
        One multi-get, one WriteBatch.

        url-seen calls this for the links it drops as already seen, so a URL's count
        grows across batches, not only within one url-filter batch; `found` are the
        records :meth:`add_keyed` just read (they are not read again). Each state is
        parsed once and encoded once (a link costs ~2x a new URL otherwise).
        """
        known = found or {}
        missing = [url for url in counts if url not in known]
        hits = dict(zip(missing, self._find(missing), strict=True)) if missing else {}
        batch = WriteBatch(raw_mode=True)
        records: dict[bytes, bytes] = {}
        result: list[InlinkChange] = []
        put = batch.put
        for url, add in counts.items():
            hit = known.get(url) or hits.get(url)
            if hit is None or add <= 0:
                continue
            key, stored = hit
            sep = stored.find(STATE_SEP, 8)
            old: dict[str, Any] | None = None
            if 0 <= sep < len(stored) - 1:
                try:
                    parsed = orjson.loads(stored[sep + 1 :])
                except ValueError:
                    parsed = None
                old = parsed if isinstance(parsed, dict) else None
            count = (int(old.get("in", 1)) if old else 1) + int(add)
            new = {**old, "in": count} if old else {"in": count}
            encoded = orjson.dumps(new)
            # the URL id and URL as stored, the separator, the new state: one copy
            value = (stored[: sep + 1] if sep >= 0 else stored + STATE_SEP) + encoded
            records[key] = value
            put(key, value)
            result.append((url, old, new, encoded))
        if result:
            self._write(batch, records)
        return result

    def states(self, urls: Sequence[str]) -> dict[str, dict[str, Any] | None]:
        """The crawl state of each registered URL (one multi-get); absent URLs are left out."""
        return {
            url: state_of(hit[1])
            for url, hit in zip(urls, self._find(urls), strict=True)
            if hit is not None
        }

    def state(self, url: str) -> dict[str, Any] | None:
        """The crawl state of a registered URL (None if absent or not acted on yet)."""
        hit = self._find([url])[0]
        return None if hit is None else state_of(hit[1])

    def __contains__(self, url: object) -> bool:
        if not isinstance(url, str):
            return False
        try:
            key = key_of(url)
        except ValueError:
            return False
        for _ in range(MAX_PROBES):
            stored = self._db.get(key)
            if stored is None:
                return False
            if url_of(stored) == url:
                return True
            key = _next_probe(key)
        return False  # pragma: no cover - see add_many

    def url_id_of(self, url: str) -> int | None:
        """The stored id of `url`, or None if it is not registered."""
        return url_id(url) if url in self else None

    def urls_of_site(self, site: int) -> Iterator[str]:
        """Every registered URL of a site id, in key order: one prefix scan.

        The scan is bounded above by the next site's first key, so RocksDB stops at
        the end of the range instead of reading into the next site. If two sites'
        63-bit ids collide (about one chance in 20 at a billion sites, in 2*10^7 at
        a million), their URLs share the range and both are listed.
        """
        if not 0 <= site < 1 << 63:
            raise ValueError(f"site id out of range: {site}")
        prefix = site.to_bytes(8, "big")
        options = ReadOptions()
        options.set_iterate_upper_bound((site + 1).to_bytes(8, "big"))
        for key, value in self._db.items(from_key=prefix, read_opt=options):
            if not isinstance(key, bytes) or not key.startswith(prefix):
                break  # the upper bound makes this a safety net
            yield url_of(value)

    def url_states(self) -> Iterator[tuple[str, dict[str, Any] | None]]:
        """Every registered URL with its crawl state, grouped by site."""
        for key, value in self._db.items():
            if isinstance(key, bytes) and len(key) == 16 and key != _FAUST_OFFSET_KEY:
                yield url_of(value), state_of(value)

    def close(self) -> None:
        """Flush and release the database (RocksDB locks it per process); idempotent."""
        if not self._closed:
            self._closed = True
            self._db.close()
