"""Which network addresses are public: where a worker may send what people ask it to
(A2A push configs), as the API's door checks a literal address and the worker's client
checks every address a host resolves to (`activities.public_http`)."""

from __future__ import annotations

import ipaddress

__all__ = ["is_public"]

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
"""IPv6 addresses a NAT64 gateway turns into the IPv4 address in their last 4 bytes."""


def is_public(address: str) -> bool:
    """Whether `address` is a global unicast address: not loopback, private, shared
    (100.64/10), link-local (169.254.169.254, the clouds' metadata), reserved, multicast
    or unspecified. An IPv4 address carried in IPv6 (mapped, or NAT64's) is judged as
    itself. `ValueError` for a string that is no address."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        elif ip in _NAT64:
            ip = ipaddress.IPv4Address(ip.packed[-4:])
    return ip.is_global and not ip.is_multicast
