"""A toy PNG handler: the whole of what adding a content type to the fetcher takes.

This module plus one line, ``register_handler("image/png", handle_png)``, is all:
the handler reads just the 24 bytes that hold the image size (the read is capped
and decompressed by the fetcher, so even a hostile PNG can't make it read more)
and records its own outcome. The tests register it to prove the registry works.
"""

from __future__ import annotations

import struct

from streams.fetch.handlers import FetchResult, ResponseView

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


async def handle_png(response: ResponseView, result: FetchResult) -> None:
    head = await response.read(24)
    data = head.data
    if len(data) < 24 or not data.startswith(PNG_SIGNATURE) or data[12:16] != b"IHDR":
        result.outcome, result.reason = "not-png", "no PNG header"
        return
    width, height = struct.unpack(">II", data[16:24])
    result.outcome, result.reason = "image", f"png {width}x{height}"
