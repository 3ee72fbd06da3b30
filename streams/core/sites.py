"""Sites: ``www.example.com`` and ``example.com`` are one site with one canonical form.

Why this module exists
----------------------
Most sites answer on both the bare host and its ``www.`` form with the same
pages, and pages link to both. Deduplicating on the URL string alone would fetch
every such page twice. Partitioning already puts both forms on one partition
(:func:`~streams.core.urls.site_key`), so the partition's owner can keep a small
per-site record and rewrite every URL to one form before url-seen sees it.

Which form wins: the first one the crawl meets. Nothing better is known when the
first URL of a site arrives, and the choice must never change afterwards for
the rule to be cheap (a URL stored under one form must not reappear under the
other) — with one exception: a *redirect* between the two forms is the server
saying which one it serves, and ignoring it would lose the site (every page
would redirect to a URL that maps back onto the one just fetched). So
:meth:`SiteRegistry.prefer` lets a redirect settle the form once; after that it
never changes again.

Ids need no coordination between workers: a site id is a hash of the site key,
a URL id a hash of the canonical URL, so any worker computes the same ids with
no lookup (see :func:`site_id`, :func:`url_id`, :func:`registry_key`).

Pure logic: no Kafka or Faust imports. The registry works over any
MutableMapping — a Faust table in the url-filter stage, a dict in unit tests.
"""

from __future__ import annotations

import functools
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any

import mmh3

from streams.core.urls import canonical, host_of, site_key

__all__ = [
    "SiteInfo",
    "SiteRegistry",
    "registry_key",
    "site_id",
    "split_host",
    "url_id",
    "url_id_long",
]

_MASK63 = (1 << 63) - 1


def site_id(key: str) -> int:
    """The numeric id of a site, from its site key: 63 bits of murmur3 (x64, 128-bit).

    63 bits, not 64, so the id is a non-negative signed 64-bit integer everywhere it
    goes (Avro ``long``, JSON readers, RocksDB keys compared as bytes). Derived from
    the key alone so every worker agrees without a counter to coordinate.
    """
    return mmh3.hash64(key.encode("utf-8"), 0, signed=False)[0] & _MASK63


def url_id(url: str) -> int:
    """The 64-bit id of a canonical URL (unsigned murmur3, x64 128-bit, first half)."""
    return mmh3.hash64(url.encode("utf-8"), 0, signed=False)[0]


def url_id_long(url: str) -> int:
    """:func:`url_id` as a signed 64-bit integer with the same bits, for Avro ``long``
    fields (fetch requests, crawl-log records), which have no unsigned type."""
    uid = url_id(url)
    return uid - (1 << 64) if uid >= 1 << 63 else uid


def split_host(url: str) -> tuple[str, str, str] | None:
    """``(before, host, after)`` of an absolute URL, or None when it has no host.

    ``before`` is ``scheme://`` plus any userinfo, ``after`` is the ``:port``, path
    and query. Works on the string (no parse): the URL is expected in the form
    :func:`~streams.core.urls.canonical` returns, whose authority WHATWG serialised
    with a lower-case host and every ``/``, ``?``, ``#`` and ``@`` of the userinfo
    percent-encoded, so the authority ends at the first ``/``, ``?`` or ``#`` and the
    host starts after its last ``@``.
    """
    start = url.find("://")
    if start < 0:
        return None
    start += 3
    end = len(url)
    for sep in "/?#":
        cut = url.find(sep, start)
        if 0 <= cut < end:
            end = cut
    at = url.rfind("@", start, end)
    host_start = at + 1 if at >= 0 else start
    if url.startswith("[", host_start):
        close = url.find("]", host_start, end)
        if close < 0:
            return None
        host_end = close + 1
    else:
        colon = url.find(":", host_start, end)
        host_end = colon if colon >= 0 else end
    if host_end == host_start:
        return None
    return url[:host_start], url[host_start:host_end], url[host_end:]


def registry_key(site: int, url: str) -> bytes:
    """The URL registry key: 8-byte big-endian site id, then 8 bytes of hash of the
    URL without its host.

    Big-endian site id first so that RocksDB, which sorts keys as bytes, keeps all of
    a site's URLs in one contiguous range (a prefix scan lists them). The host is left
    out of the hash because the site id already stands for it (URLs reaching the
    registry carry their site's canonical host); scheme, userinfo and port are kept,
    since ``http://a/x`` and ``https://a/x`` can be different resources. Keys can
    collide (two sites with one id, two URLs with one hash): the registry stores the
    URL and resolves that (:class:`~streams.store.url_registry.UrlRegistry`).
    """
    parts = split_host(url)
    rest = url if parts is None else parts[0] + parts[2]
    digest = mmh3.hash64(rest.encode("utf-8"), 0, signed=False)[0]
    return site.to_bytes(8, "big") + digest.to_bytes(8, "big")


@dataclass(frozen=True)
class SiteInfo:
    """What the registry knows of one site.

    ``canonical`` is the host form every URL of the site is rewritten to; ``aliases``
    the other forms met so far (for ``www.``-equivalence at most one). ``settled`` is
    True once a redirect between the forms fixed ``canonical`` for good.
    """

    site_id: int
    key: str
    canonical: str
    aliases: tuple[str, ...] = ()
    settled: bool = False

    def to_record(self) -> dict[str, Any]:
        """The table value: plain JSON types, since Faust serializes table values as JSON."""
        return {
            "id": self.site_id,
            "canonical": self.canonical,
            "aliases": list(self.aliases),
            "settled": self.settled,
        }

    @classmethod
    def from_record(cls, key: str, record: dict[str, Any]) -> SiteInfo:
        return cls(
            site_id=int(record["id"]),
            key=key,
            canonical=str(record["canonical"]),
            aliases=tuple(record.get("aliases") or ()),
            settled=bool(record.get("settled", False)),
        )

    @property
    def forms(self) -> tuple[str, ...]:
        """Every host form met: the canonical one first."""
        return (self.canonical, *self.aliases)


#: URLs whose :func:`split_host` answer is remembered for
#: :meth:`SiteRegistry.canonicalize` (url-filter maps each link, and a URL is linked
#: from many pages), and the longest URL that is.
SPLIT_CACHE_SIZE = 1 << 15
SPLIT_CACHE_MAX_URL = 1024
_split_host_cached = functools.lru_cache(maxsize=SPLIT_CACHE_SIZE)(split_host)


def _split_host_memo(url: str) -> tuple[str, str, str] | None:
    """:func:`split_host`, memoised for URLs up to :data:`SPLIT_CACHE_MAX_URL` (a pure
    function of the string)."""
    if len(url) <= SPLIT_CACHE_MAX_URL:
        return _split_host_cached(url)
    return split_host(url)


class SiteRegistry:
    """Site records keyed by site key, over a MutableMapping (a Faust table, or a dict).

    Reads go through a bounded in-memory cache, because url-filter maps every link
    (~23 a page) and a table read is a RocksDB get plus a JSON decode; writes — only
    when a site or a form is first met, or a redirect settles a site — always re-read
    the table first, so a stale cache entry can never overwrite the table. A cached
    entry can only go stale if this worker loses a partition and gets it back after
    another worker settled one of its sites by redirect; the cost is then one URL in
    the old form, which the server redirects once.

    Every write must happen while handling a message of the site's partition (Faust
    writes the changelog to the current event's partition); url-filter runs in the
    partition of the URL's site, so it does.
    """

    def __init__(self, table: MutableMapping[str, Any], *, cache_size: int = 65536) -> None:
        self.table = table
        self.cache_size = cache_size
        #: host form -> its site's record (both forms of a site point at one record)
        self._cache: dict[str, SiteInfo] = {}

    def _read(self, key: str) -> SiteInfo | None:
        record = self.table.get(key)
        return None if record is None else SiteInfo.from_record(key, record)

    def _write(self, info: SiteInfo) -> SiteInfo:
        self.table[info.key] = info.to_record()
        self._remember(info)
        return info

    def _remember(self, info: SiteInfo) -> None:
        """Cache `info` under each of its host forms: a hit is then one dict lookup."""
        if self.cache_size <= 0:
            return
        forms = info.forms
        if len(self._cache) + len(forms) > self.cache_size:
            self._cache.clear()  # cheaper than LRU bookkeeping on the hot path
        for form in forms:
            self._cache[form] = info

    def get(self, host: str) -> SiteInfo | None:
        """The record of the site of `host`, or None if no form of it was met yet."""
        info = self._read(site_key(host))
        if info is not None:
            self._remember(info)
        return info

    def register(self, host: str) -> SiteInfo:
        """Record that the crawl met `host`; returns its site's record.

        The first form of a site met becomes its canonical form; another form met
        later is added to the aliases (once). Repeated calls with a known form
        write nothing.
        """
        info = self._cache.get(host)
        if info is not None:
            return info
        host = host.lower()
        key = site_key(host)
        info = self._read(key)  # fresh, before any write
        if info is None:
            return self._write(SiteInfo(site_id(key), key, host))
        if host in info.forms:
            self._remember(info)
            return info
        return self._write(
            SiteInfo(info.site_id, key, info.canonical, (*info.aliases, host), info.settled)
        )

    def prefer(self, host: str) -> SiteInfo:
        """Make `host` its site's canonical form because a redirect said so, once.

        Called when the server redirected from one form of the site to `host`: the
        site is served under `host`, so mapping URLs away from it would lose them.
        The first such redirect settles the site; later ones (a server redirecting
        both ways) change nothing, so the form can flip at most once.
        """
        host = host.lower()
        key = site_key(host)
        info = self._read(key)
        if info is None:
            return self._write(SiteInfo(site_id(key), key, host, settled=True))
        if info.settled:
            self._remember(info)
            return info
        if info.canonical == host:
            return self._write(SiteInfo(info.site_id, key, host, info.aliases, True))
        aliases = (info.canonical, *(a for a in info.aliases if a != host))
        return self._write(SiteInfo(info.site_id, key, host, aliases, True))

    def canonicalize(self, url: str, *, is_canonical: bool = False) -> str:
        """`url` in canonical form with its host rewritten to its site's canonical form.

        Registers the host form met. Scheme, userinfo, port, path and query are kept.
        The URL is put through :func:`~streams.core.urls.canonical` first, unless the
        caller says it already is (``is_canonical=True``: url-filter has just
        computed it, and a second parse would cost as much as the rest of this).
        Raises ValueError for anything that is not an http(s) URL with a host.
        """
        fixed = url if is_canonical else canonical(url)
        parts = None if fixed is None else _split_host_memo(fixed)
        if fixed is None or parts is None:
            raise ValueError(f"not an absolute http(s) URL with a host: {url[:200]!r}")
        before, host, after = parts
        info = self.register(host)
        if info.canonical == host:
            return fixed  # is before + host + after: no new string per link
        return before + info.canonical + after

    def site_id_of(self, url: str) -> int:
        """The site id of a URL (a hash: needs no registry lookup)."""
        return site_id(site_key(host_of(url)))
