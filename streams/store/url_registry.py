"""The URL registry's store: the URLs of url-seen's partitions in RocksDB, with their
crawl state (the layout of keys and values, and why, is in streams.core.registry).

The registry is local to one process; who owns which partition, and recovery, are
the caller's concern: in the crawl, url-seen's Faust store (streams.tables.registry)
keeps one registry per table partition over the database Faust opened for it
(`UrlRegistry.over`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, cast

import orjson
from rocksdict import Options, Rdict, ReadOptions, WriteBatch

from streams.core.registry import (
    _FAUST_OFFSET_KEY,
    MAX_PROBES,
    STATE_SEP,
    VALUE_CACHE_SIZE,
    InlinkChange,
    ValueCache,
    _holds,
    _next_probe,
    _value,
    _with_state,
    key_of,
    state_of,
    url_of,
)
from streams.core.sites import url_id

__all__ = ["UrlRegistry"]

#: The path of a registry over another's database (`UrlRegistry.over`, built per
#: message): one Path, not a new one each time (~0.9 µs).
_NOT_OPENED_HERE = Path(".")


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
        registry.path = _NOT_OPENED_HERE
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
