"""Page store: every stored page retrievable by URL, kept as WARC 1.1 plus a RocksDB index.

Why this shape
--------------
* **WARC segments** (``streams.store.segments``) are the archival format every
  web-archive tool reads (warcio, pywb, OpenWayback, ...), so a crawl can be replayed
  or handed to someone else without this code.  Each record is its own gzip member,
  which makes ``(offset, length)`` address exactly one record: a reader seeks, reads
  ``length`` bytes and decompresses only that.  Every segment starts with a
  ``warcinfo`` record, is rotated at ``segment_max_bytes``, never appended to after a
  reopen, and named uniquely across processes and machines.
* **The index** (``index/``, a RocksDB database through rocksdict in raw mode;
  ``streams.store.index``) maps ``url + b"\\x00" + big-endian uint64 microseconds`` to
  a compact record pointer.  All captures of one URL are contiguous and time-ordered:
  the latest capture is one ``seek_for_prev``.  The pointer (index value version 2) also
  keeps where the record's parts lie once inflated -- its size, the start of the HTTP
  block and of the payload -- so a read inflates the one gzip member into a buffer of
  the right size and slices it, checking only that the offsets fit this record, instead
  of parsing WARC and HTTP headers (``gzipmembers.slice_record``).  Entries of version
  1 (stores written before) have no offsets and are read by parsing.
* **Write order** is WARC bytes first (flushed to the OS), index second: a crash between
  leaves an orphan WARC record, never an index entry pointing at missing bytes.
  ``flush()`` also fsyncs the segment and the RocksDB WAL (before a Kafka commit).
* **Re-delivery is idempotent**: the index key is ``(url, fetched_at)``, so a message
  replayed after a crash overwrites the same index entries (the WARC copy is an orphan).

Choices worth knowing about
---------------------------
* **Decoded bodies, header hygiene.**  The stored HTTP block is made self-consistent
  with the decoded body and ASCII (``streams.store.warc``); ``Capture.headers`` returns
  the *stored* headers.
* **``get(url, at=T)``** returns the latest capture fetched at or before ``T`` (the page
  "as of" T, like a point-in-time read), or ``None`` if the first capture is after ``T``.
* **Revisits.**  ``put_revisit`` writes a ``revisit`` record (profile
  identical-payload-digest, WARC 1.1) with only the HTTP headers.  ``get`` follows
  ``revisit_of`` to the original capture (the latest capture of ``original_url`` at or
  before ``original_date`` with the same payload digest, or any capture of it with that
  digest) and returns *its* body.  If the original is missing the body is ``b""`` and a
  warning is logged.  The ``Capture`` *returned by* ``put_revisit``/``put_many`` for a
  revisit has ``body=b""``: resolving it would cost a read per duplicate on the hot path.
* **Not thread-safe.**  One ``PageStore`` per thread (or an external lock).  One writer
  per directory (RocksDB's lock enforces it); any number of ``read_only=True`` readers,
  each seeing the index as of the moment it was opened.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

from rocksdict import AccessType, BlockBasedOptions, Cache, Options, Rdict, WriteBatch

from streams.store import cdxj
from streams.store.gzipmembers import HTTP_SCHEMES, Record, read_record, slice_record
from streams.store.index import (
    FLAG_NEAR_DUP,
    FLAG_REVISIT,
    FLAG_TRUNCATED,
    MAX_MICROS,
    MICROS,
    VAL_HEAD2,
    VAL_VERSION2,
    Entry,
    decode,
    encode_value,
    key_prefix,
    make_key,
    url_bytes,
)
from streams.store.segments import ReadHandles, SegmentWriter, writer_tag
from streams.store.warc import Pending, mime_of, response_pending, revisit_pending, to_micros

__all__ = ["Capture", "PageStore", "ReadOnlyError"]

log = logging.getLogger(__name__)

_INDEX_CACHE_BYTES = 64 << 20  # RocksDB block cache of the index, per store
_READ_HANDLES = 64  # open segment file descriptors kept for reads (LRU)
_REVISIT_DEPTH = 8  # how many revisit->original hops get() follows before giving up


class ReadOnlyError(PermissionError):
    """Raised when writing to a store opened with ``read_only=True``."""


@dataclass(frozen=True)
class Capture:
    """One stored fetch of a URL, with where it lives in the WARC segments.

    ``headers`` are the HTTP headers as stored (see ``streams.store.warc`` for the
    Content-Encoding rename).  For a revisit, ``body`` is the original capture's body and
    ``revisit_of`` the original's URL; ``digest`` is the shared payload digest.
    """

    url: str
    fetched_at: float
    status: int
    headers: list[tuple[str, str]]
    body: bytes = field(repr=False)
    ip: str | None
    digest: str
    segment: str
    offset: int
    length: int
    truncated: bool
    revisit_of: str | None
    near_duplicate_of: str | None = None


class PageStore:
    """WARC 1.1 segments + RocksDB index; see the module docstring for the design."""

    def __init__(
        self,
        path: str | Path,
        *,
        segment_max_bytes: int = 1 << 30,
        read_only: bool = False,
        writer_id: str | None = None,
        index_cache_bytes: int = _INDEX_CACHE_BYTES,
    ) -> None:
        self.path = Path(path)
        self.writer_id = writer_tag(writer_id)
        self.read_only = read_only
        self._seg_dir = self.path / "segments"
        index_dir = self.path / "index"
        opts = Options(raw_mode=True)
        # A block cache that holds the hot part of the index: RocksDB's default (8 MB)
        # is a ninth of a million-page index, so random reads kept re-reading and
        # re-checksumming blocks through the OS.
        table = BlockBasedOptions()
        table.set_block_cache(Cache(max(1 << 20, index_cache_bytes)))
        opts.set_block_based_table_factory(table)
        if read_only:
            # (CURRENT, not the directory: a writer starting up makes the directory
            # first, and RocksDB's open then failed with a bare IO error, not this)
            if not (index_dir / "CURRENT").is_file():
                raise FileNotFoundError(f"no page store index at {index_dir}")
            # error_if_log_file_exist=False: a live writer always has a WAL; the
            # read-only open replays it, so we see everything written before we opened.
            self._db = Rdict(str(index_dir), opts, access_type=AccessType.read_only(False))
        else:
            self._seg_dir.mkdir(parents=True, exist_ok=True)
            opts.create_if_missing(True)
            self._db = Rdict(str(index_dir), opts)
        self._reads = ReadHandles(self._seg_dir, _READ_HANDLES)
        # One iterator serves every lookup (creating one per get() was ~5% of a read);
        # it sees the index as of its creation, so every index write drops it.
        self._lookup_it: Any = None
        self._segments = SegmentWriter(self._seg_dir, self.writer_id, segment_max_bytes)
        self._last_auto_micros = 0
        self._closed = False

    @property
    def segment_max_bytes(self) -> int:
        """Size past which the current segment is closed and the next record opens one."""
        return self._segments.segment_max_bytes

    @segment_max_bytes.setter
    def segment_max_bytes(self, value: int) -> None:
        self._segments.segment_max_bytes = value

    # ------------------------------------------------------------------ context manager

    def __enter__(self) -> PageStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ writes

    def put(
        self,
        url: str,
        *,
        status: int,
        headers: list[tuple[str, str]],
        body: bytes,
        fetched_at: float | None = None,
        ip: str | None = None,
        truncated: bool = False,
        near_duplicate_of: str | None = None,
        near_distance: int = 0,
        simhash: int | None = None,
    ) -> Capture:
        """Store one response; a batch of one (see ``put_many``).

        ``near_duplicate_of`` marks the page as a near-duplicate of that URL's page: it
        is stored whole (its bytes differ), followed by a ``metadata`` record that
        refers to it and names the original, the simhash distance and the simhash.
        """
        self._check_writable()
        return self._write_batch(
            [
                response_pending(
                    url,
                    self._fetch_micros,
                    status=status,
                    headers=headers,
                    body=body,
                    fetched_at=fetched_at,
                    ip=ip,
                    truncated=truncated,
                    near_duplicate_of=near_duplicate_of,
                    near_distance=near_distance,
                    simhash=simhash,
                )
            ]
        )[0]

    def put_revisit(
        self,
        url: str,
        *,
        original_url: str,
        original_digest: str,
        original_date: float,
        status: int,
        headers: list[tuple[str, str]],
        fetched_at: float | None = None,
        ip: str | None = None,
    ) -> Capture:
        """Store an exact duplicate as a revisit record (no body written twice)."""
        self._check_writable()
        return self._write_batch(
            [
                revisit_pending(
                    url,
                    self._fetch_micros,
                    original_url=original_url,
                    original_digest=original_digest,
                    original_date=original_date,
                    status=status,
                    headers=headers,
                    fetched_at=fetched_at,
                    ip=ip,
                )
            ]
        )[0]

    def put_many(self, items: list[dict[str, Any]], *, captures: bool = True) -> list[Capture]:
        """Store many pages with one segment flush and one index WriteBatch.

        Each item holds ``put``'s keyword arguments plus ``"url"``; an item with an
        ``"original_url"`` key takes ``put_revisit``'s instead.  Every item is validated
        before anything is written, so a bad item fails the batch without side effects.
        ``captures=False`` returns an empty list: link-extract, which stores and never
        reads them back, does not pay for a ``Capture`` (and a copy of its headers) a
        page.
        """
        return self._write_batch([self._pending(item) for item in items], captures)

    def flush(self) -> None:
        """Make everything written so far durable (segment fsync + synced WAL)."""
        if self.read_only or self._closed:
            return
        self._segments.flush(fsync=True)
        self._db.flush_wal(True)

    def close(self) -> None:
        """Flush and release the segment, the read descriptors and the index lock."""
        if self._closed:
            return
        try:
            if not self.read_only:
                self.flush()
            self._segments.close_segment()
        finally:
            self._reads.close()
            self._lookup_it = None
            self._db.close()
            self._closed = True

    # ------------------------------------------------------------------ reads

    def get(
        self, url: str, at: float | None = None, *, follow_revisits: bool = True
    ) -> Capture | None:
        """Latest capture of ``url``; with ``at``, the latest fetched at or before ``at``.

        One index seek and one segment read (plus the same again for a revisit's
        original, unless ``follow_revisits`` is False: then its body is empty).
        Returns None if there is no such capture."""
        self._check_open()
        at_micros: int | None = None
        if at is not None:
            if at != at:
                raise ValueError("at is NaN")
            if at < 0:
                return None
            # Any time past the last representable one means "latest".
            at_micros = MAX_MICROS if at >= 2**63 / 1e6 else min(round(at * 1e6), MAX_MICROS)
        found = self._seek(url_bytes(url), at_micros)
        if found is None:
            return None
        key, value = found
        if value[0] == VAL_VERSION2 and not value[1] & FLAG_REVISIT:
            capture = self._get_sliced(url, key, value)
            if capture is not None:
                return capture
        return self._load(decode(key, value), follow_revisits)

    def fetched_since(self, url: str, since: float) -> bool:
        """Is a capture of `url` fetched at or after `since` (unix seconds) stored? One
        index seek, no segment read: how a worker adopting a host tells a fetch in
        flight at a crash whose page got stored from one to do again."""
        self._check_open()
        try:
            found = self._seek(url_bytes(url), None)
        except ValueError:
            return False
        return found is not None and MICROS.unpack(found[0][-8:])[0] >= to_micros(since)

    def __contains__(self, url: object) -> bool:
        self._check_open()
        if not isinstance(url, str):
            return False
        try:
            prefix = key_prefix(url_bytes(url))
        except ValueError:
            return False
        it = self._db.iter()
        it.seek(prefix)
        return bool(it.valid() and bytes(it.key()).startswith(prefix))

    def urls(self) -> Iterator[str]:
        """Every stored URL once, in byte order of its UTF-8 form (== code point order)."""
        self._check_open()
        it = self._db.iter()
        it.seek_to_first()
        last: bytes | None = None
        while it.valid():
            url_b = bytes(it.key())[:-9]
            if url_b != last:
                yield url_b.decode("utf-8", "surrogateescape")
                last = url_b
            it.next()

    def url_kinds(self) -> Iterator[tuple[str, str | None]]:
        """Every stored URL once, with the URL its newest capture is a copy of, or None."""
        self._check_open()
        it, newest = self._db.iter(), dict[str, str | None]()  # a URL's keys come together
        it.seek_to_first()
        while it.valid():
            key = bytes(it.key())
            url = key[:-9].decode("utf-8", "surrogateescape")
            if url not in newest:
                yield from newest.items()
                newest.clear()
            original = decode(key, bytes(it.value())).revisit_of  # the keys go oldest first
            newest[url] = original if original not in (None, url) else None
            it.next()
        yield from newest.items()

    def captures(self, url: str) -> list[Capture]:
        """All captures of ``url``, oldest first."""
        self._check_open()
        return [self._load(e) for e in self._entries(url_bytes(url))]

    def responses(self, url: str) -> Iterator[Capture]:
        """The captures of ``url`` that hold a body of their own, oldest first, one read
        each: revisit records are left out unread (their body is another capture's)."""
        self._check_open()
        for e in self._entries(url_bytes(url)):
            if e.revisit_of is None:
                yield self._load(e)

    def export_cdxj(self, out: TextIO) -> int:
        """Write a sorted CDXJ index of every capture (pywb's format); return line count.

        Lines are ``SURT-key 14-digit-timestamp {json}`` with url, mime, status, digest
        (base32, no ``sha1:``), length and offset (of the gzip member) and filename
        (segment name, relative: pywb resolves it against its archive paths).  Built from
        the index alone, no segment reads.  The index is URL-ordered, not SURT-ordered, so
        lines are sorted in chunks spilled to temp files and merged: bounded memory.
        """
        self._check_open()
        return cdxj.export(self._db, out)

    # ------------------------------------------------------------------ internals: write

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("PageStore is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self.read_only:
            raise ReadOnlyError("PageStore was opened read_only")

    def _fetch_micros(self, fetched_at: float | None) -> int:
        if fetched_at is not None:
            return to_micros(fetched_at)
        # Strictly increasing, so two un-timed puts of one URL never share an index key.
        micros = max(time.time_ns() // 1000, self._last_auto_micros + 1)
        self._last_auto_micros = micros
        return micros

    def _pending(self, item: dict[str, Any]) -> Pending:
        """One ``put_many`` item, validated into the record to write."""
        self._check_writable()
        kw = dict(item)
        url = kw.pop("url")
        if "original_url" in kw:
            return revisit_pending(url, self._fetch_micros, **kw)
        return response_pending(url, self._fetch_micros, **kw)

    def _write_batch(self, pending: list[Pending], with_captures: bool = True) -> list[Capture]:
        """WARC records first (flushed), then one index WriteBatch: see module docstring.
        ``with_captures=False``: the same writes, an empty list returned."""
        if not pending:
            return []
        batch = WriteBatch(raw_mode=True)
        captures: list[Capture] = []
        for p in pending:
            try:
                segment, offset, length, layout = self._segments.write(p)
            except BaseException:
                # The segment may now end in a torn gzip member; never append after one.
                with contextlib.suppress(OSError):
                    self._segments.close_segment()
                raise
            mime = "warc/revisit" if p.revisit_of is not None else mime_of(p.headers)
            batch.put(
                make_key(p.url_b, p.micros),
                encode_value(
                    status=p.status,
                    segment=segment,
                    offset=offset,
                    length=length,
                    digest=p.digest,
                    mime=mime,
                    truncated=p.truncated,
                    revisit_of=p.revisit_of,
                    orig_micros=p.orig_micros,
                    near_duplicate_of=p.near_of,
                    raw_len=layout[0],
                    http_start=layout[1],
                    body_start=layout[2],
                ),
            )
            if not with_captures:
                continue
            captures.append(
                Capture(
                    url=p.url,
                    fetched_at=p.micros / 1_000_000,
                    status=p.status,
                    headers=list(p.headers),
                    body=p.body if p.body is not None else b"",
                    ip=p.ip,
                    digest=p.digest,
                    segment=segment,
                    offset=offset,
                    length=length,
                    truncated=p.truncated,
                    revisit_of=p.revisit_of,
                    near_duplicate_of=p.near_of,
                )
            )
        self._segments.flush(fsync=False)
        self._lookup_it = None
        self._db.write(batch)
        return captures

    # ------------------------------------------------------------------ internals: read

    def _lookup(self, url_b: bytes, at_micros: int | None) -> Entry | None:
        found = self._seek(url_b, at_micros)
        return None if found is None else decode(*found)

    def _seek(self, url_b: bytes, at_micros: int | None) -> tuple[bytes, bytes] | None:
        """Key and value of the latest capture at or before ``at_micros`` (None: latest)."""
        prefix = key_prefix(url_b)
        it = self._lookup_it
        if it is None:
            it = self._lookup_it = self._db.iter()
        it.seek_for_prev(prefix + MICROS.pack(MAX_MICROS if at_micros is None else at_micros))
        if not it.valid():
            return None
        key = bytes(it.key())
        if not key.startswith(prefix) or len(key) != len(prefix) + 8:
            return None
        return key, bytes(it.value())

    def _get_sliced(self, url: str, key: bytes, value: bytes) -> Capture | None:
        """``get()`` of a version-2 response entry, straight from the value's bytes.

        The hot path of a read: no ``Entry`` in between, the URL is the caller's, and
        the record is cut at the entry's offsets (``slice_record``).  None if the
        record does not fit them (the caller then parses it) or is not http(s).
        """
        if not url.startswith(HTTP_SCHEMES):
            return None
        (
            _v,
            flags,
            status,
            offset,
            length,
            _orig,
            raw_len,
            http_start,
            body_start,
            n_seg,
            n_dig,
            n_mime,
            n_other,
        ) = VAL_HEAD2.unpack_from(value)
        a = VAL_HEAD2.size
        b = a + n_seg
        segment = value[a:b].decode("utf-8", "surrogateescape")
        rec = slice_record(
            self._reads.pread(segment, offset, length), raw_len, http_start, body_start
        )
        if rec is None:
            return None
        c = b + n_dig
        d = c + n_mime
        return Capture(
            url,
            MICROS.unpack_from(key, len(key) - 8)[0] / 1_000_000,
            status,
            rec.headers,
            rec.body,
            rec.ip,
            value[b:c].decode("utf-8", "surrogateescape"),
            segment,
            offset,
            length,
            bool(flags & FLAG_TRUNCATED),
            None,
            value[d : d + n_other].decode("utf-8", "surrogateescape")
            if flags & FLAG_NEAR_DUP
            else None,
        )

    def _entries(self, url_b: bytes) -> Iterator[Entry]:
        prefix = key_prefix(url_b)
        it = self._db.iter()
        it.seek(prefix)
        while it.valid():
            key = bytes(it.key())
            if not key.startswith(prefix):
                return
            if len(key) == len(prefix) + 8:
                yield decode(key, bytes(it.value()))
            it.next()

    def _read_record(self, e: Entry) -> Record:
        """HTTP headers, WARC-IP-Address and payload of the record at ``e``."""
        return read_record(self._reads.pread(e.segment, e.offset, e.length), e)

    def _load(self, e: Entry, follow_revisits: bool = True) -> Capture:
        headers, ip, body = self._read_record(e)
        if e.revisit_of is not None:
            body = self._original_body(e) if follow_revisits else b""
        return Capture(
            url=e.url,
            fetched_at=e.micros / 1_000_000,
            status=e.status,
            headers=headers,
            body=body,
            ip=ip,
            digest=e.digest,
            segment=e.segment,
            offset=e.offset,
            length=e.length,
            truncated=e.truncated,
            revisit_of=e.revisit_of,
            near_duplicate_of=e.near_duplicate_of,
        )

    def _original_body(self, e: Entry) -> bytes:
        """Body of the response a revisit points at, following revisit chains."""
        for _ in range(_REVISIT_DEPTH):
            if e.revisit_of is None:
                return self._read_record(e).body
            orig_b = url_bytes(e.revisit_of)
            cand = self._lookup(orig_b, e.orig_micros)
            if cand is None or cand.digest != e.digest:
                same = [c for c in self._entries(orig_b) if c.digest == e.digest]
                cand = same[-1] if same else None
            if cand is None:
                break
            e = cand
        log.warning("revisit of %s: original %s not found in page store", e.url, e.revisit_of)
        return b""
