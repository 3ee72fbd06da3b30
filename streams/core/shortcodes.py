"""Short links, the pure part: codes, URL validation, the mapping rules, expiry, limits.

Why it looks like this
----------------------
* **Codes** are 7 base62 characters of a 64-bit murmur hash of the canonical
  URL (62**7 ≈ 3.5e12 codes). A hash, not a counter: codes say nothing about
  each other or about how many links exist, and the same URL gives the same
  code on every worker without coordination. Collisions are real at scale
  (≈ 14 % chance of at least one among a million URLs), so the table decides:
  a code already held by *another* URL makes the caller try the next seed.
* **One partition per URL, and its code in the same one.** A URL's *home
  partition* is the partition of its seed-0 code. When a collision forces a
  re-hash, seeds whose code would live in another partition are skipped. So
  every code a URL can get lives in the URL's home partition: the code table,
  the URL table and the click counts of a link are in one partition, owned by
  one worker, and the creation agent of that partition is the single place
  where a code is checked and taken. Uniqueness is a local, serialized check,
  and a redirect finds its partition from the code alone.
* Everything here works on plain mappings (dicts in the unit tests, Faust
  tables in ``streams.web.shortlinks``), like ``streams.core.frontier``.

Pure logic: no Kafka / faust imports.
"""

from __future__ import annotations

import math
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, MutableMapping
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

import mmh3

from streams.core.partitioning import partition_for
from streams.core.urls import canonical

__all__ = [
    "ALPHABET",
    "CODE_LENGTH",
    "MAX_URL_LENGTH",
    "CodeSpaceExhausted",
    "LRUCache",
    "RateLimiter",
    "assign_code",
    "code_candidates",
    "home_partition",
    "is_expired",
    "is_valid_code",
    "parse_expires_at",
    "short_code",
    "sweep_expired",
    "sweepable",
    "url_key",
    "validate_long_url",
]

ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
CODE_LENGTH = 7
CODE_SPACE = len(ALPHABET) ** CODE_LENGTH
MAX_URL_LENGTH = 2048
#: Seeds tried before giving up. Each seed lands in the home partition with
#: probability 1/partitions, so this allows thousands of collisions per URL.
MAX_SEEDS = 1 << 20
#: Latest accepted expiry: far enough for anyone, small enough for every datetime.
MAX_EXPIRES_AT = datetime(9999, 1, 1, tzinfo=UTC).timestamp()

_CODE_RE = re.compile(rf"[0-9A-Za-z]{{{CODE_LENGTH}}}")
_SCHEME_RE = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")
# WHATWG URL parsing strips leading/trailing C0 controls and spaces and removes
# every tab and newline, so "java\tscript:" *is* a javascript: URL to a browser.
_C0_AND_SPACE = "".join(chr(i) for i in range(0x21))
_TAB_NEWLINE = str.maketrans("", "", "\t\n\r")


def short_code(canonical_url: str, seed: int = 0) -> str:
    """The 7-character base62 code of a canonical URL under `seed`.

    mmh3's 64-bit hash reduced modulo 62**7 (the bias of the reduction is below
    one part in five million), written most significant digit first.
    """
    if not 0 <= seed < 1 << 32:
        raise ValueError(f"seed must fit in 32 bits, got {seed}")
    value = mmh3.hash64(canonical_url.encode("utf-8", "surrogatepass"), seed, signed=False)[0]
    value %= CODE_SPACE
    digits = []
    for _ in range(CODE_LENGTH):
        value, digit = divmod(value, 62)
        digits.append(ALPHABET[digit])
    return "".join(reversed(digits))


def is_valid_code(code: str) -> bool:
    """True for a string that could be a code: answering 404 early spares a table read."""
    return _CODE_RE.fullmatch(code) is not None


def url_key(canonical_url: str) -> str:
    """Key of the URL → code table: 128-bit murmur, hex (short, fixed size, no URL bytes)."""
    return format(
        mmh3.hash128(canonical_url.encode("utf-8", "surrogatepass"), signed=False), "032x"
    )


CodeFn = Callable[[str, int], str]


def home_partition(canonical_url: str, partitions: int, code_fn: CodeFn = short_code) -> int:
    """The partition that owns a URL and every code it can get: that of its seed-0 code."""
    return partition_for(code_fn(canonical_url, 0), partitions)


def code_candidates(
    canonical_url: str,
    partitions: int,
    code_fn: CodeFn = short_code,
    max_seeds: int = MAX_SEEDS,
) -> Iterator[tuple[int, str]]:
    """(seed, code) in the order they are tried: seed 0, then the next seeds whose code
    falls in the URL's home partition (see the module docstring for why)."""
    first = code_fn(canonical_url, 0)
    yield 0, first
    home = partition_for(first, partitions)
    for seed in range(1, max_seeds):
        code = code_fn(canonical_url, seed)
        if partition_for(code, partitions) == home:
            yield seed, code


class CodeSpaceExhausted(RuntimeError):
    """Every candidate code of a URL is held by other URLs (never expected in practice)."""


# ---------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------


def validate_long_url(url: object) -> str:
    """The canonical form of an http(s) URL that may be shortened, or ValueError(reason).

    The reasons are meant for the client (they become the body of a 400): a
    short link is an open redirect, so anything a browser would not treat as a
    plain http(s) navigation is refused, with the scheme check done the way a
    browser reads the scheme (tabs and newlines removed, controls trimmed).
    """
    if not isinstance(url, str):
        raise ValueError("url must be a string")
    if len(url) > MAX_URL_LENGTH:
        raise ValueError(f"url is longer than {MAX_URL_LENGTH} characters ({len(url)})")
    as_browser_reads = url.translate(_TAB_NEWLINE).strip(_C0_AND_SPACE)
    if not as_browser_reads:
        raise ValueError("url is empty")
    match = _SCHEME_RE.match(as_browser_reads)
    if match is None:
        raise ValueError("relative URL: give an absolute http:// or https:// URL")
    scheme = match.group(1).lower()
    if scheme == "javascript":
        raise ValueError("javascript: URLs are not allowed")
    if scheme == "data":
        raise ValueError("data: URLs are not allowed")
    if scheme not in ("http", "https"):
        raise ValueError(f"only http and https URLs are allowed, not {scheme}:")
    result = canonical(url)
    if result is None:
        raise ValueError("malformed URL")
    if len(result) > MAX_URL_LENGTH:
        raise ValueError(f"url is longer than {MAX_URL_LENGTH} characters once canonicalized")
    return result


# ---------------------------------------------------------------------------
# expiry
# ---------------------------------------------------------------------------


def parse_expires_at(value: object, now: float) -> float | None:
    """`expires_at` from a request (None, unix seconds, or ISO-8601) → unix seconds.

    A time without a zone is taken as UTC. Times in the past are refused: a link
    that is born expired is a client mistake, not a request worth storing.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError("expires_at must be unix seconds or an ISO-8601 time, not a boolean")
    if isinstance(value, int | float):
        when = float(value)
    elif isinstance(value, str):
        try:
            when = float(value)
        except ValueError:
            try:
                parsed = datetime.fromisoformat(value.strip())
            except ValueError:
                raise ValueError(
                    f"expires_at is neither unix seconds nor an ISO-8601 time: {value[:64]!r}"
                ) from None
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=UTC)
            when = parsed.timestamp()
    else:
        raise ValueError("expires_at must be unix seconds or an ISO-8601 time")
    if not math.isfinite(when):
        raise ValueError("expires_at must be a finite time")
    if when <= now:
        raise ValueError("expires_at is in the past")
    if when > MAX_EXPIRES_AT:
        raise ValueError("expires_at is after the year 9999")
    return when


def is_expired(expires_at: float | None, now: float) -> bool:
    """A link expires *at* its time: from then on it answers 410."""
    return expires_at is not None and now >= expires_at


def sweepable(expires_at: float | None, now: float, grace: float) -> bool:
    """Expired for longer than `grace`: it answered 410 long enough and can go (→ 404)."""
    return expires_at is not None and now >= expires_at + grace


# ---------------------------------------------------------------------------
# the mapping rules, over two (or three) mappings
# ---------------------------------------------------------------------------


def new_link(
    canonical_url: str, now: float, expires_at: float | None, permanent: bool, seed: int
) -> dict[str, Any]:
    """The value stored under a code (JSON-serializable: Faust tables store JSON)."""
    return {
        "url": canonical_url,
        "created_at": now,
        "expires_at": expires_at,
        "permanent": permanent,
        "seed": seed,
    }


def assign_code(
    canonical_url: str,
    codes: MutableMapping[str, Any],
    urls: MutableMapping[str, Any],
    *,
    partitions: int,
    now: float,
    expires_at: float | None = None,
    permanent: bool = False,
    code_fn: CodeFn = short_code,
) -> tuple[str, dict[str, Any], bool]:
    """Return (code, link, created) for a canonical URL, writing the tables if needed.

    Must run where every key involved lives: in the URL's home partition, one
    call at a time (the creation agent). The same URL always gets the same code:
    an existing live link is returned unchanged (the first request's
    `expires_at`/`permanent` win); an *expired* link of this URL is renewed
    under the same code, since the code still belongs to it. A candidate held
    by another URL is a collision: try the next seed.
    """
    key = url_key(canonical_url)
    code = urls.get(key)
    if code is not None:
        link = codes.get(code)
        if link is not None and link["url"] == canonical_url:
            if not is_expired(link.get("expires_at"), now):
                return code, link, False
            renewed = new_link(canonical_url, now, expires_at, permanent, link.get("seed", 0))
            codes[code] = renewed
            return code, renewed, True
    for seed, candidate in code_candidates(canonical_url, partitions, code_fn):
        held = codes.get(candidate)
        if held is not None and held["url"] != canonical_url:
            continue  # a collision: the table says this code is someone else's
        link = new_link(canonical_url, now, expires_at, permanent, seed)
        codes[candidate] = link
        urls[key] = candidate
        return candidate, link, True
    raise CodeSpaceExhausted(f"no free code for {canonical_url[:200]}")


def sweep_expired(
    codes: MutableMapping[str, Any],
    urls: MutableMapping[str, Any],
    clicks: MutableMapping[str, Any] | None,
    *,
    owns: Callable[[str], bool],
    now: float,
    grace: float,
) -> list[str]:
    """Delete links expired for longer than `grace` (and their URL entry and clicks).

    `owns(code)` limits the sweep to the partition being handled: a Faust table
    iterates every partition the worker holds, but a delete must go to the
    changelog of the key's own partition, i.e. while handling an event of it.
    """
    doomed = [
        code
        for code, link in list(codes.items())
        if link is not None and owns(code) and sweepable(link.get("expires_at"), now, grace)
    ]
    for code in doomed:
        link = codes[code]
        del codes[code]
        key = url_key(link["url"])
        if urls.get(key) == code:
            del urls[key]
        if clicks is not None and clicks.get(code) is not None:
            del clicks[code]
    return doomed


# ---------------------------------------------------------------------------
# in-process helpers: read cache and rate limit
# ---------------------------------------------------------------------------

K = TypeVar("K")
V = TypeVar("V")


class LRUCache(Generic[K, V]):
    """A bounded least-recently-used map for code → link reads.

    A link never changes except by expiring, so entries need no invalidation:
    the reader checks expiry on every hit and reloads an expired entry (the URL
    may have been shortened again, renewing it). Not thread-safe: one per event loop.
    """

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, got {capacity}")
        self.capacity = capacity
        self._data: OrderedDict[K, V] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: K) -> V | None:
        try:
            value = self._data[key]
        except KeyError:
            self.misses += 1
            return None
        self._data.move_to_end(key)
        self.hits += 1
        return value

    def put(self, key: K, value: V) -> None:
        self._data[key] = value
        self._data.move_to_end(key)
        if len(self._data) > self.capacity:
            self._data.popitem(last=False)

    def pop(self, key: K) -> V | None:
        return self._data.pop(key, None)

    def clear(self) -> None:
        self._data.clear()

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data


class RateLimiter:
    """A token bucket per client: `burst` requests at once, then `rate` per second.

    Buckets that have refilled completely carry no information, so when the
    table grows past `max_clients` they are dropped: memory stays bounded by the
    clients that are actually over their rate.
    """

    def __init__(
        self,
        rate: float,
        burst: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_clients: int = 100_000,
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be > 0 and burst >= 1")
        self.rate = rate
        self.burst = float(burst)
        self.clock = clock
        self.max_clients = max_clients
        self._buckets: dict[str, list[float]] = {}

    def _refilled(self, client: str, now: float) -> list[float]:
        bucket = self._buckets.get(client)
        if bucket is None:
            if len(self._buckets) >= self.max_clients:
                self._prune(now)
            bucket = self._buckets[client] = [self.burst, now]
        else:
            bucket[0] = min(self.burst, bucket[0] + (now - bucket[1]) * self.rate)
            bucket[1] = now
        return bucket

    def allow(self, client: str) -> bool:
        """Take one token for `client`; False means answer 429."""
        bucket = self._refilled(client, self.clock())
        if bucket[0] >= 1.0:
            bucket[0] -= 1.0
            return True
        return False

    def retry_after(self, client: str) -> float:
        """Seconds until `client` has a token again (for the Retry-After header)."""
        bucket = self._buckets.get(client)
        if bucket is None:
            return 0.0
        missing = 1.0 - min(self.burst, bucket[0] + (self.clock() - bucket[1]) * self.rate)
        return max(0.0, missing / self.rate)

    def _prune(self, now: float) -> None:
        full = [
            client
            for client, (tokens, last) in self._buckets.items()
            if tokens + (now - last) * self.rate >= self.burst
        ]
        for client in full:
            del self._buckets[client]
        if len(self._buckets) >= self.max_clients:
            # Everyone is over their rate (an attack from many addresses): forget
            # the oldest bucket rather than grow without bound.
            del self._buckets[next(iter(self._buckets))]

    def __len__(self) -> int:
        return len(self._buckets)
