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

Pure: the keys and values only, no storage. The RocksDB table itself is
`streams.store.url_registry.UrlRegistry`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import orjson

from streams.core.sites import registry_key, site_id, url_id
from streams.core.urls import host_of, site_key

__all__ = [
    "STICKY_FIELDS",
    "InlinkChange",
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
