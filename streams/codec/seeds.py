"""Seeds arrive from anything that can produce to Kafka, so accept what people send.

A seeds message may be a plain URL line (`kcat -P`), JSON `{"url": ..., "priority": ...}`,
or the Avro `Seed` record (bare, or in the Confluent wire format with a 5-byte
schema-id prefix). Anything else, or a URL we cannot crawl, is an `InvalidSeed`
whose message goes to dead-letters verbatim.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from streams.codec.packing import DecodeError
from streams.codec.wire import decode
from streams.core.urls import canonical

MAX_SEED_BYTES = 16 * 1024


class InvalidSeed(ValueError):
    """A seeds message that is not a crawlable URL in any accepted form."""


@dataclass(frozen=True)
class Seed:
    url: str
    priority: int = 0


def _one_line(text: str) -> bool:
    return text.isprintable() and not any(c in text for c in "\r\n\t ")


def _from_mapping(data: object) -> tuple[str, int]:
    if not isinstance(data, dict) or not isinstance(data.get("url"), str):
        raise InvalidSeed('JSON seed must be an object with a string "url"')
    priority = data.get("priority", 0)
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise InvalidSeed('"priority" must be an integer')
    if not -(2**31) <= priority < 2**31:
        raise InvalidSeed('"priority" must fit in a 32-bit integer (an Avro int)')
    return data["url"], priority


def _try_avro(payload: bytes) -> tuple[str, int] | None:
    for body in (payload, payload[5:] if payload[:1] == b"\x00" and len(payload) > 5 else None):
        if body is None:
            continue
        try:
            record = decode("seed", body)
        except DecodeError:
            continue
        if "://" in record["url"]:
            return record["url"], int(record["priority"])
    return None


def parse_seed(payload: bytes | str) -> Seed:
    """Decode a seeds message and canonicalize its URL, or raise InvalidSeed with the reason."""
    raw = payload.encode("utf-8", "surrogateescape") if isinstance(payload, str) else payload
    if not raw or not raw.strip():
        raise InvalidSeed("empty seed")
    if len(raw) > MAX_SEED_BYTES:
        raise InvalidSeed(f"seed message of {len(raw)} bytes is over {MAX_SEED_BYTES}")
    stripped = raw.strip()
    url: str
    priority = 0
    if stripped.startswith(b"{"):
        try:
            url, priority = _from_mapping(json.loads(stripped))
        except json.JSONDecodeError as exc:
            raise InvalidSeed(f"malformed JSON seed: {exc.msg}") from None
    else:
        try:
            text: str | None = stripped.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        # A clean "http..." line is plain text, which might decode as Avro by accident.
        # But Avro can look like that line once stripped: a 16-character URL's length
        # prefix is b" ", and priority 5 is b"\n" (priority 0, b"\x00", is not printable).
        plain = text is not None and text[:4].lower() == "http" and _one_line(text)
        avro = None if plain and raw == stripped else _try_avro(raw)
        if plain and avro is not None and avro[0] != text:
            avro = None  # the text reads as Avro only by accident
        if avro is not None:
            url, priority = avro
        elif text is None:
            raise InvalidSeed("seed is neither UTF-8 text, JSON nor an Avro Seed")
        elif not _one_line(text):
            raise InvalidSeed("a plain seed must be one URL on one line")
        else:
            url = text
    if "://" not in url:
        raise InvalidSeed(f"seed {url[:200]!r} is not an absolute URL")
    normalized = canonical(url)
    if normalized is None:
        raise InvalidSeed(f"seed {url[:200]!r} is not a valid http(s) URL")
    return Seed(normalized, priority)
