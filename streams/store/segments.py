"""WARC segment files: their names, the writer that appends records and rotates them,
and the descriptors reads go through.

A segment is ``segments/seine-<yyyymmddhhmmss>-<seq>-<writer>-<random>.warc.gz``: one
gzip member a record (``streams.store.gzipmembers``), starting with a ``warcinfo``
record.  A segment is closed once it has passed ``segment_max_bytes`` and the next
record opens a new one; a reopened store never appends to an existing segment (the
tail of a segment written by a crashed process may be a torn gzip member, and appending
after it would hide every later record from sequential readers).  The name is unique
across processes and machines: ``<writer>`` is the writer's id (the worker's, or host
name and pid by default) and ``<random>`` 32 random bits, so segments of many workers
can share one directory or bucket, and a CDXJ ``filename`` names one file.  Only the
standard library and warcio.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
from collections import OrderedDict
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from warcio.warcwriter import WARCWriter

from streams.store.gzipmembers import GzipMembers
from streams.store.warc import (
    Pending,
    near_dup_metadata,
    revisit_record,
    warcinfo_record,
    write_response,
)

# seine-<yyyymmddhhmmss>-<seq>[-<writer>-<random hex>].warc.gz (older stores lack the tail)
SEGMENT_RE = re.compile(r"^seine-(\d{14})-(\d+)(?:-([A-Za-z0-9._]+)-([0-9a-f]+))?\.warc\.gz$")
_WRITER_UNSAFE_RE = re.compile(r"[^A-Za-z0-9._]+")


def writer_tag(writer_id: str | None) -> str:
    """The writer part of segment names: the given id, else host name and process id.

    Only ``[A-Za-z0-9._]`` survive (other runs become ``_``) so the name stays a safe
    file name and object key and the ``-`` separators stay unambiguous.
    """
    if writer_id is None or not writer_id.strip():
        writer_id = f"{socket.gethostname().split('.')[0]}_{os.getpid()}"
    return _WRITER_UNSAFE_RE.sub("_", writer_id.strip())[:48] or "w"


def next_seq(seg_dir: Path) -> int:
    """Next segment sequence number: a reopened store never reuses a name."""
    best = 0
    if seg_dir.is_dir():
        for entry in os.scandir(seg_dir):
            m = SEGMENT_RE.match(entry.name)
            if m:
                best = max(best, int(m.group(2)))
    return best + 1


class ReadHandles:
    """LRU of read-only descriptors, so a get() is one pread and no open()."""

    def __init__(self, directory: Path, capacity: int) -> None:
        self._dir = directory
        self._cap = capacity
        self._fds: OrderedDict[str, int] = OrderedDict()

    def pread(self, segment: str, offset: int, length: int) -> bytes:
        fd = self._fds.get(segment)
        if fd is None:
            if "/" in segment or segment.startswith("."):
                raise ValueError(f"bad segment name in index: {segment!r}")
            fd = os.open(self._dir / segment, os.O_RDONLY)
            self._fds[segment] = fd
            if len(self._fds) > self._cap:
                _, old = self._fds.popitem(last=False)
                os.close(old)
        else:
            self._fds.move_to_end(segment)
        data = os.pread(fd, length, offset)
        if len(data) != length:
            raise OSError(f"short read in {segment} at {offset}: {len(data)} of {length} bytes")
        return data

    def close(self) -> None:
        while self._fds:
            _, fd = self._fds.popitem()
            os.close(fd)


class SegmentWriter:
    """Appends records to the current segment, opening and rotating segments.

    ``write`` returns where a record landed and, for the index, where its parts lie
    once inflated.  After a write that fails part-way the caller must call
    ``close_segment`` (the segment may end in a torn member; never append after one).
    """

    def __init__(self, seg_dir: Path, writer_id: str, segment_max_bytes: int) -> None:
        self.seg_dir = seg_dir
        self.writer_id = writer_id
        self.segment_max_bytes = segment_max_bytes
        self._writer: WARCWriter | None = None
        self._members: GzipMembers | None = None
        self._out: IO[bytes] | None = None
        self._segment: str | None = None
        self._next_seq = next_seq(seg_dir)

    def write(self, p: Pending) -> tuple[str, int, int, tuple[int, int, int]]:
        """Write one record; return its segment, offset, length and inflated layout.

        The layout (inflated size, start of the HTTP block, start of the payload) follows
        from how warcio lays a record out -- WARC headers, HTTP headers, payload, CRLF
        CRLF -- and the sizes we know: the member's inflated size, counted as it is
        deflated, the HTTP header block and the body.  A response is written by hand
        (``write_response``), a revisit through warcio.
        """
        writer, members, out, segment = self._current_segment()
        offset = out.tell()
        if p.revisit_of is None:
            assert p.body is not None
            record_id, http_len = write_response(members, p)
            length = len(p.body)
        else:
            record = revisit_record(writer, p)
            writer.write_record(record)
            record_id = record.rec_headers.get_header("WARC-Record-ID")
            http_len, length = len(record.http_headers.headers_buff), 0
        end = out.tell()
        raw_len = members.last_member_raw
        body_start = raw_len - 4 - length
        http_start = body_start - http_len
        if p.near_of is not None:
            # In the same segment, right after the response it describes.
            writer.write_record(near_dup_metadata(writer, p, record_id))
        if end >= self.segment_max_bytes:
            self.close_segment()
        return segment, offset, end - offset, (raw_len, http_start, body_start)

    def flush(self, *, fsync: bool) -> None:
        """Hand the segment's buffered bytes to the OS; with ``fsync``, to the disk."""
        if self._out is not None:
            self._out.flush()
            if fsync:
                os.fsync(self._out.fileno())

    def close_segment(self) -> None:
        out, self._out, self._writer, self._segment = self._out, None, None, None
        self._members = None
        if out is not None:
            try:
                out.flush()
                os.fsync(out.fileno())
            finally:
                out.close()

    def _current_segment(self) -> tuple[WARCWriter, GzipMembers, IO[bytes], str]:
        if (
            self._writer is None
            or self._members is None
            or self._out is None
            or self._segment is None
        ):
            stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
            name = f"seine-{stamp}-{self._next_seq:05d}-{self.writer_id}-{secrets.token_hex(4)}"
            name += ".warc.gz"
            self._next_seq += 1
            out = open(self.seg_dir / name, "xb", buffering=1 << 20)  # noqa: SIM115
            self._members = GzipMembers(out)
            writer = WARCWriter(self._members, gzip=False, warc_version="1.1")
            writer.write_record(warcinfo_record(writer, name))
            self._writer, self._out, self._segment = writer, out, name
        return self._writer, self._members, self._out, self._segment
