"""Near-duplicate detection: 64-bit simhash of page text, Hamming distance, LSH bands.

Exact dedup misses the commonest duplicates of the web: the same page with another
date, counter or ad block. Charikar's simhash maps a document to 64 bits so that similar
documents land a small Hamming distance apart (Manku et al., WWW 2007: 64 bits, distance
<= 3, for Google's crawl); the banding below finds them without pairwise comparison.

How the fingerprint is built (:func:`simhash`):

* **Text, normalised.**  Lower-cased, split into words at ASCII whitespace and
  punctuation; every run of digits becomes ``0`` (by default), so pages that differ
  only by a date, a counter, a price or a timestamp -- the usual
  noise of a re-rendered page, and the shape of calendar-style crawler traps -- are
  *identical* to the fingerprint.  Without this, each changed number moves a 3-word
  shingle window over three features and flips ~1.5 of 64 bits on an 8 KB page, with
  a tail past 3 bits (measured in tests/unit/test_simhash.py).
* **Features** are overlapping shingles of 3 words (order matters: two pages with the
  same vocabulary but different sentences stay far apart; single words do not, every
  page of one language shares its common words).
* **Hashes.**  Each word is hashed with mmh3 (x64, 64 bits); a shingle's
  hash mixes its words' hashes position-dependently and goes through the splitmix64
  finaliser, vectorised with numpy.  Hashing each shingle string with mmh3 instead gives
  fingerprints of the same quality at ~3x the cost (one Python call per shingle).
* **Weights.**  A shingle that occurs ``n`` times weighs ``1 + ln n``: repeated
  boilerplate ("read more", "share this") counts, but does not drown the text.
* **Bits.**  Bit ``i`` of the fingerprint is 1 when the weighted vote of bit ``i`` over
  all feature hashes is positive.

Banding (:func:`bands`): two fingerprints within distance ``k`` differ in at most ``k``
bit positions, so if the 64 bits are cut into ``k + 1`` disjoint bands, at least one
band is identical (pigeonhole).  Indexing each page under its ``k + 1`` band keys and
comparing only with pages sharing a key finds *every* neighbour within ``k``, with
no false negatives; the band index is part of the key so band 0's value never meets
band 2's.  :class:`NearDupIndex` is that index over any ``MutableMapping`` (a dict in
tests, a Faust table in the content-dedup stage, where the band key also serves as the
message key, so near-duplicates meet in one partition whatever their hosts).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, MutableMapping, Sequence
from typing import NamedTuple

import mmh3
import numpy as np
import numpy.typing as npt

__all__ = [
    "BandStep",
    "NearDupIndex",
    "band_closest",
    "band_step",
    "band_with",
    "bands",
    "hamming",
    "simhash",
    "simhash_or_none",
    "simhashes",
    "to_signed",
    "to_unsigned",
]

BITS = 64
DEFAULT_DISTANCE = 3  # Manku et al.: 64-bit fingerprints, near-duplicate at distance <= 3
DEFAULT_SHINGLE = 3

_MASK64 = (1 << BITS) - 1
_U64 = np.uint64
# Odd 64-bit multipliers (from splitmix64 / xxhash): a shingle hash must depend on the
# order of its words, so each position multiplies by a different constant.
_POSITION_MUL = (
    _U64(0x9E3779B97F4A7C15),
    _U64(0xC2B2AE3D27D4EB4F),
    _U64(0x165667B19E3779F9),
    _U64(0xD6E8FEB86659FD93),
    _U64(0xFF51AFD7ED558CCD),
    _U64(0xC4CEB9FE1A85EC53),
    _U64(0x27D4EB2F165667C5),
    _U64(0x85EBCA77C2B2AE63),
)
_SEED = 0x5E12E  # mmh3 seed for word hashes ("seine")


def _splitmix_finalise(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """The splitmix64 finaliser: every input bit affects every output bit (avalanche)."""
    x = x ^ (x >> _U64(30))
    x = x * _U64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> _U64(27))
    x = x * _U64(0x94D049BB133111EB)
    return x ^ (x >> _U64(31))


def _byte_table(mask_numbers: bool) -> bytes:
    table = bytearray(range(256))
    for c in range(128):
        if not chr(c).isalnum():
            table[c] = 0x20  # ASCII punctuation, control and space separate words
        elif mask_numbers and chr(c).isdigit():
            table[c] = 0x30  # every digit is 0; runs of 0 are then collapsed
    return bytes(table)


_TABLES = {True: _byte_table(True), False: _byte_table(False)}
#: The same, lower-casing A-Z as well: for texts given as ASCII bytes (one pass instead
#: of ``str.lower`` + encode + translate).
_ASCII_TABLES = {
    mask: bytes(table[c + 0x20] if 0x41 <= c <= 0x5A else table[c] for c in range(256))
    for mask, table in _TABLES.items()
}
_ZEROS_RE = re.compile(rb"0+")


def _words(text: str, mask_numbers: bool) -> list[bytes]:
    """Lower-cased words (UTF-8), separated by ASCII whitespace and punctuation.

    The reference for :func:`_word_hashes` (which must hash exactly these words):
    non-ASCII characters belong to words (so a text with no ASCII separators is few,
    long words); the no-break space, common in extracted HTML text, separates like a
    space.
    """
    b = text.lower().replace("\xa0", " ").encode("utf-8", "surrogatepass")
    b = b.translate(_TABLES[mask_numbers])
    if mask_numbers:
        b = _ZEROS_RE.sub(b"0", b)
    return b.split()


# MurmurHash3 x64 128 constants (mmh3.hash64 is its first 64 bits).
_C1 = _U64(0x87C37B91114253D5)
_C2 = _U64(0x4CF5AD432745937F)
_FMIX1 = _U64(0xFF51AFD7ED558CCD)
_FMIX2 = _U64(0xC4CEB9FE1A85EC53)
_SPACE = 0x20
_ZERO = 0x30
_NEWLINE = 0x0A
_PAD = b" " * 16
#: By a word's length (up to 16): the bytes of its first and second 8-byte block that
#: are the word's (the rest of each window is the next words).
_LOW_MASK = np.array([(1 << 8 * min(n, 8)) - 1 for n in range(17)], dtype=np.uint64)
_HIGH_MASK = np.array([(1 << 8 * min(max(n - 8, 0), 8)) - 1 for n in range(17)], dtype=np.uint64)


def _rotl(x: npt.NDArray[np.uint64], r: int) -> npt.NDArray[np.uint64]:
    return (x << _U64(r)) | (x >> _U64(BITS - r))


def _fmix(k: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    k = (k ^ (k >> _U64(33))) * _FMIX1
    k = (k ^ (k >> _U64(33))) * _FMIX2
    return k ^ (k >> _U64(33))


def _word_hashes(
    texts: Sequence[str | bytes], mask_numbers: bool
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.intp]]:
    """mmh3 hashes of the words of every text (as :func:`_words` splits them), and the
    index of the text each word belongs to.

    Vectorised: one ``mmh3`` call per word cost ~0.4 ms of an 8 KB page. A word of up
    to 15 bytes is one tail block of MurmurHash3: a dozen numpy operations over all
    words at once, bit for bit ``mmh3.hash64`` (tested); a longer word goes to ``mmh3``.
    Texts are joined by a newline (translation removed theirs). A bytes text is ASCII
    and hashes as its str would.
    """
    table, ascii_table = _TABLES[mask_numbers], _ASCII_TABLES[mask_numbers]
    joined = b"\n".join(
        t.translate(ascii_table)
        if isinstance(t, bytes)
        else t.lower().replace("\xa0", " ").encode("utf-8", "surrogatepass").translate(table)
        for t in texts
    )
    # A separator at each end, and spare bytes so both 8-byte loads of a word are in bounds.
    a = np.frombuffer(b" " + joined + _PAD, dtype=np.uint8)
    if mask_numbers:  # a run of digits (all "0" now) is one "0" (a regex costs 5x more)
        zero = a == _ZERO
        repeat = zero[1:] & zero[:-1]
        if repeat.any():
            a = a[np.concatenate(([True], ~repeat))]
    word = (a != _SPACE) & (a != _NEWLINE)
    edges = np.flatnonzero(word[1:] != word[:-1]) + 1
    starts, ends = edges[0::2], edges[1::2]
    owner = np.searchsorted(np.flatnonzero(a == _NEWLINE), starts)
    lengths = np.minimum(ends - starts, 16)
    # Every 8-byte little-endian window of the text, unaligned, without a copy.
    windows = np.ndarray((len(a) - 7,), dtype="<u8", buffer=a, strides=(1,))
    k1 = windows[starts] & _LOW_MASK[lengths]
    k2 = windows[starts + 8] & _HIGH_MASK[lengths]
    seed = _U64(_SEED)
    n = (ends - starts).astype(np.uint64)
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps mod 2**64 by design
        h1 = seed ^ (_rotl(k1 * _C1, 31) * _C2) ^ n
        h2 = seed ^ (_rotl(k2 * _C2, 33) * _C1) ^ n
        h1 += h2
        h2 += h1
        h1 = _fmix(h1) + _fmix(h2)
    for i in np.flatnonzero(lengths >= 16).tolist():
        h1[i] = mmh3.hash64(a[starts[i] : ends[i]].tobytes(), _SEED, signed=False)[0]
    return h1, owner


def _shingles(h: npt.NDArray[np.uint64], width: int) -> npt.NDArray[np.uint64]:
    """Hashes of every run of ``width`` consecutive word hashes of ``h``."""
    n = len(h) - width + 1
    acc = np.full(n, _U64(width), dtype=np.uint64)  # the width: "a b" != "a b c" prefix
    with np.errstate(over="ignore"):
        for pos in range(width):
            acc = (acc ^ h[pos : pos + n]) * _POSITION_MUL[pos]
        return _splitmix_finalise(acc)


def _all_shingles(
    texts: Sequence[str | bytes], shingle: int, mask_numbers: bool
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.intp]]:
    """Shingle hashes of every text, one per occurrence, and the text of each."""
    if not 1 <= shingle <= len(_POSITION_MUL):
        raise ValueError(f"shingle must be 1..{len(_POSITION_MUL)}: {shingle!r}")
    h, owner = _word_hashes(texts, mask_numbers)
    if len(h) == 0:
        return h, owner
    hashes: list[npt.NDArray[np.uint64]] = []
    owners: list[npt.NDArray[np.intp]] = []
    if len(h) >= shingle:  # full windows that stay inside one text
        acc = _shingles(h, shingle)
        inside = owner[: len(acc)] == owner[shingle - 1 :]
        hashes.append(acc[inside])
        owners.append(owner[: len(acc)][inside])
    counts = np.bincount(owner, minlength=len(texts))
    short = np.flatnonzero((counts > 0) & (counts < shingle))
    if len(short):  # a text shorter than a shingle is one shingle of all its words
        firsts = np.searchsorted(owner, short)
        for text, first in zip(short.tolist(), firsts.tolist(), strict=True):
            hashes.append(_shingles(h[first : first + counts[text]], int(counts[text])))
            owners.append(np.array([text], dtype=np.intp))
    return np.concatenate(hashes), np.concatenate(owners)


def shingle_hashes(
    text: str | bytes, *, shingle: int = DEFAULT_SHINGLE, mask_numbers: bool = True
) -> npt.NDArray[np.uint64]:
    """64-bit hashes of the overlapping word shingles of ``text``, one per occurrence.

    A text shorter than ``shingle`` words is one shingle of all its words; a text with no
    words has no features.
    """
    return _all_shingles([text], shingle, mask_numbers)[0]


#: A vote within this fraction of its text's total weight of 0 is too close to call
#: by a different summation than :func:`_simhash_of_one`'s (see :func:`_simhashes_of`).
_TIE_MARGIN = 1e-6
#: Row ``v``: the bits of the byte value ``v``, least significant first.
_BYTE_BITS_F = np.unpackbits(
    np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little"
).astype(np.float64)


def _simhashes_of(
    hashes: npt.NDArray[np.uint64], owner: npt.NDArray[np.intp], count: int
) -> list[int | None]:
    """Simhash of each text's features (weights 1 + ln count); None for no features.

    Bit for bit :func:`_simhash_of_one` of each text, for a fraction of the cost
    (~50 instead of ~89 µs a demo page): numpy's cost per call, not per element,
    dominated it. A vote is an integer part (+1 or -1 per distinct feature, counted
    for all texts at once by byte values) plus ``ln count`` of each repeated feature
    (a few a page). Its sign is the one :func:`_simhash_of_one`'s float sum gets
    unless the vote is within rounding of 0 (an exact tie happens: two features
    repeated twice on opposite sides, and an even split of the rest); such a text,
    ~1 in 400 here, is handed to :func:`_simhash_of_one` itself, whose BLAS sum
    decides a tie by its rounding, as it always has.
    """
    out: list[int | None] = [None] * count
    if len(hashes) == 0:
        return out
    if (owner[1:] < owner[:-1]).any():  # texts shorter than a shingle come last
        order = np.argsort(owner, kind="stable")
        hashes, owner = hashes[order], owner[order]
    bounds = np.flatnonzero(np.diff(owner, prepend=-1, append=-1)).tolist()
    starts = bounds[:-1]
    texts = owner[starts].tolist()
    n_texts = len(texts)
    ordered = np.concatenate([np.sort(hashes[a:b]) for a, b in itertools.pairwise(bounds)])
    new = np.empty(len(ordered), dtype=bool)
    new[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    new[starts] = True  # a text's first feature is new even if the text before ends on it
    first = np.flatnonzero(new)
    uniq = ordered[first]
    counts = np.diff(first, append=len(ordered))
    # the text (its rank among those with features) of each distinct feature
    text_of = np.repeat(np.arange(n_texts), np.diff(bounds))[first]
    distinct = np.bincount(text_of, minlength=n_texts)
    # Little-endian bytes: byte k holds bits 8k..8k+7; count each text's byte values.
    octets = uniq.astype("<u8").view(np.uint8).reshape(-1, 8)
    keys = text_of * 256
    values = np.empty((8, n_texts, 256), dtype=np.float64)
    for k in range(8):
        values[k] = np.bincount(keys + octets[:, k], minlength=n_texts * 256).reshape(-1, 256)
    # Counts are integers far below 2**53, so the float product (BLAS; numpy's integer
    # matmul is ~2x slower) is exact; ones[t, 8k + j] counts bit j of byte k.
    ones = (values @ _BYTE_BITS_F).transpose(1, 0, 2).reshape(n_texts, BITS).astype(np.int64)
    votes = 2 * ones - distinct[:, None]  # exact: every weight taken as 1
    repeated = np.flatnonzero(counts > 1)
    close: npt.NDArray[np.bool_] = np.zeros(n_texts, dtype=bool)
    if len(repeated):
        owners = text_of[repeated]
        logs = np.log(counts[repeated].astype(np.float64))
        bits = np.unpackbits(octets[repeated], axis=1, bitorder="little")
        extra = np.zeros((n_texts, BITS), dtype=np.float64)
        np.add.at(extra, owners, logs[:, None] * (2.0 * bits - 1.0))
        weight = distinct + np.bincount(owners, weights=logs, minlength=n_texts)
        full = votes + extra
        close = np.any(np.abs(full) <= _TIE_MARGIN * weight[:, None], axis=1)
        positive = full > 0.0
    else:
        positive = votes > 0
    packed = np.packbits(positive, axis=1, bitorder="little").view("<u8").ravel().tolist()
    for i, text in enumerate(texts):
        if close[i]:
            out[text] = _simhash_of_one(hashes[bounds[i] : bounds[i + 1]])
        else:
            out[text] = int(packed[i])
    return out


def _simhash_of_one(hashes: npt.NDArray[np.uint64]) -> int:
    """One text's simhash, as it was always computed: the reference of
    :func:`_simhashes_of` (tested) and its answer for votes too close to call."""
    uniq, counts = np.unique(hashes, return_counts=True)
    # Little-endian bytes unpacked little-endian: column i is bit i of the hash.
    octets = uniq.astype("<u8").view(np.uint8).reshape(-1, 8)
    bits = np.unpackbits(octets, axis=1, bitorder="little")
    if len(uniq) == len(hashes):  # every weight is 1: an exact integer vote
        votes = 2 * bits.sum(axis=0, dtype=np.int64) - len(uniq)
        packed = np.packbits(votes > 0, bitorder="little")
    else:
        weights = 1.0 + np.log(counts.astype(np.float64))
        votes_f = 2.0 * (weights @ bits) - weights.sum()  # +w for a 1 bit, -w for a 0
        packed = np.packbits(votes_f > 0.0, bitorder="little")
    return int.from_bytes(packed.tobytes(), "little")


def simhash_of(hashes: npt.NDArray[np.uint64]) -> int:
    """Simhash of feature hashes given one per occurrence (weights 1 + ln count)."""
    return _simhashes_of(hashes, np.zeros(len(hashes), dtype=np.intp), 1)[0] or 0


def simhashes(
    texts: Sequence[str | bytes], *, shingle: int = DEFAULT_SHINGLE, mask_numbers: bool = True
) -> list[int | None]:
    """:func:`simhash_or_none` of many texts in one vectorised pass (same values).

    A text may be given as ASCII bytes (its simhash is its str's): parse hands its
    normalized ASCII pages over so, without decoding them to str first.

    Why: numpy's cost per call, not per element, dominates an 8 KB page's simhash;
    the parse stage hands a whole batch of pages here.
    """
    if not texts:
        return []
    hashes, owner = _all_shingles(texts, shingle, mask_numbers)
    return _simhashes_of(hashes, owner, len(texts))


def simhash(text: str, *, shingle: int = DEFAULT_SHINGLE, mask_numbers: bool = True) -> int:
    """64-bit simhash of a page's text (an unsigned int); 0 for a text without words.

    ``mask_numbers`` (default on) makes every digit run equal, so pages that differ only
    in numbers (dates, counters, prices) get the same fingerprint; see the module
    docstring for the measured effect of turning it off.
    """
    return simhashes([text], shingle=shingle, mask_numbers=mask_numbers)[0] or 0


def simhash_or_none(
    text: str, *, shingle: int = DEFAULT_SHINGLE, mask_numbers: bool = True
) -> int | None:
    """Like :func:`simhash`, but None for a text without words.

    Why: :func:`simhash` gives 0 to every wordless text, which would make all of them
    near-duplicates of each other; such pages are left to exact dedup.
    """
    return simhashes([text], shingle=shingle, mask_numbers=mask_numbers)[0]


def to_signed(fingerprint: int) -> int:
    """The fingerprint as a signed 64-bit int (what an Avro ``long`` carries)."""
    fingerprint &= _MASK64
    return fingerprint - (1 << BITS) if fingerprint >> (BITS - 1) else fingerprint


def to_unsigned(value: int) -> int:
    """Inverse of :func:`to_signed`."""
    return value & _MASK64


def hamming(a: int, b: int) -> int:
    """Number of differing bits of two 64-bit fingerprints."""
    return ((a ^ b) & _MASK64).bit_count()


def _band_layout(k: int) -> tuple[tuple[int, int], ...]:
    """(shift, width) of each of the k + 1 bands, as equal as possible, covering 64 bits."""
    if not 0 <= k < BITS:
        raise ValueError(f"k must be 0..{BITS - 1}: {k!r}")
    n = k + 1
    out = []
    shift = 0
    for i in range(n):
        width = BITS // n + (1 if i < BITS % n else 0)
        out.append((shift, width))
        shift += width
    return tuple(out)


_LAYOUTS: dict[int, tuple[tuple[int, int], ...]] = {}


def bands(fingerprint: int, k: int = DEFAULT_DISTANCE) -> list[int]:
    """The ``k + 1`` band keys of a fingerprint: any two within distance ``k`` share one.

    For ``k = 3``: four 16-bit bands.  Key ``i`` is ``i << w | band_i`` where ``w`` is
    the widest band's width, so keys of different bands never collide and, for k >= 1,
    every key fits in 64 bits (Avro long, Kafka key, table key).
    """
    layout = _LAYOUTS.get(k)
    if layout is None:
        layout = _LAYOUTS[k] = _band_layout(k)
    top = layout[0][1]
    fingerprint &= _MASK64
    return [(i << top) | ((fingerprint >> s) & ((1 << w) - 1)) for i, (s, w) in enumerate(layout)]


Bucket = list[tuple[int, str]]


def _entries(raw: Iterable[Sequence[int | str]] | None) -> Bucket:
    return [(int(fp), str(u)) for fp, u in (raw or ())]


def band_closest(
    raw: Iterable[Sequence[int | str]] | None, url: str, fingerprint: int, threshold: int
) -> tuple[str, int] | None:
    """(URL, distance) of the closest entry of one band bucket within ``threshold``.

    Entries of ``url`` itself never match (a recrawl is not a duplicate of itself); ties
    go to the earliest indexed entry.  ``raw`` is a bucket as stored: pairs of
    (fingerprint, URL), lists or tuples.
    """
    best: tuple[str, int] | None = None
    for fp, other in _entries(raw):
        if other == url:
            continue
        d = hamming(fp, fingerprint)
        if d <= threshold and (best is None or d < best[1]):
            best = (other, d)
            if d == 0:
                break
    return best


def band_with(
    raw: Iterable[Sequence[int | str]] | None, url: str, fingerprint: int, max_bucket: int
) -> Bucket | None:
    """The bucket with (fingerprint, url) added, or None when it is unchanged.

    A full bucket (``max_bucket`` entries) stays as it is: see :class:`NearDupIndex`.
    """
    bucket = _entries(raw)
    entry = (fingerprint & _MASK64, url)
    if len(bucket) >= max_bucket or entry in bucket:
        return None
    return [*bucket, entry]


class NearDupIndex:
    """Band-keyed index of fingerprints: ``add`` answers "is this a near-duplicate?".

    ``table`` maps a band key to a list of ``(fingerprint, url)`` pairs (a dict, or a
    Faust table: each bucket is read, copied and written back whole, so a table that
    serialises values -- tuples become lists -- works).  Pure: no I/O of its own.
    ``threshold`` is the largest Hamming distance that counts as a near-duplicate and
    the banding's ``k``: a page is filed under ``threshold + 1`` band keys (4 x 16 bits
    for the default 3), so every indexed page within ``threshold`` is found.

    Choices:

    * A page found to be a near-duplicate is *not* indexed: the first page of a cluster
      represents it, so a chain of small edits cannot drift arbitrarily far from it.
    * Entries of the same URL never match each other (a recrawl is not a duplicate of
      itself); a changed page is indexed again under its new fingerprint.
    * A bucket stops growing at ``max_bucket`` entries (it is still searched): a band
      value shared by a huge template family must not turn each ``add`` into a scan of
      millions.  Pages beyond the cap are not findable through that band; the other
      bands still find them.
    """

    def __init__(
        self,
        table: MutableMapping[int, list[tuple[int, str]]] | None = None,
        *,
        threshold: int = DEFAULT_DISTANCE,
        max_bucket: int = 256,
    ) -> None:
        if not 0 <= threshold < BITS:
            raise ValueError(f"threshold must be 0..{BITS - 1}: {threshold!r}")
        if max_bucket < 1:
            raise ValueError("max_bucket must be positive")
        self.table: MutableMapping[int, list[tuple[int, str]]] = {} if table is None else table
        self.threshold = threshold
        self.max_bucket = max_bucket

    def find(self, url: str, fingerprint: int) -> str | None:
        """URL of an indexed page (another URL) within ``threshold``, else None.

        Of several candidates the closest wins, ties going to the earliest indexed.
        """
        best: tuple[str, int] | None = None
        for key in bands(fingerprint, self.threshold):
            hit = band_closest(self.table.get(key), url, fingerprint, self.threshold)
            if hit is not None and (best is None or hit[1] < best[1]):
                best = hit
                if hit[1] == 0:
                    break
        return None if best is None else best[0]

    def add(self, url: str, fingerprint: int) -> str | None:
        """Index ``url`` unless it near-duplicates an indexed page; return that page's URL."""
        found = self.find(url, fingerprint)
        if found is not None:
            return found
        for key in bands(fingerprint, self.threshold):
            bucket = band_with(self.table.get(key), url, fingerprint, self.max_bucket)
            if bucket is not None:
                self.table[key] = bucket
        return None


class BandStep(NamedTuple):
    """What one band of the content-dedup chain decided for one page.

    ``near``: (original URL, distance) when the page is a near-duplicate (the chain ends);
    ``bucket``: the band bucket to write back (None: unchanged); ``next_band``: the band
    to visit next, or None when the page has passed every band and is a first copy.
    """

    near: tuple[str, int] | None
    bucket: Bucket | None
    next_band: int | None


def band_step(
    raw: Iterable[Sequence[int | str]] | None,
    url: str,
    fingerprint: int,
    band: int,
    *,
    threshold: int = DEFAULT_DISTANCE,
    max_bucket: int = 256,
) -> BandStep:
    """One hop of near-duplicate detection spread over partitions, one band per hop.

    Why a chain: band ``i``'s bucket lives in the partition of its band key, so a page
    visits its ``threshold + 1`` band partitions one after the other (the message
    carries the page and the next band's index).  At each it is compared with the
    bucket there and, if it is no near-duplicate, filed in it before moving on.  Two
    first copies within ``threshold`` share a band (pigeonhole); whichever reaches that
    band's partition second finds the other already filed, because a partition handles
    its messages one at a time.  So no two pages that both pass the whole chain are
    within ``threshold`` of each other, whatever the interleaving across partitions
    and workers (tested by simulation).  A page found at band ``i`` stays filed in the
    bands before ``i``: a later page may then be called a near-duplicate of it, and
    readers follow that pointer to its own original.
    """
    nxt = band + 1 if band + 1 <= threshold else None
    fingerprint &= _MASK64
    if not raw:  # most buckets a page visits are empty: it is filed there alone
        return BandStep(None, [(fingerprint, url)], nxt)
    # band_closest and band_with in one pass over the bucket (each converted it on its
    # own); tests/unit/test_simhash.py checks the two spellings agree
    bucket = _entries(raw)
    best: tuple[str, int] | None = None
    filed = False
    for fp, other in bucket:
        if other == url:
            filed = filed or fp == fingerprint
            continue
        d = ((fp ^ fingerprint) & _MASK64).bit_count()
        if d <= threshold and (best is None or d < best[1]):
            best = (other, d)
            if d == 0:
                break
    if best is not None:
        return BandStep(best, None, None)
    if filed or len(bucket) >= max_bucket:
        return BandStep(None, None, nxt)
    bucket.append((fingerprint, url))
    return BandStep(None, bucket, nxt)
