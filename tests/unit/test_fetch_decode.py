"""The bounded Content-Encoding decoders (streams/core/decode.py)."""

from __future__ import annotations

import gzip
import zlib
from typing import Any

import pytest

from streams.core import decode
from streams.core.decode import ContentDecodeError, accept_encoding, decoder_for

# -- bounded decoders -----------------------------------------------------------------------


def decode_all(decoder: Any, data: bytes, cap: int, chunk: int = 4096) -> tuple[bytes, bool]:
    """Drive a decoder the way CappedResponse.read does."""
    out = b""
    for i in range(0, len(data), chunk):
        piece = decoder.decode(data[i : i + chunk], cap - len(out) + 1)
        assert len(piece) <= cap - len(out) + 1, "a decoder returned more than it was allowed"
        if len(out) + len(piece) > cap:
            return out + piece[: cap - len(out)], True
        out += piece
    decoder.finish()
    return out, False


def test_gzip_members_are_decoded_and_trailing_garbage_ignored() -> None:
    data = gzip.compress(b"one ") + gzip.compress(b"two") + b"\r\n\x00junk"
    assert decode_all(decoder_for("gzip"), data, 100, chunk=7) == (b"one two", False)


@pytest.mark.parametrize("wbits", [zlib.MAX_WBITS, -zlib.MAX_WBITS])
def test_deflate_with_or_without_the_zlib_wrapper(wbits: int) -> None:
    comp = zlib.compressobj(6, zlib.DEFLATED, wbits)
    data = comp.compress(b"hello deflate") + comp.flush()
    assert decode_all(decoder_for("deflate"), data, 100) == (b"hello deflate", False)


def test_a_small_input_cannot_produce_more_than_the_room_asked_for() -> None:
    bomb = zlib.compress(b"\0" * (8 << 20), 9)  # 8 MiB in ~8 KB
    decoder = decoder_for("deflate, identity")  # identity in a list is no coding
    body, truncated = decode_all(decoder, bomb, 1000)
    assert truncated and body == b"\0" * 1000


def test_a_cut_short_stream_is_an_error() -> None:
    data = gzip.compress(b"x" * 10_000)[:-20]
    with pytest.raises(ContentDecodeError, match="ended before its end"):
        decode_all(decoder_for("gzip"), data, 100_000)


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ("compress", "unsupported content-encoding 'compress'"),
        ("gzip, gzip", "stacked content-encodings gzip, gzip"),
        ("sdch", "unsupported"),
    ],
)
def test_encodings_we_wont_decode(header: str, message: str) -> None:
    with pytest.raises(ContentDecodeError, match=message):
        decoder_for(header)


def test_identity_means_no_decoder() -> None:
    assert decoder_for("") is None
    assert decoder_for("identity") is None


def test_accept_encoding_names_only_bounded_decoders() -> None:
    offered = accept_encoding().split(", ")
    assert offered[:2] == ["gzip", "deflate"]
    assert ("br" in offered) is (decode._BROTLI is not None)
    assert ("zstd" in offered) is (decode._ZSTD is not None)


def test_an_unbounded_brotli_binding_is_not_used() -> None:
    """brotlipy's decompress() takes no output limit: using it would inflate a bomb whole."""
    found = decode._bounded_brotli()
    if found is None:
        pytest.skip("no brotli binding with an output limit installed")
    make, method = found
    decoder = make()
    assert hasattr(decoder, "can_accept_more_data")
    getattr(decoder, method)(b"", output_buffer_limit=1)
