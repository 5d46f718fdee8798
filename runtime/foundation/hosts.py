"""Where a connection may go: the address rules and host entries that the web tools and the
@docker egress proxy share.

`address_refusal()` says why an address is refused by default (loopback, private, link-local,
metadata ...), `parse_host_entry()` reads a host of a policy (`"*.example.com"`,
`"127.0.0.1:8123"`), and a `Resolver` turns a name into the addresses a connection would use
(injectable, so tests can make a name point anywhere without touching real DNS).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Sequence

from codecoder.foundation.display import quoted as _quote
from codecoder.foundation.errors import ExecutionFailed

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
HostPort = tuple[str, int | None]

# (host, port) → the addresses it resolves to, as strings. Injectable, so tests can make a name
# point anywhere without touching real DNS.
Resolver = Callable[[str, int], Sequence[str]]


# --- the address rules -----------------------------------------------------------------------

_CARRIER_GRADE_NAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# Metadata services that a cloud VM reaches on addresses the ranges below do not all cover:
# Azure's wireserver sits on a public address. (AWS 169.254.169.254 / fd00:ec2::254, GCP,
# Oracle 192.0.0.192 and Alibaba 100.100.100.200 fall in link-local, unique-local, reserved
# and carrier-grade NAT ranges and are refused with them, but named as metadata.)
_METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",
        "169.254.170.2",
        "168.63.129.16",
        "100.100.100.200",
        "192.0.0.192",
        "fd00:ec2::254",
    )
)


def address_refusal(address: IPAddress) -> str | None:
    """Why the web tools refuse `address` by default, or None if it is a public address."""
    embedded = _embedded_ipv4(address)
    if embedded is not None:
        inner = address_refusal(embedded)
        return f"{inner} (as {address})" if inner else None
    if address in _METADATA:
        return "a cloud metadata address"
    if address.is_unspecified:
        return "the unspecified address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_multicast:
        return "a multicast address"
    if isinstance(address, ipaddress.IPv4Address) and address in _CARRIER_GRADE_NAT:
        return "a carrier-grade NAT address"
    if isinstance(address, ipaddress.IPv6Address) and address.is_site_local:
        return "a site-local address"
    if address.is_private:
        return "a private address"
    if address.is_reserved or not address.is_global:
        return "a reserved address"
    return None


def _embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for, where the network routes it as that."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def is_address(host: str) -> bool:
    """Whether `host` is an IP address (of either family) rather than a name."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def system_resolver(host: str, port: int) -> list[str]:
    """The addresses the system resolver gives for `host`, in its order, without duplicates."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as exc:
        raise ExecutionFailed(f"cannot resolve {host}: {exc}") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def parse_host_entry(entry: str) -> tuple[str, int | None]:
    """`"localhost"` → `("localhost", None)`, `"127.0.0.1:8123"` → `("127.0.0.1", 8123)`,
    `"[::1]:8080"` → `("::1", 8080)`, `"*.example.com"` → `("*.example.com", None)` (every
    subdomain), `"*"` → `("*", None)` (every host): a host of the web policy, on any port or on
    one. Host names are lowercased and IP addresses written canonically, so an entry matches
    however a URL spells the same host. Raises ValueError saying what is wrong, worded to follow
    the place it is found at (`web.allow_hosts[0] must be ...`).
    """
    text = entry.strip().lower()
    if text == "*":
        return "*", None
    port: int | None = None
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(f"must be [IPv6] or [IPv6]:port, not {_quote(entry)}")
        port_text = rest[1:] if rest else None
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:
        host, port_text = text, None  # a name, an IPv4 address, or a bare IPv6 address
    if port_text is not None:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ValueError(f"must have a port from 1 to 65535 after the colon: {_quote(entry)}")
        port = int(port_text)
    host = host.rstrip(".")
    try:
        return str(ipaddress.ip_address(host)), port
    except ValueError:
        pass
    if host.startswith("*.") and _HOST_NAME.fullmatch(host[2:]):
        return host, port
    if not _HOST_NAME.fullmatch(host):
        raise ValueError(f"must be a host name, an IP address or host:port, not {_quote(entry)}")
    return host, port


_HOST_NAME = re.compile(r"(?=.{1,253}$)[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?(\.[a-z0-9_-]{1,63})*")
