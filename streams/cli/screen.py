"""Seeds refused before anything starts: what `seine crawl` and `seine seed` can tell
from the seed alone. A seed that is not an absolute http(s) URL, or (for `seine crawl`,
which knows its settings) whose host is a private or loopback address (an IP literal,
`localhost`, or a `--resolve` override) when private targets are off, is refused with
a line naming it and why; a name that resolves to a private address is still refused
at fetch time, by the SSRF guard."""

from __future__ import annotations

from collections.abc import Iterable

from streams.codec.seeds import InvalidSeed, parse_seed
from streams.core.urls import host_of
from streams.fetch.guard import address_class, literal_address, split_override
from streams.settings import Settings

#: Names that mean this machine (RFC 6761: every name under .localhost too).
_LOCAL_NAMES = ("localhost", "localhost.", "localhost.localdomain")
_LOCAL_SUFFIXES = (".localhost", ".localhost.")


def seed_refusal(seed: str, settings: Settings | None) -> str:
    """Why `seed` cannot be crawled with `settings`, or "" when it can be tried; with
    no settings (`seine seed`: the running crawl's own decide the addresses), only
    whether it is a URL."""
    try:
        url = parse_seed(seed).url
    except InvalidSeed as exc:
        why = str(exc)
        return why if repr(seed) in why else f"seed {seed!r}: {why}"
    if settings is None or settings.fetch.allow_private:
        return ""
    host = host_of(url)
    override = settings.fetch.resolve.get(host)
    if override:
        address: str | None = literal_address(split_override(override)[0])
    elif host.lower() in _LOCAL_NAMES or host.lower().endswith(_LOCAL_SUFFIXES):
        address = "127.0.0.1"
    else:
        address = literal_address(host)
    kind = address_class(address) if address else None
    if kind:
        return f"seed {seed!r} is a {kind} address ({address}): pass --allow-private to crawl it"
    return ""


def screen_seeds(seeds: Iterable[str], settings: Settings | None) -> tuple[list[str], list[str]]:
    """The seeds that may be crawled, and one line for each refused one."""
    kept: list[str] = []
    refused: list[str] = []
    for seed in seeds:
        why = seed_refusal(seed, settings)
        if why:
            refused.append(why)
        else:
            kept.append(seed)
    return kept, refused
