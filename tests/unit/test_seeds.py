"""Unit tests for streams.codec.seeds: every accepted form, and clear reasons for the rest."""

from __future__ import annotations

import json
import struct

import pytest

from streams import codec
from streams.codec.seeds import MAX_SEED_BYTES, InvalidSeed, Seed, parse_seed


def avro(url: str, priority: int = 0) -> bytes:
    return codec.encode("seed", {"url": url, "priority": priority})


def confluent(url: str, priority: int = 0, schema_id: int = 42) -> bytes:
    return b"\x00" + struct.pack(">I", schema_id) + avro(url, priority)


def test_plain_line() -> None:
    assert parse_seed(b"https://example.com/a") == Seed("https://example.com/a", 0)
    assert parse_seed("https://example.com/a") == Seed("https://example.com/a", 0)


@pytest.mark.parametrize(
    "payload",
    [b"  https://example.com/a\n", b"\thttps://example.com/a\r\n", b"https://example.com/a   "],
)
def test_surrounding_whitespace_is_ignored(payload: bytes) -> None:
    assert parse_seed(payload) == Seed("https://example.com/a", 0)


def test_json_with_and_without_priority() -> None:
    assert parse_seed(b'{"url": "https://example.com/", "priority": 7}') == Seed(
        "https://example.com/", 7
    )
    assert parse_seed(b' {"url": "https://example.com/"}\n') == Seed("https://example.com/", 0)
    assert parse_seed(json.dumps({"url": "http://b.example", "priority": -2})) == Seed(
        "http://b.example/", -2
    )


@pytest.mark.parametrize("priority", [0, 1, 5, 6, 16, -5, 2**31 - 1])
@pytest.mark.parametrize(
    "url",
    [
        "https://example.com/page",
        "http://a.com/abc",  # 16 characters: the Avro length prefix is b" "
        "http://a.com/abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklm",  # prefix "h"
        "https://example.com/" + "x" * 300,  # multi-byte length
    ],
)
def test_avro_bare_and_confluent_wire_format(url: str, priority: int) -> None:
    assert parse_seed(avro(url, priority)) == Seed(url, priority)
    assert parse_seed(confluent(url, priority)) == Seed(url, priority)


def test_avro_url_is_canonicalized_too() -> None:
    assert parse_seed(avro("HTTPS://Example.COM:443/a/./b#frag", 3)) == Seed(
        "https://example.com/a/b", 3
    )


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("HTTP://Example.COM:80/a/../b#x", "http://example.com/b"),
        ("https://EXAMPLE.com", "https://example.com/"),
        ("https://example.com/%7Euser/", "https://example.com/~user/"),
        ("https://bücher.example/", "https://xn--bcher-kva.example/"),
    ],
)
def test_canonicalization_is_applied(raw: str, expected: str) -> None:
    assert parse_seed(raw).url == expected
    assert parse_seed(json.dumps({"url": raw})).url == expected


def test_plain_text_that_happens_to_parse_as_avro_stays_text() -> None:
    # 'h' is the Avro length prefix 52, so this 54-byte line is also a valid Seed record
    # ("ttp://…" with a priority); it must be read as the URL it plainly is.
    line = "http://a.example/" + "y" * 37
    assert len(line) == 54
    assert codec.decode("seed", line.encode())["url"].startswith("ttp://")
    assert parse_seed(line) == Seed(line, 0)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"", "empty"),
        (b"   \n\t", "empty"),
        ("", "empty"),
        (b"/relative/path", "not an absolute URL"),
        (b"example.com/page", "not an absolute URL"),
        (b"javascript:alert(1)", "not an absolute URL"),
        (b"ftp://example.com/file", "not a valid http(s) URL"),
        (b"mailto://someone@example.com", "not a valid http(s) URL"),
        (b"http://", "not a valid http(s) URL"),
        (b'{"href": "https://example.com/"}', 'string "url"'),
        (b'{"url": 5}', 'string "url"'),
        (b'{"url": "https://example.com/"', "malformed JSON"),
        (b"{not json}", "malformed JSON"),
        (b'{"url": "https://example.com/", "priority": "high"}', '"priority" must be an integer'),
        (b'{"url": "https://example.com/", "priority": 1.5}', '"priority" must be an integer'),
        (b'{"url": "https://example.com/", "priority": true}', '"priority" must be an integer'),
        (b'{"url": "https://example.com/", "priority": 4294967296}', "32-bit"),
        (b"https://a.example/\nhttps://b.example/", "one URL on one line"),
        (b"https://a.example/ https://b.example/", "one URL on one line"),
        (b"https://a.example/\x00", "one URL on one line"),
        (b"\xff\xfe\x00\x81garbage\x80", "neither UTF-8 text, JSON nor an Avro Seed"),
        (b"https://example.com/" + b"a" * MAX_SEED_BYTES, f"over {MAX_SEED_BYTES}"),
    ],
)
def test_invalid_seeds_say_why(payload: bytes | str, message: str) -> None:
    with pytest.raises(InvalidSeed, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_seed(payload)


def test_avro_of_a_non_url_is_invalid() -> None:
    with pytest.raises(InvalidSeed):
        parse_seed(avro("not a url", 1))
    with pytest.raises(InvalidSeed):
        parse_seed(confluent("javascript:alert(1)"))


def test_invalid_seed_is_a_value_error() -> None:
    assert issubclass(InvalidSeed, ValueError)


def test_size_limit_is_inclusive() -> None:
    url = "https://example.com/" + "a" * (MAX_SEED_BYTES - len("https://example.com/"))
    assert len(url) == MAX_SEED_BYTES
    assert parse_seed(url).url == url
