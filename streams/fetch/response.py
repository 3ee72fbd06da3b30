"""Reading a response: the `ResponseView` handlers get, and the Retry-After header.

`CappedResponse` reads the body once, decoded (streams/core/decode.py) and capped,
and records in a `Progress` how far the fetch got, so a failure can say what timed
out and keep the partial bytes. A body that came whole with the head is taken as
it is; a compressed one whose wire bytes run far past the cap is cut off too.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import aiohttp

from streams.core.decode import decoder_for
from streams.fetch.handlers import Body, normalize_type

__all__ = ["CappedResponse", "Progress", "parse_retry_after"]


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (delta or HTTP-date); None if unusable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        from email.utils import parsedate_to_datetime

        when = parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


@dataclass
class Progress:
    """Where a fetch is, so a failure can say what timed out and keep partial bytes."""

    phase: str = "connect"
    partial: list[bytes] = field(default_factory=list)
    wire_bytes: int = 0


class CappedResponse:
    """The `ResponseView` handlers get: one read, decoded, capped."""

    def __init__(
        self, raw: aiohttp.ClientResponse, url: str, max_body_bytes: int, progress: Progress
    ) -> None:
        self._raw = raw
        self.url = url
        self.status = raw.status
        self.content_type = raw.headers.get("Content-Type", "")
        self.mime = normalize_type(self.content_type)
        self.headers: Mapping[str, str] = raw.headers
        self.max_body_bytes = max_body_bytes
        self._progress = progress
        self.truncated = False
        self.complete = False  # read to the end: the connection may go back to the pool
        self.over_wire_cap = False
        self._read = False

    @property
    def wire_bytes(self) -> int:
        return self._progress.wire_bytes

    async def read(self, cap: int | None = None) -> Body:
        if self._read:
            raise RuntimeError("the body can be read once")
        self._read = True
        cap = self.max_body_bytes if cap is None else max(0, cap)
        self._progress.phase = "body"
        decoder = decoder_for(self._raw.headers.get("Content-Encoding", ""))
        # Compressed input far beyond the cap can only be a stream that decodes to
        # (almost) nothing, e.g. endless empty gzip members: stop reading it too.
        wire_cap = cap + cap // 8 + 65536
        out = self._progress.partial
        size = 0
        progress = self._progress
        content = self._raw.content
        if decoder is None and content.is_eof():
            # The whole body came with the head (most pages on a fast link): take it
            # as it is, without the chunk iterator; the outcome is the loop's.
            data = content.read_nowait()
            progress.wire_bytes += len(data)
            if len(data) > cap:
                out.append(data[:cap])
                self.truncated = True
            else:
                out.append(data)
                self.complete = True
            return Body(b"".join(out), self.truncated)
        async for chunk in content.iter_chunked(65536):
            progress.wire_bytes += len(chunk)
            data = chunk if decoder is None else decoder.decode(chunk, cap - size + 1)
            if size + len(data) > cap:
                out.append(data[: cap - size])
                size = cap
                self.truncated = True
                break
            out.append(data)
            size += len(data)
            if decoder is not None and progress.wire_bytes > wire_cap:
                self.truncated = self.over_wire_cap = True
                break
        else:
            if decoder is not None and progress.wire_bytes:
                decoder.finish()
            self.complete = True
        return Body(b"".join(out), self.truncated)
