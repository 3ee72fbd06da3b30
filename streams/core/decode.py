"""Content-Encoding decoding with bounded output: gzip, deflate, brotli, zstd.

Bodies are decoded here, not by aiohttp, with every decompression call bounded by
the room left under the cap, so a 1 GiB gzip, deflate, brotli or zstd bomb stops at
the cap. (aiohttp 3.14 bounds its own decoder too: 5.7 MB peak for a 5 MB cap,
measured here; but older releases, which pyproject's aiohttp>=3.9 allows, inflate
each network chunk whole, and it calls whichever brotli binding is installed,
bounded or not. Here a brotli binding without an output limit is never used, nor
"br" advertised.) `decode_bounded` applies the same decoders to a file that is
compressed itself (a sitemap.xml.gz). Standard library, plus the optional brotli
and zstd bindings.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any, Protocol

__all__ = [
    "MAX_GZIP_MEMBERS",
    "ContentDecodeError",
    "Decoder",
    "accept_encoding",
    "decode_bounded",
    "decoder_for",
]


class ContentDecodeError(ValueError):
    """A Content-Encoding we can't (or won't) decode, or a corrupt compressed stream."""


#: More members than this in one gzip body is an attack (aiohttp draws the line there too).
MAX_GZIP_MEMBERS = 1024


class Decoder(Protocol):
    def decode(self, data: bytes, limit: int) -> bytes:
        """Decode what `data` holds, returning at most `limit` (≥ 1) bytes.

        Fewer than `limit` bytes back means all input was consumed; exactly `limit`
        means there may be more, and the caller (over its cap) stops.
        """
        ...

    def finish(self) -> None:
        """At end of input: raise if the compressed stream was cut short."""
        ...


class _ZlibDecoder:
    """gzip (any number of members up to a bound) and deflate (zlib-wrapped or raw)."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self._gzip = encoding in ("gzip", "x-gzip")
        self._d: Any = None
        self._members = 0
        self._done = False  # trailing garbage after the last member: ignored, as browsers do

    def _start(self, first: bytes) -> None:
        if self._gzip:
            wbits = 16 + zlib.MAX_WBITS
        else:  # RFC 9110's deflate is zlib-wrapped; many servers send raw deflate
            wbits = zlib.MAX_WBITS if first[0] & 0x0F == 8 else -zlib.MAX_WBITS
        self._d = zlib.decompressobj(wbits)
        self._members += 1
        if self._members > MAX_GZIP_MEMBERS:
            raise ContentDecodeError(f"{self.encoding}: more than {MAX_GZIP_MEMBERS} members")

    def decode(self, data: bytes, limit: int) -> bytes:
        out: list[bytes] = []
        produced = 0
        while data and not self._done:
            if self._d is None:
                if self._members and not data.startswith(b"\x1f\x8b"):
                    self._done = True  # not another member: trailing bytes
                    break
                self._start(data)
            try:
                piece = self._d.decompress(data, limit - produced)
            except zlib.error as exc:
                raise ContentDecodeError(f"{self.encoding}: {exc}") from exc
            out.append(piece)
            produced += len(piece)
            if produced >= limit:
                break
            if self._d.eof:
                data = self._d.unused_data
                if self._gzip:
                    self._d = None  # another member may follow, now or in a later chunk
                else:
                    self._done = True
                continue
            data = self._d.unconsumed_tail
        return b"".join(out)

    def finish(self) -> None:
        if self._d is not None and not self._d.eof:
            raise ContentDecodeError(f"{self.encoding}: stream ended before its end")


class _BrotliDecoder:
    """brotli through a binding whose decoder takes an output limit (Brotli/brotlicffi ≥ 1.2)."""

    def __init__(self, make: Callable[[], Any], method: str) -> None:
        self._d = make()
        self._call = getattr(self._d, method)

    def decode(self, data: bytes, limit: int) -> bytes:
        try:
            return bytes(self._call(data, output_buffer_limit=limit))
        except Exception as exc:  # each binding has its own error class
            raise ContentDecodeError(f"br: {exc}") from exc

    def finish(self) -> None:
        if not self._d.is_finished():
            raise ContentDecodeError("br: stream ended before its end")


class _ZstdDecoder:
    """zstd (Python 3.14's compression.zstd or backports.zstd), frame after frame."""

    def __init__(self, module: Any) -> None:
        self._module = module
        self._d: Any = None
        self._frames = 0

    def decode(self, data: bytes, limit: int) -> bytes:
        out: list[bytes] = []
        produced = 0
        while data:
            if self._d is None:
                self._frames += 1
                if self._frames > MAX_GZIP_MEMBERS:
                    raise ContentDecodeError(f"zstd: more than {MAX_GZIP_MEMBERS} frames")
                self._d = self._module.ZstdDecompressor()
            try:
                piece = self._d.decompress(data, limit - produced)
            except self._module.ZstdError as exc:
                raise ContentDecodeError(f"zstd: {exc}") from exc
            out.append(piece)
            produced += len(piece)
            if produced >= limit:
                break
            if self._d.eof:
                data = self._d.unused_data
                self._d = None  # another frame may follow, now or in a later chunk
                continue
            data = b""
        return b"".join(out)

    def finish(self) -> None:
        if self._d is not None and not self._d.eof:
            raise ContentDecodeError("zstd: stream ended before its end")


def _bounded_brotli() -> tuple[Callable[[], Any], str] | None:
    """A brotli decoder factory whose output can be bounded, or None.

    brotlipy (which shares the import name ``brotli``) inflates each input whole, so a
    2 KB input can become 1 GiB in one call: such a binding is not used at all.
    """
    for name, method in (("brotlicffi", "decompress"), ("brotli", "process")):
        try:
            module = __import__(name)
            probe = module.Decompressor()
            getattr(probe, method)(b"", output_buffer_limit=1)
            probe.can_accept_more_data()
        except Exception:
            continue
        return module.Decompressor, method
    return None


def _zstd_module() -> Any:
    for name in ("compression.zstd", "backports.zstd"):
        try:
            return __import__(name, fromlist=["ZstdDecompressor"])
        except ImportError:
            continue
    return None


_BROTLI = _bounded_brotli()
_ZSTD = _zstd_module()


def accept_encoding() -> str:
    """The encodings this fetcher can decode with bounded output, for Accept-Encoding."""
    codings = ["gzip", "deflate"]
    if _BROTLI is not None:
        codings.append("br")
    if _ZSTD is not None:
        codings.append("zstd")
    return ", ".join(codings)


def decoder_for(content_encoding: str) -> Decoder | None:
    """The decoder for a Content-Encoding header (None: identity); raises if we won't."""
    if not content_encoding:  # most bodies: no header at all
        return None
    codings = [c.strip().lower() for c in content_encoding.split(",")]
    codings = [c for c in codings if c and c != "identity"]
    if not codings:
        return None
    if len(codings) > 1:
        raise ContentDecodeError(f"stacked content-encodings {', '.join(codings)} not supported")
    coding = codings[0]
    if coding in ("gzip", "x-gzip", "deflate"):
        return _ZlibDecoder(coding)
    if coding == "br" and _BROTLI is not None:
        return _BrotliDecoder(*_BROTLI)
    if coding == "zstd" and _ZSTD is not None:
        return _ZstdDecoder(_ZSTD)
    raise ContentDecodeError(f"unsupported content-encoding {coding!r}")


def decode_bounded(coding: str, data: bytes, cap: int) -> tuple[bytes, bool]:
    """Decode a whole compressed payload held in memory with the same bounded decoders
    as response bodies: (at most `cap` bytes, truncated?). For files that are
    compressed themselves (a sitemap.xml.gz), not by Content-Encoding; a bomb stops
    at the cap. Raises ContentDecodeError for a corrupt or unsupported stream."""
    decoder = decoder_for(coding)
    if decoder is None:
        return data[:cap], len(data) > cap
    out = decoder.decode(data, cap + 1)
    if len(out) > cap:
        return out[:cap], True
    decoder.finish()
    return out, False
