"""Decompression bombs and encoders for the hostile catalogue's compression endpoints.

Each bomb expands to BOMB_BYTES of zeros; they are built as iterators of wire pieces
(or embedded, for brotli) so that serving one costs the server almost nothing.
"""

from __future__ import annotations

import base64
import gzip
import struct
import zlib
from collections.abc import Iterator
from functools import cache

from tests.hostile.bodies import BOMB_BYTES, ENDLESS_LIMIT

# -- bombs ------------------------------------------------------------------------------


#: A 1 GiB run of zeros as one brotli stream (quality 11, 1,681 bytes). Embedded because
#: producing it takes ~100 s and a brotli *encoder* may not be installed.
_BROTLI_BOMB_B64 = (
    "y///P/gnAOKxQCD3/o///3/wTwDEYRGA7v0f////4J8AiMMCAN37P/7//8E/ARCHBQC693/8//+DfwIgDgsAdO//"
    "+P//B/8EQBwWAOje//H//w/+CYA4LADQvf/j//8f/BMAcVgAoHv/x///P/gnAOKwAED3/o///3/wTwDEYQGA7v0f"
    "////4J8AiMMCAN37P/7//8E/ARCHBQC693/8//+DfwIgDgsAdO//+P//B/8EQBwWAOje//H//w/+CYA4LADQvf/j"
    "//8f/BMAcVgAoHv/x///P/gnAOKwAED3/o///3/wTwDEYQGA7v0f////4J8AiMMCAN37P/7//8E/ARCHBQC693/8"
    "//+DfwIgDgsAdO//+P//B/8EQBwWAOje//H//w/+CYA4LADQvf/j//8f/BMAcVgAoHv/x///P/gnAOKwAED3/o//"
    "/3/wTwDEYQGA7v0f////4J8AiMMCAN37P/7//8E/ARCHBQC693/8//+DfwIgDgsAdO//+P//B/8EQBwWAOje//H/"
    "/w/+CYA4LADQvf/j//8f/BMAcVgAoHv/x///P/gnAOKwAED3/o///3/wTwDEYQGA7v0f////4J8AiMMCAN37P/7/"
    "/8E/ARCHBQC693/8//+DfwIgDgsAdO//+P//B/8EQBwWAOje//H//w/+CYA4LADQvf/j//8f/BMAcVgAoHv/x///"
    "P/gnAOKwAED3/o///3/wTwDEYQGA7v0f////4J8AiMMCAN37P/7//8E/ARCHBQC693/8//+DfwIgDgsAdO//+P//"
    "B/8EQBwWAOje//H//w/+CYA4LADQvf/j//8f/BMAcVgAoHv/x///P/gnAOKwAED3/o///3/wTwDEYQGA7v0f////"
    "4J8AiMMCAN37P/7//8E/ARCHBQC693/8//+DfwIgDgsAdO//+P//B/8EQBwWAOje//H//w/+CYA4LADQvf/j//8f"
    "/BMAcVgAoHv/x///P/gnAOKwAED3/o///3/wTwDEYQGA7v0f////4J8AiMMCAN37P/7//8E/ARCHBQC693/8//+D"
    "fwIgDgsAdO//+P//B/8EQBwWAOje//H//w/+CYA4LADQvf/j//8f/BMAcVgAoHv/x///P/gnAOKwAED3/o///3/w"
    "TwDEYQGA7v0f////4J8AiMMCAN37P/7//8E/ARCHBQC693/8//+DfwIgDgsAdO//+P//B/8EQBwWAOje//H//w/+"
    "CYA4LADQvf/j//8f/BMAcVgAoHv/x///P/gnAOKwAED3/o///3/wTwDEYQGA7v0f////4J8AiMMCAN37P/7//8E/"
    "ARCHBQC693/8//+DfwIgDgsAdO//+P//B/8EQBwWAOje//H//w/+CYA4LADQvf/j//8f/BMAcVgAoHv/x///P/gn"
    "AOKwAED3/o///3/wTwDEYQGA7v0f////4J8AiMMCAN37P/7//8E/ARCHBQC693/8//+DfwIgDgsAdO//+P//B/8E"
    "QBwWAOje//H//w/+CYA4LADQvf/j//8f/BMAcVgAoHv/x///P/gnAOKwAED3/o///3/wTwDEYQGA7v0f////4J8A"
    "iMMCAN37P/7//8E/ARCHBQC693/8//+DfwIgDgsAdO//+P//B/8EQBwWAOje//H//w/+CYA4LADQvf/j//8f/BMA"
    "cVgAoHv/x///P/gnAOKwAED3/o///3/wTwDEYQGA7v0f////4J8AiMMCAN37P/7//8E/ARCHBQC693/8//+DfwIg"
    "DgsAdO//+P//B/8EQBwWAOje//H//w/+CYA4LADQvf/j//8f/BMAcVgAoHv/x///P/gnAOKwAED3/o///3/wTwDE"
    "YQGA7v0f////4J8AiMMCAN37P/7//8E/ARCHBQC693/8//+DfwIgDgsAdO//+P//B/8EQBwWAOje//H//w/+CYA4"
    "LADQvf/j//8f/BMAcVgAoHv/x///P/gnAOKwAED3/o///3/wTwDEYQGA7v0f////4J8AiMMCAN37P/7//8E/ARCH"
    "BQC693/8//+DfwIgDgsAdO//+P//B/8EQBwWAOje//H//w/+CYA4LADQvf/j//8f/BMAcVgAoHv/x///P/gnAOKw"
    "AED3/o///3/wTwDEYQGA7v0f////4J8AiMMCAN37P/7//8E/ARCHBQC693/8//+DfwIgDgsAdO//+P//B/8EQBwW"
    "AOje//H//w/+CYA4LADQvf/j//8f/BMAcVgAoHv/x///P/gnAOKwAED3/o///3/wTwDEYQGA7v0f////4J8AiMMC"
    "AN37P/7//8E/ARCHBQC693/8//+DfwIgDgsAdO//+P//B/8EQBwWAOje//H//w/+CYA4LADQvf/j//8f/BMAcVgA"
    "oHv/x///P/gnAOKwAED3/o///3/wTwDEYQGA7v0f////4J8AiMMCAN37P/7//8E/ARCHBQC693/8//+DfwIgDgsA"
    "dO//+P//B/8EQBwWAOje//H//w/+CYA4LADQvf/j//8f/BMAcVgAoHv/x///Pw=="
)


#: CRC-32 of BOMB_BYTES zeros (computing it takes 0.6 s, which would stall the server's
#: loop whenever a client read a bomb to its end).
_BOMB_CRC32 = 0x5B64C2B0


def _deflate_bomb(wbits: int, total: int = BOMB_BYTES) -> Iterator[bytes]:
    """`total` zeros deflated, as an iterator of wire pieces (~1 KiB per MiB of output).

    A full flush resets the compressor, so every 1 MiB block after the first compresses
    to identical bytes: 2 MiB are compressed, the rest repeated. The trailer is known
    without reading a GiB: CRC-32 of 1 GiB of zeros is a constant, and Adler-32 of n
    zeros is (n mod 65521) << 16 | 1.
    """
    block = b"\0" * (1 << 20)
    comp = zlib.compressobj(9, zlib.DEFLATED, wbits)
    first = comp.compress(block) + comp.flush(zlib.Z_FULL_FLUSH)
    repeat = comp.compress(block) + comp.flush(zlib.Z_FULL_FLUSH)
    end = comp.flush(zlib.Z_FINISH)
    trailer_len = 8 if wbits > 15 else 4 if wbits > 0 else 0
    yield first
    for _ in range(total // len(block) - 1):
        yield repeat
    yield end[: len(end) - trailer_len]
    if wbits > 15:
        assert total == BOMB_BYTES, "the CRC constant is for BOMB_BYTES"
        yield struct.pack("<II", _BOMB_CRC32, total & 0xFFFFFFFF)
    elif wbits > 0:
        yield struct.pack(">I", ((total % 65521) << 16) | 1)


def _gzip_members_bomb(total: int = BOMB_BYTES) -> Iterator[bytes]:
    """Many small gzip members back to back: each alone is harmless, together 1 GiB."""
    member = gzip.compress(b"\0" * (1 << 20), 9)
    for _ in range(total // (1 << 20)):
        yield member


def _empty_members_flood() -> Iterator[bytes]:
    """gzip members that decompress to nothing, forever: zero output, unbounded input."""
    member = gzip.compress(b"")
    batch = member * (65536 // len(member))
    for _ in range(ENDLESS_LIMIT // len(batch)):
        yield batch


def brotli_bomb() -> bytes:
    return base64.b64decode(_BROTLI_BOMB_B64)


@cache
def zstd_bomb() -> bytes | None:
    """1 GiB of zeros as one zstd frame, or None without a zstd encoder."""
    try:
        from backports import zstd  # type: ignore[attr-defined,import-not-found,unused-ignore]
    except ImportError:
        try:
            from compression import zstd  # type: ignore[import-not-found,no-redef,unused-ignore]
        except ImportError:
            return None
    comp = zstd.ZstdCompressor(level=1)
    block = b"\0" * (1 << 20)
    parts = [comp.compress(block) for _ in range(BOMB_BYTES // len(block))]
    parts.append(comp.flush())
    return b"".join(parts)


def zstd_compress(data: bytes) -> bytes | None:
    try:
        from backports import zstd  # type: ignore[attr-defined,import-not-found,unused-ignore]
    except ImportError:
        try:
            from compression import zstd  # type: ignore[no-redef,unused-ignore]
        except ImportError:
            return None
    return bytes(zstd.compress(data))


def brotli_compress(data: bytes) -> bytes | None:
    """Brotli-encode with whichever binding is installed (None without one)."""
    for name in ("brotlicffi", "brotli"):
        try:
            module = __import__(name)
        except ImportError:
            continue
        return bytes(module.compress(data))
    return None
