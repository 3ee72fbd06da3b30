"""The SSRF guard's address policy: which addresses the crawler may contact.

Loopback, private, link-local, multicast, reserved and other non-global addresses
are refused unless private targets are allowed (or the address is in an
allow-listed network). The check is made on addresses, never on names: the
resolver (streams/fetch/resolver.py) checks every address it hands to the
connector, and the fetcher checks IP-literal hosts, which aiohttp never resolves
(including legacy forms such as ``http://2130706433/``), before a socket is opened.
Standard library only.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import socket
from collections.abc import Iterable
from functools import lru_cache

__all__ = [
    "AddressGuard",
    "BlockedAddress",
    "address_class",
    "is_public_address",
    "literal_address",
]


class BlockedAddress(OSError):
    """The host resolved to an address the crawler must not contact."""


def address_class(address: str) -> str | None:
    """Why an address is not public ("loopback", "private", ...), or None if it is."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return "unparseable"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for name, hit in (
        ("unspecified", ip.is_unspecified),
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("reserved", ip.is_reserved),
        ("private", ip.is_private),
        ("non-global", not ip.is_global),
    ):
        if hit:
            return name
    return None


def is_public_address(address: str) -> bool:
    """True for globally routable unicast addresses only."""
    return address_class(address) is None


_LEGACY_IPV4 = re.compile(r"[0-9a-fA-FxX.]+")


@lru_cache(maxsize=4096)
def literal_address(host: str) -> str | None:
    """The address an IP-literal host names, or None for a host name.

    Legacy IPv4 spellings count (``2130706433``, ``0x7f.1``, ``0177.0.0.1``): aiohttp
    takes them for literals and skips the resolver, and the C library turns them
    into 127.0.0.1 when connecting, so the guard must read them the same way.
    Memoised (a pure function of the host; ~4.5 µs a fetch, and a crawl fetches
    each host many times).
    """
    host = host.strip("[]")
    try:
        return str(ipaddress.ip_address(host.split("%", 1)[0]))
    except ValueError:
        pass
    if host and _LEGACY_IPV4.fullmatch(host) and any(c.isdigit() for c in host):
        try:
            return socket.inet_ntoa(socket.inet_aton(host))
        except OSError:
            return None
    return None


def split_override(override: str) -> tuple[str, int | None]:
    """A --resolve override's address and port: '1.2.3.4' | '1.2.3.4:8080' | '::1' |
    '[::1]:8080' → (address, port)."""
    if override.startswith("["):
        addr, _, rest = override[1:].partition("]")
        return addr, int(rest[1:]) if rest.startswith(":") and rest[1:] else None
    if override.count(":") == 1:
        addr, _, port = override.partition(":")
        return addr, int(port) if port else None
    return override, None


class AddressGuard:
    """Refuses non-public addresses unless private targets are on (or allow-listed).

    Each address's verdict is memoised: classifying one costs ~45 µs (ipaddress's
    range properties and the allow-list), and an IP-literal host is checked on every
    fetch. The memo is keyed by the *address*, never by a host name, so every
    address a name resolves to is still checked each time it is handed out: a name
    that rebinds to a private address meets that address's own verdict.
    """

    #: Verdicts kept before the memo starts over (a crawl meets few distinct addresses).
    MEMO_SIZE = 65536

    def __init__(self, allow_private: bool, allowed_networks: Iterable[str] = ()) -> None:
        self.allow_private = allow_private
        self.allowed = [ipaddress.ip_network(n, strict=False) for n in allowed_networks]
        #: address → why it is refused, or "" when it may be contacted.
        self._verdicts: dict[str, str] = {}

    def refusal(self, address: str) -> str:
        """Why address is refused ("loopback", "private", ...), or "" if it is allowed."""
        why = self._verdicts.get(address)
        if why is None:
            why = self._classify(address)
            if len(self._verdicts) >= self.MEMO_SIZE:
                self._verdicts.clear()
            self._verdicts[address] = why
        return why

    def _classify(self, address: str) -> str:
        why = address_class(address)
        if why is None:
            return ""
        with contextlib.suppress(ValueError):
            ip = ipaddress.ip_address(address.split("%", 1)[0])
            if any(ip in net for net in self.allowed):
                return ""
        return why

    def check(self, host: str, address: str) -> None:
        if self.allow_private:
            return
        why = self.refusal(address)
        if not why:
            return
        shown = host if host == address else f"{host} resolves to {address}, which"
        raise BlockedAddress(
            f"{shown} is a {why} address (private targets are off; --allow-private lifts this)"
        )
