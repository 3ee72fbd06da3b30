"""`FetchConfig`: everything a `Fetcher` is told (timeouts, caps, the SSRF guard's
allowances, DNS). Plain data, standard library only; built from Settings by
streams/app.py."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["FetchConfig"]


@dataclass
class FetchConfig:
    """Everything a Fetcher is told; defaults suit the open web, tests shrink them."""

    user_agent: str = "SeineBot/0.1"
    #: TCP connect, per attempt.
    connect_timeout: float = 5.0
    #: Longest silence while waiting for headers or body bytes.
    read_timeout: float = 10.0
    #: The whole fetch, redirects of robots.txt included.
    total_timeout: float = 30.0
    #: Request start → complete response headers; None means connect + read.
    first_byte_timeout: float | None = None
    max_body_bytes: int = 5 * 1024 * 1024
    max_robots_bytes: int = 512 * 1024
    max_robots_redirects: int = 5
    #: A sitemap as read off the wire (a .xml.gz is inflated later, to its own cap).
    max_sitemap_bytes: int = 50 * 1024 * 1024
    allow_private: bool = False
    #: Networks reachable even when private targets are off (e.g. one intranet range).
    allowed_networks: tuple[str, ...] = ()
    resolve: dict[str, str] = field(default_factory=dict)
    pool_size: int = 512
    #: "auto" (aiodns when installed), "aiodns" or "system".
    dns_backend: str = "auto"
    dns_servers: tuple[str, ...] = ()
    #: One lookup; None means connect_timeout.
    dns_timeout: float | None = None
    #: Answers are cached for their TTL, clamped to [min, max]; system answers for default.
    dns_min_ttl: float = 5.0
    dns_max_ttl: float = 3600.0
    dns_default_ttl: float = 300.0
    #: A failed name is not asked again for this long, doubling per failure up to the max.
    dns_negative_ttl: float = 5.0
    dns_max_negative_ttl: float = 300.0
