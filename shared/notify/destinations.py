"""Where a webhook may point. Pure.

A user's webhook is a request paiq makes from inside the cluster, so by default it may not reach what only the
inside can: loopback, link-local (169.254.0.0/16, the cloud metadata endpoint 169.254.169.254 among them; and
fe80::/10), the private ranges (10/8, 172.16/12, 192.168/16, 100.64/10) and IPv6 unique-local (fc00::/7), nor
an unspecified, multicast or reserved address, as GitLab refuses "requests to the local network" by default.
An operator allows some with ``PAIQ_NOTIFY_WEBHOOK_ALLOW``: comma-separated host names (allowed whatever they
resolve to), addresses and CIDR ranges (an address in one is allowed), or ``*`` for anything.

The rule is checked twice: on the URL when a subscription is made (a literal address, ``localhost``; the
submit service also checks what the name resolves to then), and on the addresses the name resolves to when
the notifier connects (so a name that later resolves inside, or a DNS answer that changes, is refused too).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

ALLOW_SETTING = "PAIQ_NOTIFY_WEBHOOK_ALLOW"
_HOST = re.compile(r"(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*\.?")
_SHARED = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT: inside some clusters' networks


def parse_allow(raw: str) -> tuple[str, ...]:
    """``PAIQ_NOTIFY_WEBHOOK_ALLOW``'s text: its entries, each a host name, an address, a CIDR range or ``*``."""
    entries = tuple(e.strip().lower() for e in raw.split(",") if e.strip())
    for entry in entries:
        if entry == "*" or _HOST.fullmatch(entry):
            continue
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise ValueError(f"must be comma-separated host names, addresses or CIDR ranges (or *), got "
                             f"{entry!r}") from None
    return entries


def why_internal(address: Address) -> str | None:
    """What kind of inside address ``address`` is (None: a public one)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address (the cloud metadata endpoint's range)"
    if address.is_unspecified or address.is_multicast or address.is_reserved:
        return "not a unicast address"
    if isinstance(address, ipaddress.IPv6Address) and address in ipaddress.ip_network("fc00::/7"):
        return "a unique-local address"
    if address.is_private or (isinstance(address, ipaddress.IPv4Address) and address in _SHARED):
        return "a private address"
    return None


def _literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Destinations:
    """The operator's allow-list, read once from the settings (:func:`parse_allow`'s entries)."""

    allow: tuple[str, ...] = ()

    @property
    def anything(self) -> bool:
        return "*" in self.allow

    def _networks(self) -> list[Network]:
        out = []
        for entry in self.allow:
            try:
                out.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                continue
        return out

    def host_allowed(self, host: str) -> bool:
        """Whether the operator allowed this host name whatever it resolves to."""
        return self.anything or host.lower().rstrip(".") in {e.rstrip(".") for e in self.allow}

    def address_refusal(self, host: str, address: Address) -> str | None:
        """Why a connection to ``address`` (what ``host`` resolved to) is refused; None: allowed."""
        if self.host_allowed(host):
            return None
        why = why_internal(address)
        if why is None or any(address in net for net in self._networks() if net.version == address.version):
            return None
        named = host if _literal(host) else f"{host} ({address})"
        return (f"{named} is {why}: webhooks may not point into the cluster's own network unless the operator "
                f"allows it ({ALLOW_SETTING})")

    def url_refusal(self, url: str) -> str | None:
        """Why a webhook URL is refused as written (a literal inside address, localhost); None: not as written
        (what its name resolves to is checked apart)."""
        host = (urlsplit(url).hostname or "").lower()
        if self.host_allowed(host):
            return None
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            if host.rstrip(".") == "localhost" or host.rstrip(".").endswith(".localhost"):
                return (f"{host} is a loopback address: webhooks may not point into the cluster's own network "
                        f"unless the operator allows it ({ALLOW_SETTING})")
            return None
        return self.address_refusal(host, address)
