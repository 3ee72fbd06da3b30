"""The SSRF guard's address policy (streams/fetch/guard.py): address classes,
IP literals in every spelling, allow-listed networks."""

from __future__ import annotations

import pytest

from streams.fetch.guard import (
    AddressGuard,
    BlockedAddress,
    address_class,
    is_public_address,
    literal_address,
)

# -- the SSRF guard ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("10.0.0.1", "private"),
        ("172.16.5.4", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("0.0.0.0", "unspecified"),
        ("100.64.0.1", "non-global"),  # carrier-grade NAT
        ("192.0.2.7", "private"),  # TEST-NET-1 (documentation)
        ("::1", "loopback"),
        ("fe80::1", "link-local"),
        ("fc00::1", "private"),
        ("ff02::1", "multicast"),
        ("::ffff:10.0.0.1", "private"),  # IPv4-mapped: judged as the IPv4 it maps
        ("::", "unspecified"),
        ("93.184.216.34", None),
        ("2606:4700::1111", None),
    ],
)
def test_address_classes(address: str, why: str | None) -> None:
    assert address_class(address) == why
    assert is_public_address(address) is (why is None)


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("[::1]", "::1"),
        ("2130706433", "127.0.0.1"),  # one decimal number
        ("0x7f.1", "127.0.0.1"),  # hex, short form
        ("0177.0.0.1", "127.0.0.1"),  # octal
        ("017700000001", "127.0.0.1"),
        ("10.1", "10.0.0.1"),
        ("example.com", None),
        ("deadbeef.cafe", None),  # hex letters alone are a name
        ("site-0001.demo.test", None),
    ],
)
def test_literal_addresses_in_every_spelling(host: str, address: str | None) -> None:
    assert literal_address(host) == address


def test_allowed_networks_open_only_what_they_name() -> None:
    guard = AddressGuard(False, ["127.0.0.1/32"])
    guard.check("127.0.0.1", "127.0.0.1")
    with pytest.raises(BlockedAddress, match="loopback"):
        guard.check("127.0.0.2", "127.0.0.2")
    with pytest.raises(BlockedAddress, match=r"x\.test resolves to 10\.0\.0\.1, which is a priv"):
        guard.check("x.test", "10.0.0.1")
    AddressGuard(True).check("x", "10.0.0.1")  # allow_private lifts it all
