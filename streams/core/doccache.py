"""The documents a worker sent lately, as sent: what a resend with new anchors starts
from, instead of reading the page back from the store and extracting its text again
(~1 ms a page against ~0.05 ms to decode, set the anchors and encode).

Bounded in bytes, least recently sent first out; a page that fell out is rebuilt
from the page store. Documents are kept LZ4-compressed (~6 µs an 8 KB document both
ways; HTML text shrinks to about 40%), so the bound holds twice as many. Pure and
synchronous: one worker's event loop is its only user.
"""

from __future__ import annotations

from collections import OrderedDict

import cramjam

__all__ = ["DocumentCache"]


class DocumentCache:
    """URL → (document id, encoded document), at most `max_bytes` of documents."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[str, tuple[str, bytes]] = OrderedDict()

    def put(self, url: str, doc_id: str, encoded: bytes) -> None:
        self.drop(url)
        packed = bytes(cramjam.lz4.compress_block(encoded))
        if len(packed) > self.max_bytes:
            return
        self._entries[url] = (doc_id, packed)
        self.bytes += len(packed)
        while self.bytes > self.max_bytes:
            _url, (_id, old) = self._entries.popitem(last=False)
            self.bytes -= len(old)

    def get(self, url: str) -> tuple[str, bytes] | None:
        """(document id, the encoded document as sent), or None."""
        entry = self._entries.get(url)
        if entry is None:
            return None
        return entry[0], bytes(cramjam.lz4.decompress_block(entry[1]))

    def drop(self, url: str) -> None:
        old = self._entries.pop(url, None)
        if old is not None:
            self.bytes -= len(old[1])

    def __len__(self) -> int:
        return len(self._entries)
