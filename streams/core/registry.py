"""The URL registry: every URL the crawl accepted, grouped by site, in RocksDB.

Why this shape
--------------
* **Key = site id (8 bytes, big-endian) + hash of the URL without its host
  (8 bytes)** (:func:`~streams.core.sites.registry_key`). RocksDB sorts keys as
  bytes, so a site's URLs form one contiguous key range: listing a site (recrawl,
  export, per-site budgets) is a prefix scan, not a full scan, and a site's keys
  sit in the same blocks, which keeps compaction and caching local.
* **Value = 8-byte URL id + the URL** (UTF-8). The URL is kept so membership is
  exact: a 64-bit hash collision (or two sites whose 63-bit ids collide, which the
  key alone cannot tell apart) is detected by comparing URLs and resolved by
  probing the next key of the site's range, so a URL is never reported as seen
  because another URL shares its key.
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

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, cast

from rocksdict import Options, Rdict, ReadOptions, WriteBatch

from streams.core.sites import registry_key, site_id, url_id
from streams.core.urls import host_of, site_key

__all__ = ["UrlRegistry", "key_of", "url_of"]

#: Keys of one site tried after a collision before giving up (never reached in
#: practice: a second probe needs two 64-bit collisions within one site).
MAX_PROBES = 64
_SUFFIX_MASK = (1 << 64) - 1


def key_of(url: str) -> bytes:
    """The first-choice registry key of a URL (a collision moves it to a later key of
    the same site). Raises ValueError for a URL without a host."""
    host = host_of(url)
    if not host:
        raise ValueError(f"not an absolute URL with a host: {url[:200]!r}")
    return registry_key(site_id(site_key(host)), url)


def _next_probe(key: bytes) -> bytes:
    """The next key of the same site: the 8-byte suffix plus one, wrapping within the site."""
    suffix = (int.from_bytes(key[8:], "big") + 1) & _SUFFIX_MASK
    return key[:8] + suffix.to_bytes(8, "big")


def _value(url: str) -> bytes:
    return url_id(url).to_bytes(8, "big") + url.encode("utf-8")


def url_of(value: bytes) -> str:
    """The URL of a stored value (8-byte URL id, then the URL)."""
    return bytes(value[8:]).decode("utf-8")


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

    @classmethod
    def over(cls, db: Rdict) -> UrlRegistry:
        """A registry over a database someone else opened (in raw mode) and closes.

        Faust's rocksdb store opens one database per table partition and owns its
        lifetime (rebalances open and drop them); url-seen's store wraps each in a
        registry. :meth:`close` on such a registry does not close the database.
        """
        registry = cls.__new__(cls)
        registry.path = Path(".")
        registry._db = db
        registry._closed = True  # not ours to close
        return registry

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
    ) -> list[bytes | None]:
        """Add URLs whose first-choice keys (:func:`key_of`) the caller computed; for
        each, the key it was stored under if it was new, else None.

        ``maybe_present[i] = False`` is the caller's promise that ``keys[i]`` is in no
        record yet (url-seen's Bloom filter holds every stored key, so its "definitely
        not" is such a promise): that URL is written without a read. Every other URL
        is looked up, all in one multi-get, and probed along its site's keys on a
        collision. All new records go in one WriteBatch.
        """
        if maybe_present is None:
            maybe_present = [True] * len(urls)
        lookup = [key for key, maybe in zip(keys, maybe_present, strict=True) if maybe]
        # rocksdict's multi-get: a list of keys gives a list of values (None if absent).
        found = iter(
            cast("list[bytes | None]", self._db.get(cast("list[Any]", lookup))) if lookup else []
        )
        batch = WriteBatch(raw_mode=True)
        pending: dict[bytes, str] = {}
        result: list[bytes | None] = []
        for url, key, maybe in zip(urls, keys, maybe_present, strict=True):
            stored = next(found) if maybe else None
            written: bytes | None = None
            for _ in range(MAX_PROBES):
                in_batch = pending.get(key)
                if in_batch is not None:
                    if in_batch == url:
                        break
                elif stored is None:
                    pending[key] = url
                    batch.put(key, _value(url))
                    written = key
                    break
                elif url_of(stored) == url:
                    break
                key = _next_probe(key)
                stored = self._db.get(key)
            else:  # pragma: no cover - needs 64 colliding URLs in one site
                raise RuntimeError(f"{MAX_PROBES} key collisions in one site at {url[:200]!r}")
            result.append(written)
        if pending:
            self._db.write(batch)
        return result

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

    def close(self) -> None:
        """Flush and release the database (RocksDB locks it per process); idempotent."""
        if not self._closed:
            self._closed = True
            self._db.close()
