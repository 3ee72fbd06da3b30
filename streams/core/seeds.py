"""Seeds arrive from anything that can produce to Kafka, so accept what people send.

A seeds message may be a plain URL line (`kcat -P`), JSON `{"url": ..., "priority": ...}`,
or the Avro `Seed` record (bare, or in the Confluent wire format with a 5-byte
schema-id prefix). Anything else, or a URL we cannot crawl, is an `InvalidSeed`
whose message goes to dead-letters verbatim.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from streams import codec
from streams.core.urls import canonical

MAX_SEED_BYTES = 16 * 1024


class InvalidSeed(ValueError):
    """A seeds message that is not a crawlable URL in any accepted form."""


@dataclass(frozen=True)
class Seed:
    url: str
    priority: int = 0


def _from_mapping(data: object) -> tuple[str, int]:
    if not isinstance(data, dict) or not isinstance(data.get("url"), str):
        raise InvalidSeed('JSON seed must be an object with a string "url"')
    priority = data.get("priority", 0)
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise InvalidSeed('"priority" must be an integer')
    return data["url"], priority


def _try_avro(payload: bytes) -> tuple[str, int] | None:
    for body in (payload, payload[5:] if payload[:1] == b"\x00" and len(payload) > 5 else None):
        if body is None:
            continue
        try:
            record = codec.decode("seed", body)
        except codec.DecodeError:
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
        avro = None if stripped[:4].lower() in (b"http",) else _try_avro(raw)
        if avro is not None:
            url, priority = avro
        else:
            try:
                url = stripped.decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidSeed("seed is neither UTF-8 text, JSON nor an Avro Seed") from None
            if any(c in url for c in "\r\n\t ") or not url.isprintable():
                raise InvalidSeed("a plain seed must be one URL on one line")
    if "://" not in url:
        raise InvalidSeed(f"seed {url[:200]!r} is not an absolute URL")
    normalized = canonical(url)
    if normalized is None:
        raise InvalidSeed(f"seed {url[:200]!r} is not a valid http(s) URL")
    return Seed(normalized, priority)
