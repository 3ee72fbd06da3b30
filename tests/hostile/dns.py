"""A toy authoritative DNS server on loopback UDP, for the resolver's TTL tests.

Why: TTL handling can only be tested against answers that carry TTLs, and the
tests must not ask a real name server (only loopback is reachable, and only
loopback may be asked). This answers A queries from a table, says NXDOMAIN or
SERVFAIL on request, answers AAAA with no records, and counts every query.
"""

from __future__ import annotations

import asyncio
import ipaddress
import struct
from collections import Counter
from dataclasses import dataclass, field
from typing import cast

from streams.fetch.resolver import DnsAnswer, DnsError

QTYPE_A = 1
QTYPE_AAAA = 28
RCODE_SERVFAIL = 2
RCODE_NXDOMAIN = 3


@dataclass
class Zone:
    #: name → (IPv4 address, TTL)
    records: dict[str, tuple[str, int]] = field(default_factory=dict)
    servfail: set[str] = field(default_factory=set)
    #: (name, qtype) → number of queries seen
    queries: Counter[tuple[str, int]] = field(default_factory=Counter)


def _parse_question(packet: bytes) -> tuple[int, int, str, int, bytes] | None:
    """(id, flags, name, qtype, raw question) or None for a packet we don't understand."""
    if len(packet) < 12:
        return None
    qid, flags, qdcount = struct.unpack(">HHH", packet[:6])
    if qdcount != 1:
        return None
    labels, pos = [], 12
    while pos < len(packet):
        length = packet[pos]
        pos += 1
        if length == 0:
            break
        labels.append(packet[pos : pos + length].decode("ascii", "replace"))
        pos += length
    if pos + 4 > len(packet):
        return None
    qtype, _qclass = struct.unpack(">HH", packet[pos : pos + 4])
    return qid, flags, ".".join(labels).lower(), qtype, packet[12 : pos + 4]


def answer(zone: Zone, packet: bytes) -> bytes | None:
    parsed = _parse_question(packet)
    if parsed is None:
        return None
    qid, flags, name, qtype, question = parsed
    zone.queries[(name, qtype)] += 1
    rd = flags & 0x0100
    records: list[bytes] = []
    rcode = 0
    if name in zone.servfail:
        rcode = RCODE_SERVFAIL
    elif name not in zone.records:
        rcode = RCODE_NXDOMAIN
    elif qtype == QTYPE_A:
        address, ttl = zone.records[name]
        rdata = ipaddress.IPv4Address(address).packed
        # name as a pointer to the question (offset 12), type A, class IN, TTL, rdata
        records.append(struct.pack(">HHHIH", 0xC00C, QTYPE_A, 1, ttl, len(rdata)) + rdata)
    header = struct.pack(">HHHHHH", qid, 0x8400 | rd | 0x0080 | rcode, 1, len(records), 0, 0)
    return header + question + b"".join(records)


class _Protocol(asyncio.DatagramProtocol):
    def __init__(self, zone: Zone) -> None:
        self.zone = zone
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a datagram endpoint's transport (not always a DatagramTransport subclass)
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        reply = answer(self.zone, data)
        if reply is not None and self.transport is not None:
            self.transport.sendto(reply, addr)


class ToyDns:
    """``async with ToyDns(zone) as dns:`` then point a resolver at ``dns.server``."""

    def __init__(self, zone: Zone, host: str = "127.0.0.1") -> None:
        self.zone = zone
        self.host = host
        self.port = 0
        self._transport: asyncio.DatagramTransport | None = None

    @property
    def server(self) -> str:
        return f"{self.host}:{self.port}"

    async def __aenter__(self) -> ToyDns:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(
            lambda: _Protocol(self.zone), local_addr=(self.host, 0)
        )
        self._transport = transport
        self.port = int(transport.get_extra_info("sockname")[1])
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._transport is not None:
            self._transport.close()


class FakeDns:
    """A scripted `DnsBackend`: answers from a table, counts lookups, can hang or wait.

    Unknown names fail like NXDOMAIN, so a test can never fall through to a real
    name server.
    """

    def __init__(self, answers: dict[str, DnsAnswer | Exception] | None = None) -> None:
        self.answers: dict[str, DnsAnswer | Exception] = dict(answers or {})
        self.calls: list[str] = []
        self.gate: asyncio.Event | None = None
        self.hang = False

    async def lookup(self, host: str, family: int) -> DnsAnswer:
        self.calls.append(host)
        if self.gate is not None:
            await self.gate.wait()
        if self.hang:
            await asyncio.Event().wait()
        answer = self.answers.get(host, DnsError(f"{host}: Domain name not found"))
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def close(self) -> None:
        return None
